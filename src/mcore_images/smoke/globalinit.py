"""Overwrite a megatron model chunk's weights with its shard of the name-seeded global model.

megatron-core's own initialisation seeds per rank, so tp2 and dp-only start from different models and
their losses cannot be compared. Here every parameter is drawn in its global shape from a seed of its
global name and the local shard is cut out with the slicing math in ``smoke.shards``.
"""

from __future__ import annotations

import torch
from megatron.core import parallel_state as ps

from mcore_images.smoke.kit.model_size import ModelSize
from mcore_images.smoke.kit.seeds import seed_for
from mcore_images.smoke.shards import (
    Split,
    canonical_name,
    expected_global_shape,
    global_name,
    global_shape,
    init_std,
    shard_ranges,
)


def _maps(chunk: torch.nn.Module) -> tuple[dict[int, int], dict[int, list[int]]]:
    """Local layer index → global layer index, and global layer → global indices of local experts."""
    decoder = getattr(chunk, "decoder", None)
    layers = list(decoder.layers) if decoder is not None else []
    numbers = {i: layer.layer_number - 1 for i, layer in enumerate(layers)}
    experts = {
        layer.layer_number - 1: [int(e) for e in layer.mlp.local_expert_indices]
        for layer in layers
        if hasattr(layer.mlp, "local_expert_indices")
    }
    return numbers, experts


def _split(name: str, param: torch.nn.Parameter, gated: bool) -> tuple[Split, int, int]:
    """How ``param`` is split, and the (size, rank) of the tensor-parallel group that splits it."""
    if not getattr(param, "tensor_model_parallel", False):
        return Split(), 1, 0
    split = Split(dim=int(param.partition_dim), glu=gated and name.endswith("linear_fc1.weight"))
    if ".experts." in name:
        return split, ps.get_expert_tensor_parallel_world_size(), ps.get_expert_tensor_parallel_rank()
    return split, ps.get_tensor_model_parallel_world_size(), ps.get_tensor_model_parallel_rank()


@torch.no_grad()
def apply(chunk: torch.nn.Module, *, base_seed: int, shape: ModelSize, gated: bool) -> dict[str, tuple]:
    """Initialise every parameter of ``chunk`` in place; returns {global name: global shape}."""
    dims = dict(hidden=shape.hidden, ffn=shape.ffn, moe_ffn=shape.moe_ffn, vocab=shape.vocab, seq=shape.seq,
                experts=shape.experts)
    numbers, experts = _maps(chunk)
    shapes: dict[str, tuple] = {}
    for name, param in chunk.named_parameters():
        gname = canonical_name(global_name(name, numbers, experts))
        split, size, rank = _split(name, param, gated)
        gshape = global_shape(tuple(param.shape), split, size)
        want = expected_global_shape(gname, **dims)
        if want is not None and gshape != want:
            raise RuntimeError(
                f"{name}: local {tuple(param.shape)} split {split} over {size} rank(s) gives global {gshape}, "
                f"expected {want}: megatron's tensor-parallel attributes do not describe this shard"
            )
        mean, std = init_std(gname, gshape, shape.layers)
        gen = torch.Generator().manual_seed(seed_for(gname, base_seed))
        full = torch.randn(gshape, generator=gen, dtype=torch.float32) * std + mean
        if split.dim is not None:
            ranges = shard_ranges(gshape[split.dim], split, size, rank)
            full = torch.cat([full.narrow(split.dim, a, b - a) for a, b in ranges], dim=split.dim)
        if tuple(full.shape) != tuple(param.shape):
            raise RuntimeError(f"{name}: shard {tuple(full.shape)} does not fit parameter {tuple(param.shape)}")
        param.copy_(full)
        shapes[gname] = gshape
    return shapes
