"""Gradient accumulation fusion in the smoke's programs: on wherever this environment can fuse, as the frameworks run
it, and recorded with its provider (catalogue.wgrad_fusion says who provides it)."""

from __future__ import annotations

from typing import Any

from mcore_images.catalogue import wgrad_fusion


def gradient_accumulation_fusion(cpu: bool) -> dict[str, Any]:
    """Gradient accumulation fusion as the frameworks run it by default (on: Megatron-LM, Megatron-Bridge's
    providers, verl), wherever this environment can fuse: the certificate's record of it. Off only where no
    ``fused_weight_gradient_mlp_cuda`` imports, or on a CPU run whose provider is apex (CUDA tensors only)."""
    provider = wgrad_fusion.provider()
    on = provider is not None and (not cpu or provider == wgrad_fusion.OURS)
    if on:
        why = f"on, as the frameworks default to: {wgrad_fusion.MODULE} from {provider}"
    elif provider is None:
        why = f"off: no {wgrad_fusion.MODULE} imports here (the frameworks' default would stop at the first step)"
    else:
        why = f"off on the CPU: {provider}'s {wgrad_fusion.MODULE} runs on CUDA tensors only"
    return {"on": on, "provider": provider if on else None, "why": why}
