"""Global-name initialisation math: names, std-devs, shard slices and CP token indices.

Every weight is drawn from a generator seeded by its *global* name (global layer index, global expert
index), in its *global* shape, and then sliced for the local shard. So every layout starts from the
same global model and step-0 results can be compared across layouts. Pure Python: the host tests
check the slicing math without torch.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

_LAYER = re.compile(r"(^|\.)layers\.(\d+)\.")
_EXPERT = re.compile(r"(\.local_experts\.)(\d+)\.")


def global_name(local: str, layer_numbers: dict[int, int], expert_indices: dict[int, list[int]]) -> str:
    """Map a rank's local parameter name to the global one.

    ``layer_numbers`` maps a local layer index to its global 0-based index (pp offset, vpp chunk);
    ``expert_indices[global_layer]`` lists the global expert index of each local expert (ep offset).
    Names outside ``decoder.layers`` (embeddings, final norm, output layer) are already global.
    """
    match = _LAYER.search(local)
    if not match:
        return local
    glayer = layer_numbers[int(match.group(2))]
    name = f"{local[: match.start(2)]}{glayer}{local[match.end(2):]}"
    experts = expert_indices.get(glayer, [])
    emat = _EXPERT.search(name)
    if emat:
        gexp = experts[int(emat.group(2))]
        name = f"{name[: emat.start(2)]}{gexp}{name[emat.end(2):]}"
    return name


def canonical_name(name: str) -> str:
    """Spec-neutral name: TE fuses the pre-attention/pre-MLP norms into the next linear's params.

    Using the local spec's names for the seed gives the TE and local models the same weights too.
    Experts are always SequentialMLP (``local_experts.N``) in this suite, in both specs.
    """
    name = name.replace("self_attention.linear_qkv.layer_norm_", "input_layernorm.")
    return name.replace("mlp.linear_fc1.layer_norm_", "pre_mlp_layernorm.")


@dataclass(frozen=True)
class Split:
    """How a tensor is cut across the tensor-parallel ranks."""

    dim: int | None = None
    """Partitioned dimension, None when every TP rank holds the full tensor."""
    glu: bool = False
    """Gated-linear-unit fc1: the global rows are [gate; up] and each rank holds [gate_r; up_r]."""


def global_shape(local_shape: tuple[int, ...], split: Split, tp: int) -> tuple[int, ...]:
    """The full tensor's shape, from the shard's shape and how it is split."""
    if split.dim is None:
        return tuple(local_shape)
    shape = list(local_shape)
    shape[split.dim] *= tp
    return tuple(shape)


def shard_ranges(full: int, split: Split, tp: int, rank: int) -> list[tuple[int, int]]:
    """Index ranges along the split dimension that rank ``rank`` of ``tp`` holds, in local order."""
    if split.dim is None or tp == 1:
        return [(0, full)]
    if not 0 <= rank < tp:
        raise ValueError(f"tp rank {rank} outside 0..{tp - 1}")
    if split.glu:
        if full % (2 * tp):
            raise ValueError(f"glu size {full} not divisible by 2·tp={2 * tp}")
        half, part = full // 2, full // (2 * tp)
        return [(rank * part, (rank + 1) * part), (half + rank * part, half + (rank + 1) * part)]
    if full % tp:
        raise ValueError(f"size {full} not divisible by tp={tp}")
    part = full // tp
    return [(rank * part, (rank + 1) * part)]


def init_kind(name: str) -> str:
    """Which distribution a parameter gets, from its canonical name."""
    if "norm" in name:
        return "norm_bias" if name.endswith("bias") else "norm_weight"
    if name.endswith("bias"):
        return "bias"
    if "embedding" in name:
        return "embedding"
    if name.startswith("output_layer"):
        return "output"
    return "linear"


def init_std(name: str, gshape: tuple[int, ...], num_layers: int) -> tuple[float, float]:
    """(mean, std) for a parameter.

    Linear weights get 1/sqrt(fan_in) so activations keep unit scale; the residual outputs
    (linear_proj, fc2) are further scaled by 1/sqrt(2·layers). The output layer gets 2/sqrt(hidden)
    so step-0 logits have std ≈ 2: the step-0 loss then depends on every weight instead of sitting
    at ln(vocab), which would make the parity check blind. Norm weights are 1 ± 0.1 so a wrong
    slice or copy of a replicated tensor changes the result too.
    """
    kind = init_kind(name)
    if kind == "norm_weight":
        return 1.0, 0.1
    if kind in ("norm_bias", "bias"):
        return 0.0, 0.1
    if kind == "embedding":
        return 0.0, 1.0
    fan_in = gshape[-1] if len(gshape) > 1 else 1
    if kind == "output":
        return 0.0, 2.0 / math.sqrt(fan_in)
    std = 1.0 / math.sqrt(fan_in)
    if name.endswith(("linear_proj.weight", "linear_fc2.weight")) or ".linear_fc2.weight" in name:
        std /= math.sqrt(2 * num_layers)
    return 0.0, std


def expected_global_shape(name: str, *, hidden: int, ffn: int, moe_ffn: int, vocab: int, seq: int,
                          experts: int) -> tuple[int, ...] | None:
    """The TP=1 shape a canonical global name must have (None for names this suite does not know).

    globalinit compares every reconstructed global shape with this, so a parameter whose split
    megatron did not describe (or described wrongly) fails loudly instead of silently breaking parity.
    """
    table: list[tuple[str, tuple[int, ...]]] = [
        ("embedding.word_embeddings.weight", (vocab, hidden)),
        ("embedding.position_embeddings.weight", (seq, hidden)),
        ("output_layer.weight", (vocab, hidden)),
        ("layernorm.weight", (hidden,)),
        ("layernorm.bias", (hidden,)),
        ("self_attention.linear_qkv.weight", (3 * hidden, hidden)),
        ("self_attention.linear_proj.weight", (hidden, hidden)),
        ("mlp.router.weight", (experts, hidden)),
        ("mlp.linear_fc1.weight", (2 * ffn, hidden)),
        ("mlp.linear_fc2.weight", (hidden, ffn)),
    ]
    if ".experts.local_experts." in name:
        return (2 * moe_ffn, hidden) if name.endswith("linear_fc1.weight") else (
            (hidden, moe_ffn) if name.endswith("linear_fc2.weight") else None)
    return next((shape for suffix, shape in table if name.endswith(suffix)), None)


def cp_token_indices(seq: int, cp: int, rank: int) -> list[int]:
    """Token positions a context-parallel rank holds: chunks ``rank`` and ``2·cp-1-rank`` of 2·cp.

    This is Megatron's load-balanced causal split (each rank gets an early and a late chunk).
    """
    if seq % (2 * cp):
        raise ValueError(f"sequence {seq} not divisible by 2·cp={2 * cp}")
    chunk = seq // (2 * cp)
    first, second = rank, 2 * cp - 1 - rank
    return list(range(first * chunk, (first + 1) * chunk)) + list(range(second * chunk, (second + 1) * chunk))


def batch_slice(global_batch: int, dp: int, dp_rank: int) -> tuple[int, int]:
    """Sequences [start, stop) of the global batch that one data-parallel rank trains on."""
    if global_batch % dp:
        raise ValueError(f"global batch {global_batch} not divisible by dp={dp}")
    per = global_batch // dp
    return dp_rank * per, (dp_rank + 1) * per


def micro_batch_split(sequences: int, pp: int) -> tuple[int, int]:
    """(micro-batches, sequences each) for a rank's share of the batch: one micro-batch per pipeline stage
    (the fewest a pipeline schedule runs with; interleaved schedules need a multiple of pp)."""
    if sequences % pp:
        raise ValueError(f"{sequences} sequences per rank cannot be split into {pp} equal micro-batches")
    return pp, sequences // pp
