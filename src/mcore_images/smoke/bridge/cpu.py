"""CPU stand-ins for the Transformer Engine modules in a bridge's layer spec (``--cpu`` runs only).

Both bridges build Megatron models from Transformer Engine layer specs (mbridge hard-codes
``use_transformer_engine=True``), and TE's modules compute on CUDA only. For the CPU check, the
spec the bridge built is copied with each TE module class replaced by a torch module that holds
the *same parameters under the same names* (``layer_norm_weight`` next to ``weight`` in the fused
norm+linear, ``weight0..N`` in the grouped expert linear) and computes the same function: RMSNorm
or LayerNorm in fp32, then megatron-core's own Column/RowParallelLinear, its DotProductAttention,
its TEGroupedMLP around a per-expert matmul. The bridge's name mapping, its q/k/v and gate/up
packing and megatron-core's model code therefore run unchanged; only the kernels differ. On a GPU
nothing here is used and the bridge's TE spec runs as built.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from megatron.core.tensor_parallel.layers import (
    ColumnParallelLinear,
    RowParallelLinear,
    set_tensor_model_parallel_attributes,
)
from megatron.core.transformer.dot_product_attention import DotProductAttention

from mcore_images.smoke.kit import transformer_engine as te
from mcore_images.smoke.kit.errors import CouldNotRun


def _norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float, rms: bool,
          zero_centered: bool) -> torch.Tensor:
    """TE's normalisation: computed in fp32, returned in the input's dtype."""
    w = weight.float() + 1.0 if zero_centered else weight.float()
    xf = x.float()
    if rms:
        out = F.rms_norm(xf, (xf.shape[-1],), w, eps)
    else:
        out = F.layer_norm(xf, (xf.shape[-1],), w, None if bias is None else bias.float(), eps)
    return out.to(x.dtype)


def _norm_params(module: torch.nn.Module, prefix: str, size: int, config: Any) -> None:
    """``<prefix>weight`` (and ``<prefix>bias`` for LayerNorm), initialised as TE does."""
    dtype = config.params_dtype
    init = torch.zeros if config.layernorm_zero_centered_gamma else torch.ones
    weight = torch.nn.Parameter(init(size, dtype=dtype))
    weight.sequence_parallel = config.sequence_parallel
    module.register_parameter(f"{prefix}weight", weight)
    if config.normalization == "LayerNorm":
        bias = torch.nn.Parameter(torch.zeros(size, dtype=dtype))
        bias.sequence_parallel = config.sequence_parallel
        module.register_parameter(f"{prefix}bias", bias)
    elif config.normalization != "RMSNorm":
        raise CouldNotRun(f"no CPU stand-in for normalization '{config.normalization}': run on a GPU")


class CpuNorm(torch.nn.Module):
    """Stands in for TENorm (te.pytorch.RMSNorm / LayerNorm): parameters ``weight`` [, ``bias``]."""

    def __init__(self, config: Any, hidden_size: int, eps: float = 1e-5, **_: Any) -> None:
        super().__init__()
        self.config, self.eps = config, eps
        _norm_params(self, "", hidden_size, config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _norm(x, self.weight, getattr(self, "bias", None), self.eps, self.config.normalization == "RMSNorm",
                     self.config.layernorm_zero_centered_gamma)


class CpuNormColumnParallelLinear(ColumnParallelLinear):
    """Stands in for TELayerNormColumnParallelLinear: the norm's ``layer_norm_weight`` [``layer_norm_bias``]
    beside megatron's ColumnParallelLinear ``weight`` [``bias``]; forward = linear(norm(x))."""

    def __init__(self, input_size: int, output_size: int, *, config: Any, init_method: Callable, gather_output: bool,
                 bias: bool, skip_bias_add: bool, is_expert: bool, skip_weight_param_allocation: bool = False,
                 tp_comm_buffer_name: str | None = None, tp_group: Any = None, stride: int = 1) -> None:
        super().__init__(input_size, output_size, config=config, init_method=init_method, bias=bias,
                         gather_output=gather_output, stride=stride, skip_bias_add=skip_bias_add,
                         skip_weight_param_allocation=skip_weight_param_allocation, is_expert=is_expert,
                         tp_comm_buffer_name=tp_comm_buffer_name, tp_group=tp_group)
        _norm_params(self, "layer_norm_", input_size, config)

    def forward(self, input_: torch.Tensor, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, Any]:
        normed = _norm(input_, self.layer_norm_weight, getattr(self, "layer_norm_bias", None),
                       self.config.layernorm_epsilon, self.config.normalization == "RMSNorm",
                       self.config.layernorm_zero_centered_gamma)
        return super().forward(normed, *args, **kwargs)


class CpuActivation(torch.nn.Module):
    """Stands in for TEActivationOp (built only with use_te_activation_func): the config's activation,
    as a gated linear unit (first half gated, like TE's SwiGLU) when gated_linear_unit is set."""

    def __init__(self, config: Any, **_: Any) -> None:
        super().__init__()
        self.config = config

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.config.gated_linear_unit:
            gate, up = torch.chunk(x, 2, dim=-1)
            return self.config.activation_func(gate) * up
        return self.config.activation_func(x)


class _CpuGroupedLinear(torch.nn.Module):
    """Stands in for TE's GroupedLinear: ``weight0..weight{n-1}`` (and ``bias0..``), one matmul per expert
    over that expert's slice of the permuted tokens (``m_splits`` rows each)."""

    partition_dim = 0

    def __init__(self, num_gemms: int, input_size: int, output_size: int, *, config: Any, init_method: Callable,
                 bias: bool, skip_bias_add: bool, is_expert: bool, tp_comm_buffer_name: str | None = None,
                 pg_collection: Any = None, **_: Any) -> None:
        super().__init__()
        if config.expert_tensor_parallel_size not in (None, 1) or config.expert_model_parallel_size != 1:
            raise CouldNotRun("the CPU grouped-linear stand-in runs one rank only (expert TP/EP 1): run on a GPU")
        self.config, self.num_gemms, self.skip_bias_add, self.use_bias = config, num_gemms, skip_bias_add, bias
        expert_parallel = config.expert_model_parallel_size > 1
        for i in range(num_gemms):
            weight = torch.nn.Parameter(torch.empty(output_size, input_size, dtype=config.params_dtype))
            if config.perform_initialization:
                init_method(weight)
            set_tensor_model_parallel_attributes(weight, is_parallel=True, dim=self.partition_dim, stride=1)
            weight.allreduce = not (is_expert and expert_parallel)
            self.register_parameter(f"weight{i}", weight)
            if bias:
                b = torch.nn.Parameter(torch.zeros(output_size, dtype=config.params_dtype))
                b.allreduce = not (is_expert and expert_parallel)
                self.register_parameter(f"bias{i}", b)

    def forward(self, x: torch.Tensor, m_splits: list[int]) -> tuple[torch.Tensor, Any]:
        outs, biases = [], []
        for i, chunk in enumerate(torch.split(x, list(m_splits))):
            out = chunk @ getattr(self, f"weight{i}").t()
            if self.use_bias:
                bias = getattr(self, f"bias{i}")
                biases.append(bias)
                if not self.skip_bias_add:
                    out = out + bias
            outs.append(out)
        return torch.cat(outs), (biases if self.use_bias and self.skip_bias_add else None)


class CpuColumnParallelGroupedLinear(_CpuGroupedLinear):
    partition_dim = 0


class CpuRowParallelGroupedLinear(_CpuGroupedLinear):
    partition_dim = 1


STAND_INS: dict[str, type] = {
    "TELayerNormColumnParallelLinear": CpuNormColumnParallelLinear,
    "TEColumnParallelLinear": ColumnParallelLinear,
    "TERowParallelLinear": RowParallelLinear,
    "TENorm": CpuNorm,
    "TEDotProductAttention": DotProductAttention,
    "TEColumnParallelGroupedLinear": CpuColumnParallelGroupedLinear,
    "TERowParallelGroupedLinear": CpuRowParallelGroupedLinear,
    "TEActivationOp": CpuActivation,
}


def _swap_class(cls: type, swapped: dict[str, str]) -> type:
    if not te.is_te_class(cls):
        return cls
    stand_in = STAND_INS.get(cls.__name__)
    if stand_in is None:
        raise CouldNotRun(f"the bridge's layer spec uses {cls.__module__}.{cls.__name__}, which has no CPU "
                          "stand-in in src/mcore_images/smoke/bridge/cpu.py: run the bridge check on a GPU")
    swapped[cls.__name__] = stand_in.__name__
    return stand_in


def cpu_spec(spec: Any, swapped: dict[str, str] | None = None) -> Any:
    """A copy of a layer/block spec with every Transformer Engine class replaced by its CPU stand-in.
    ``swapped`` collects {TE class: stand-in} for the report. The bridge's own spec objects are not changed."""
    swapped = swapped if swapped is not None else {}
    if isinstance(spec, type):
        return _swap_class(spec, swapped)
    if dataclasses.is_dataclass(spec):
        changes = {f.name: cpu_spec(getattr(spec, f.name), swapped) for f in dataclasses.fields(spec) if f.init}
        return dataclasses.replace(spec, **changes)
    if isinstance(spec, list):
        return [cpu_spec(item, swapped) for item in spec]
    if isinstance(spec, tuple):
        return tuple(cpu_spec(item, swapped) for item in spec)
    return spec
