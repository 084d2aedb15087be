"""Run megatron-core's GPU code paths on CPU (gloo), for CI machines without a GPU (``--cpu`` only).

megatron-core picks its device by hand in ~130 places (``torch.cuda.current_device()``,
``device="cuda"``, ``.cuda()``, CUDA streams and RNG state). Redirecting exactly those to the CPU lets
CI run the real model, DDP, optimizer and pipeline schedules under gloo with several processes, so the
layout planning, global-name initialisation, slicing and parity checks are exercised without a GPU.
Never installed on a GPU run.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.overrides import TorchFunctionMode

_CPU = torch.device("cpu")


def _to_cpu(device: Any) -> Any:
    """Map any CUDA device spelling (``"cuda"``, ``"cuda:0"``, ``torch.device``, an index) to CPU."""
    if isinstance(device, str) and device.startswith("cuda"):
        return _CPU
    if isinstance(device, torch.device) and device.type == "cuda":
        return _CPU
    if isinstance(device, int) and not isinstance(device, bool):
        return _CPU
    return device


class _CudaToCpu(TorchFunctionMode):
    """Rewrites ``device=`` of factory calls, ``Tensor.cuda()`` and ``Tensor.to("cuda")`` to CPU."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = dict(kwargs or {})
        if "device" in kwargs:
            kwargs["device"] = _to_cpu(kwargs["device"])
        if func is torch.Tensor.cuda:
            return args[0]
        if func is torch.Tensor.to:
            args = tuple(_to_cpu(a) if isinstance(a, str | torch.device) else a for a in args)
        if func is torch.Tensor.type and len(args) == 1 and not kwargs:
            # clip_grads asserts 'torch.cuda.FloatTensor'; report CPU tensors under the CUDA name.
            name = func(*args)
            return name if name.startswith("torch.cuda.") else name.replace("torch.", "torch.cuda.", 1)
        return func(*args, **kwargs)


class _NullStream:
    """Stands in for CUDA streams and events: on CPU every operation is already ordered."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __enter__(self) -> _NullStream:
        return self

    def __exit__(self, *exc: object) -> bool:
        return False

    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: _NullStream() if name == "record_event" else (True if name == "query" else None)


def install() -> None:
    """Redirect CUDA device picks to CPU for the rest of this process (before megatron-core runs)."""
    torch.cuda.current_device = lambda: _CPU  # type: ignore[assignment,return-value]
    torch.cuda.synchronize = lambda *a, **k: None  # type: ignore[assignment]
    torch.cuda.Stream = _NullStream  # type: ignore[assignment,misc]
    torch.cuda.Event = _NullStream  # type: ignore[assignment,misc]
    torch.cuda.current_stream = lambda *a, **k: _NullStream()  # type: ignore[assignment]
    torch.cuda.stream = lambda *a, **k: _NullStream()  # type: ignore[assignment]
    torch.cuda.device_count = lambda: 1  # type: ignore[assignment]
    torch.cuda.manual_seed = lambda seed: torch.manual_seed(seed)  # type: ignore[assignment]
    torch.cuda.get_rng_state = lambda *a, **k: torch.get_rng_state()  # type: ignore[assignment]
    torch.cuda.set_rng_state = lambda state, *a, **k: torch.set_rng_state(state)  # type: ignore[assignment]
    _CudaToCpu().__enter__()


def patch_megatron() -> None:
    """Point megatron-core's CUDA RNG tracker at the CPU generator (after importing megatron)."""
    from megatron.core.tensor_parallel import random as mrandom
    from megatron.core.transformer.moe import moe_utils

    mrandom._get_cuda_rng_state = lambda *a, **k: torch.get_rng_state()
    mrandom._set_cuda_rng_state = lambda state, *a, **k: torch.set_rng_state(state)
    if not hasattr(moe_utils, "te_general_gemm"):
        # megatron-core 0.16 reads this name without defining it when TE is absent.
        moe_utils.te_general_gemm = None


class _HideTransformerEngine:
    """A meta-path finder that makes ``transformer_engine`` unimportable for this process."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "transformer_engine" or name.startswith("transformer_engine."):
            raise ModuleNotFoundError(f"No module named {name!r} (hidden for the CPU smoke run)", name=name)


def hide_transformer_engine() -> None:
    """Keep megatron-core off Transformer Engine in a CPU run (call before importing megatron).

    With TE installed, megatron-core uses it even under the local spec: its optimizer takes TE's
    FusedAdam and multi-tensor grad norm, CUDA kernels both (the block's final norm the kit's GPT
    builder keeps local itself). Hidden, megatron-core takes its torch fallbacks, which is what the
    local spec on CPU means.
    """
    import sys

    if not any(isinstance(f, _HideTransformerEngine) for f in sys.meta_path):
        sys.meta_path.insert(0, _HideTransformerEngine())
