"""The cases and the check: megatron-core's tensor-parallel linear layers with ``gradient_accumulation_fusion`` on,
one backward each, and every element of ``main_grad`` against ``main_grad before + grad_output^T @ input`` in fp64.

A layer's backward calls ``fused_weight_gradient_mlp_cuda.wgrad_gemm_accum_fp32`` (fp32 main_grad) or
``wgrad_gemm_accum_fp16`` (a half-precision one) with its flattened input and output gradient. Under sequence
parallelism it first gathers the input into megatron's global buffer and reduce-scatters the input gradient; the
layers turn sequence parallelism off on one tensor-parallel rank, so those cases call the autograd function both
layers run (``linear_with_grad_accumulation_and_async_allreduce``) with ``sequence_parallel=True`` on a one-rank
tensor-parallel group: the gather, the buffer and the reduce-scatter run, with one rank's data (two ranks need two
GPUs). main_grad starts non-zero, so a module that overwrites it instead of adding fails. The limit is
``numerics.wgrad_accumulation_bound``.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

from mcore_images.smoke.kit import numerics
from mcore_images.smoke.kit.releases import supported


@dataclass(frozen=True)
class Case:
    """One layer's backward: its kind, input dtype, main_grad dtype, [seq, batch, in] -> out, sequence parallel."""

    layer: str
    dtype: str
    main_grad: str
    seq: int
    batch: int
    in_features: int
    out_features: int
    sequence_parallel: bool

    @property
    def id(self) -> str:
        sp = "-sp" if self.sequence_parallel else ""
        return (f"{self.layer}-{self.dtype}-into-{self.main_grad}{sp}-"
                f"{self.seq}x{self.batch}x{self.in_features}-{self.out_features}")


def cases(gpu: bool) -> list[Case]:
    """Column (hidden -> 4 hidden, as a fused QKV or FC1) and row (4 hidden -> hidden, as FC2) layers, bf16 and
    fp16 inputs, main_grad in fp32 (megatron's DDP) and in the inputs' dtype, with and without sequence
    parallelism. On a GPU a 1B model's widths and a 4k-token micro-batch; on the CPU small ones (the contract,
    not the kernel, is what a CPU can check)."""
    seq, batch, hidden = (2048, 2, 2048) if gpu else (64, 2, 128)
    out = []
    for layer, (fan_in, fan_out) in (("column", (hidden, 4 * hidden)), ("row", (4 * hidden, hidden))):
        for dtype in ("bf16", "fp16"):
            for main_grad in ("fp32", dtype):
                for sp in (False, True):
                    out.append(Case(layer, dtype, main_grad, seq, batch, fan_in, fan_out, sp))
    return out


def _dtype(torch: Any, name: str) -> Any:
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[name]


def _build(case: Case, torch: Any, device: Any) -> tuple[Any, Any]:
    """(forward, weight): megatron-core's layer for ``case`` with fusion on, or under sequence parallelism the
    autograd function the layers run, on this rank's tensor-parallel group; the weight in the input dtype."""
    from megatron.core import parallel_state as ps
    from megatron.core.model_parallel_config import ModelParallelConfig
    from megatron.core.tensor_parallel import layers

    dtype = _dtype(torch, case.dtype)
    if case.sequence_parallel:
        weight = torch.nn.Parameter(torch.randn(case.out_features, case.in_features).to(device, dtype))
        linear = layers.linear_with_grad_accumulation_and_async_allreduce
        return (lambda x: linear(**supported(linear, input=x, weight=weight, bias=None,
                                             gradient_accumulation_fusion=True, allreduce_dgrad=False,
                                             sequence_parallel=True, tp_group=ps.get_tensor_model_parallel_group())),
                weight)
    config = ModelParallelConfig(gradient_accumulation_fusion=True, params_dtype=dtype,
                                 use_cpu_initialization=device.type == "cpu")
    init = torch.nn.init.normal_
    if case.layer == "column":
        layer = layers.ColumnParallelLinear(case.in_features, case.out_features, config=config, init_method=init,
                                            bias=False, gather_output=False)
    else:
        layer = layers.RowParallelLinear(case.in_features, case.out_features, config=config, init_method=init,
                                         bias=False, input_is_parallel=True, skip_bias_add=True)
    layer = layer.to(device)
    return (lambda x: layer(x)[0]), layer.weight


def run_case(case: Case, torch: Any, device: Any, seed: int) -> dict[str, Any]:
    """One backward; the largest error as a fraction of its element's limit (<= 1 passes)."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    dtype = _dtype(torch, case.dtype)
    x = torch.randn(case.seq, case.batch, case.in_features, generator=gen).to(device, dtype).requires_grad_()
    g = torch.randn(case.seq, case.batch, case.out_features, generator=gen).to(device, dtype)
    before = torch.randn(case.out_features, case.in_features, generator=gen).to(device, _dtype(torch, case.main_grad))
    forward, weight = _build(case, torch, device)
    weight.main_grad = before.clone()  # before the forward: the layer hands it to its backward from there
    forward(x).backward(g)
    x2, g2 = x.detach().reshape(-1, case.in_features).double(), g.reshape(-1, case.out_features).double()
    product = g2.t() @ x2
    gamma, u_out = numerics.wgrad_accumulation_bound(x2.shape[0], case.main_grad)
    limit = gamma * (g2.abs().t() @ x2.abs()) + 2 * u_out * (before.double().abs() + product.abs())
    error = (weight.main_grad.double() - (before.double() + product)).abs()
    ratio = float((error / limit.clamp_min(torch.finfo(torch.float64).tiny)).max())
    return {"case": case.id, **asdict(case), "max_error": float(error.max()), "max_error_over_limit": ratio,
            "passed": ratio <= 1.0 and weight.grad is None,
            "weight_grad": "left unset (fused)" if weight.grad is None else "set: the layer did not fuse"}


def time_case(case: Case, torch: Any, device: Any, module: Any, repeats: int = 20) -> dict[str, float]:
    """Milliseconds per call on a GPU, side by side in one run: the module's fused accumulation, and torch's two
    unfused ways (the product in the inputs' dtype then added, as megatron-core does with fusion off; the product
    of fp32 copies added in place)."""
    dtype, grad_dtype = _dtype(torch, case.dtype), _dtype(torch, case.main_grad)
    tokens = case.seq * case.batch
    x = torch.randn(tokens, case.in_features, device=device, dtype=dtype)
    g = torch.randn(tokens, case.out_features, device=device, dtype=dtype)
    main_grad = torch.zeros(case.out_features, case.in_features, device=device, dtype=grad_dtype)
    fused = module.wgrad_gemm_accum_fp32 if case.main_grad == "fp32" else module.wgrad_gemm_accum_fp16
    ways = {
        "fused_ms": lambda: fused(x, g, main_grad),
        "torch_unfused_ms": lambda: main_grad.add_(g.t() @ x),
        "torch_fp32_ms": lambda: main_grad.addmm_(g.t().float(), x.float()) if case.main_grad == "fp32"
        else main_grad.add_((g.t().float() @ x.float()).to(grad_dtype)),
    }
    timings = {}
    for name, call in ways.items():
        for _ in range(3):
            call()
        torch.cuda.synchronize(device)
        start = time.perf_counter()
        for _ in range(repeats):
            call()
        torch.cuda.synchronize(device)
        timings[name] = (time.perf_counter() - start) * 1e3 / repeats
    return timings
