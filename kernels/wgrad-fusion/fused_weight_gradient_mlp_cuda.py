"""megatron-core's gradient accumulation fusion, for images without apex.

With ``gradient_accumulation_fusion`` on (the default of Megatron-LM, of Megatron-Bridge's model providers and so of
verl's Megatron engine), megatron-core's ColumnParallelLinear and RowParallelLinear import this module by apex's
extension name and, in their backward, call ``wgrad_gemm_accum_fp32(input, grad_output, main_grad)`` when the
parameter's ``main_grad`` is fp32 and ``wgrad_gemm_accum_fp16`` when it is fp16 or bf16, with ``input`` [tokens, in]
and ``grad_output`` [tokens, out], both 2-D and contiguous: ``main_grad += grad_output^T @ input`` as one GEMM that
adds into ``main_grad`` in place, in fp32 arithmetic, so that no [out, in] weight gradient is ever materialised.

apex builds that as a CUDA extension over cuBLAS. Transformer Engine, which every image has, runs the same GEMM for
its own layers' fused weight-gradient accumulation (``general_gemm`` with ``accumulate=True`` into the output: cuBLASLt,
fp32 compute, beta 1); this module calls it with the arguments TE's own Linear passes. On the CPU (the smoke's CPU
runs, where megatron-core's CUDA paths are redirected) it adds torch's product in fp32: the same sum, no fusion.
"""

from __future__ import annotations

import inspect
from typing import Any

PROVIDER = "mcore-images-wgrad-fusion"
"""Who provides this module (apex's own extension has no such attribute): the smoke's certificate and the doctor
name it."""

GEMM = "transformer_engine.pytorch.cpp_extensions.general_gemm (accumulate=True)"
"""What computes the sum on a GPU."""

_gemm: Any = None


def _te_gemm() -> Any:
    """TE's general_gemm, imported on first use (TE is heavy to import, and megatron-core imports this module
    whenever its tensor-parallel layers load); TE 2.8 and older take the cuBLAS workspace from the caller."""
    global _gemm
    if _gemm is None:
        from transformer_engine.pytorch.cpp_extensions import general_gemm

        if "workspace" in inspect.signature(general_gemm).parameters:
            from transformer_engine.pytorch.module.base import get_workspace

            def _gemm(*args: Any, **kwargs: Any) -> Any:
                return general_gemm(*args, workspace=get_workspace(), **kwargs)
        else:
            _gemm = general_gemm
    return _gemm


def _accumulate(input: Any, grad_output: Any, main_grad: Any) -> None:
    """main_grad += grad_output^T @ input, in place; refuses what apex's extension refuses (shapes that do not
    multiply, a main_grad of another shape)."""
    if input.dim() != 2 or grad_output.dim() != 2:
        raise ValueError(f"wgrad_gemm_accum expects 2-D input and grad_output, got {tuple(input.shape)} and "
                         f"{tuple(grad_output.shape)}")
    tokens, in_features = input.shape
    if grad_output.shape[0] != tokens or tuple(main_grad.shape) != (grad_output.shape[1], in_features):
        raise ValueError(f"wgrad_gemm_accum: main_grad {tuple(main_grad.shape)} is not grad_output^T @ input of "
                         f"{tuple(grad_output.shape)} and {tuple(input.shape)}")
    if not main_grad.is_cuda:
        main_grad.add_((grad_output.t().float() @ input.float()).to(main_grad.dtype))
        return
    _te_gemm()(input, grad_output, out_dtype=main_grad.dtype, layout="NT", out=main_grad, accumulate=True, grad=True)


def wgrad_gemm_accum_fp32(input: Any, grad_output: Any, main_grad: Any) -> None:
    """main_grad (fp32) += grad_output^T @ input (fp16 or bf16): megatron-core's call for an fp32 main_grad."""
    _accumulate(input, grad_output, main_grad)


def wgrad_gemm_accum_fp16(input: Any, grad_output: Any, main_grad: Any) -> None:
    """main_grad (fp16 or bf16, the inputs' dtype) += grad_output^T @ input: megatron-core's call for a
    half-precision main_grad."""
    _accumulate(input, grad_output, main_grad)
