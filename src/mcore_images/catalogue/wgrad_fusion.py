"""Gradient accumulation fusion: which distribution gives megatron-core its ``fused_weight_gradient_mlp_cuda``.

megatron-core's ``gradient_accumulation_fusion`` is on by default in Megatron-LM, in Megatron-Bridge's model providers
and so in verl's Megatron engine; with it on, megatron-core's ColumnParallelLinear and RowParallelLinear import apex's
CUDA extension under that name and stop without it. A stack with apex (compiled from its commit, or the base image's)
has apex's; a stack without apex gets this project's module over Transformer Engine's GEMM (kernels/wgrad-fusion,
installed by the kernels layer). The image's label ``io.mcore-images.wgrad-fusion`` names the provider; the image
tests, the doctor and the smoke's certificate read the same answer from here.

Standard library only: the smoke and the doctor ask it inside images.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from typing import Any

MODULE = "fused_weight_gradient_mlp_cuda"
"""The module megatron-core imports (apex's extension name)."""
OURS = "mcore-images-wgrad-fusion"
"""The distribution kernels/wgrad-fusion builds (its pyproject.toml's name; its module's ``PROVIDER``)."""
APEX = "apex"
"""apex's distribution."""
LABEL = "io.mcore-images.wgrad-fusion"
"""The OCI label naming the provider, on every image from the kernels layer up."""
OFF_FLAGS = {
    "Megatron-LM": "--no-gradient-accumulation-fusion",
    "verl": "++actor_rollout_ref.actor.megatron.override_transformer_config.gradient_accumulation_fusion=False",
    "megatron-core": "TransformerConfig(gradient_accumulation_fusion=False)",
}
"""How each framework turns the fusion off, for an environment where no provider imports (the doctor names them).
verl's is a Hydra override that adds the key (``++``): verl's engine config does not list it, and Hydra refuses a
plain ``key=value`` for a key its config lacks ("Key 'gradient_accumulation_fusion' is not in struct", verl 0.8)."""


def expected_provider(stack: Any) -> str:
    """The distribution that provides MODULE in ``stack``'s images (any object with the stack's ``apex`` field):
    apex where the stack has apex, else this project's module."""
    return OURS if stack.apex == "none" else APEX


def provider() -> str | None:
    """The distribution that provides MODULE in this environment, or None where nothing does."""
    if importlib.util.find_spec(MODULE) is None:
        return None
    owners = importlib.metadata.packages_distributions().get(MODULE, [])
    return owners[0] if owners else "(no distribution)"
