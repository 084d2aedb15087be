"""Name-seeded global initialisation math: seeds, global names, shard slices, CP split, batch split."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mcore_images.smoke.kit.seeds import seed_for
from mcore_images.smoke.shards import (
    Split,
    batch_slice,
    canonical_name,
    cp_token_indices,
    expected_global_shape,
    global_name,
    global_shape,
    init_std,
    shard_ranges,
)
from tests.unit.conftest import PYTHONPATH


def test_seed_is_stable_across_processes_and_distinct_per_name() -> None:
    code = ("from mcore_images.smoke.kit.seeds import seed_for; "
            "print(seed_for('decoder.layers.3.mlp.linear_fc1.weight', 7))")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": "123", "PYTHONPATH": PYTHONPATH})
    assert int(other.stdout) == seed_for("decoder.layers.3.mlp.linear_fc1.weight", 7)
    assert seed_for("a", 1) != seed_for("b", 1) != seed_for("a", 2)
    assert 0 <= seed_for("x", 0) < 2**63


def test_global_names_use_global_layer_and_expert_indices() -> None:
    layers = {0: 4, 1: 5}  # pp stage 1 of 2, 8 layers
    experts = {5: [6, 7]}  # ep rank 3 of 4, 8 experts
    name = "decoder.layers.1.mlp.experts.local_experts.0.linear_fc2.weight"
    assert global_name(name, layers, experts) == "decoder.layers.5.mlp.experts.local_experts.6.linear_fc2.weight"
    assert global_name("decoder.layers.0.input_layernorm.weight", layers, experts) == (
        "decoder.layers.4.input_layernorm.weight")
    assert global_name("embedding.word_embeddings.weight", layers, experts) == "embedding.word_embeddings.weight"


def test_vpp_chunks_map_to_interleaved_layers() -> None:
    # pp2 vpp2 with 8 layers: rank 0 holds chunks [0,1] and [4,5]
    assert global_name("decoder.layers.1.mlp.linear_fc1.weight", {0: 4, 1: 5}, {}).startswith("decoder.layers.5.")


def test_te_fused_norm_names_map_to_local_spec_names() -> None:
    assert canonical_name("decoder.layers.2.self_attention.linear_qkv.layer_norm_weight") == (
        "decoder.layers.2.input_layernorm.weight")
    assert canonical_name("decoder.layers.2.mlp.linear_fc1.layer_norm_bias") == (
        "decoder.layers.2.pre_mlp_layernorm.bias")


@pytest.mark.parametrize(("local", "split", "tp", "full"), [
    ((512, 256), Split(dim=0), 2, (1024, 256)),   # column-parallel (vocab, qkv, fc1)
    ((256, 128), Split(dim=1), 2, (256, 256)),    # row-parallel (linear_proj, fc2)
    ((256,), Split(), 8, (256,)),                 # replicated norm
])
def test_global_shape_from_shard(local: tuple, split: Split, tp: int, full: tuple) -> None:
    assert global_shape(local, split, tp) == full


def test_column_and_row_slices_tile_the_tensor() -> None:
    for tp in (1, 2, 4, 8):
        covered = [r for rank in range(tp) for r in shard_ranges(1024, Split(dim=0), tp, rank)]
        assert covered == [(i * 1024 // tp, (i + 1) * 1024 // tp) for i in range(tp)]


def test_glu_fc1_slices_take_gate_and_up_halves() -> None:
    # global fc1 rows = [gate 0..2047; up 2048..4095]; tp rank 1 of 2 holds [gate 1024..2047; up 3072..4095]
    assert shard_ranges(4096, Split(dim=0, glu=True), 2, 1) == [(1024, 2048), (3072, 4096)]
    all_rows = sorted(r for rank in range(4) for r in shard_ranges(4096, Split(dim=0, glu=True), 4, rank))
    assert all_rows[0] == (0, 512) and all_rows[-1] == (3584, 4096) and len(all_rows) == 8


def test_bad_slices_raise() -> None:
    with pytest.raises(ValueError):
        shard_ranges(10, Split(dim=0), 4, 0)
    with pytest.raises(ValueError):
        shard_ranges(8, Split(dim=0), 2, 2)
    with pytest.raises(ValueError):
        shard_ranges(6, Split(dim=0, glu=True), 2, 0)


def test_expected_global_shapes_of_the_gpu_model() -> None:
    dims = dict(hidden=256, ffn=1024, moe_ffn=512, vocab=1024, seq=256, experts=8)
    assert expected_global_shape("decoder.layers.0.self_attention.linear_qkv.weight", **dims) == (768, 256)
    assert expected_global_shape("decoder.layers.0.mlp.linear_fc1.weight", **dims) == (2048, 256)
    expert = "decoder.layers.0.mlp.experts.local_experts.5."
    assert expected_global_shape(expert + "linear_fc1.weight", **dims) == (1024, 256)
    assert expected_global_shape(expert + "linear_fc2.weight", **dims) == (256, 512)
    assert expected_global_shape("decoder.layers.0.mlp.router.weight", **dims) == (8, 256)
    assert expected_global_shape("decoder.final_layernorm.weight", **dims) == (256,)
    assert expected_global_shape("something.new", **dims) is None


def test_init_std_depends_on_global_fan_in_only() -> None:
    assert init_std("decoder.layers.0.input_layernorm.weight", (256,), 8) == (1.0, 0.1)
    mean, std = init_std("output_layer.weight", (1024, 256), 8)
    assert mean == 0.0 and std == pytest.approx(2 / 16)
    _, proj = init_std("decoder.layers.0.self_attention.linear_proj.weight", (256, 256), 8)
    _, qkv = init_std("decoder.layers.0.self_attention.linear_qkv.weight", (768, 256), 8)
    assert proj == pytest.approx(qkv / 4)


def test_cp_split_is_megatrons_load_balanced_causal_split() -> None:
    assert cp_token_indices(8, 2, 0) == [0, 1, 6, 7]
    assert cp_token_indices(8, 2, 1) == [2, 3, 4, 5]
    for cp in (1, 2, 4):
        got = sorted(i for r in range(cp) for i in cp_token_indices(32, cp, r))
        assert got == list(range(32))
    with pytest.raises(ValueError):
        cp_token_indices(10, 4, 0)


def test_batch_split_over_data_parallel_ranks() -> None:
    assert [batch_slice(16, 4, r) for r in range(4)] == [(0, 4), (4, 8), (8, 12), (12, 16)]
    with pytest.raises(ValueError):
        batch_slice(6, 4, 0)


def test_a_ranks_share_is_one_micro_batch_per_pipeline_stage() -> None:
    from mcore_images.smoke.shards import micro_batch_split

    assert micro_batch_split(4, 1) == (1, 4)  # dp-only: the whole share at once
    assert micro_batch_split(8, 2) == (2, 4)  # pp2 (and pp2-vpp2: a multiple of pp)
    with pytest.raises(ValueError, match="cannot be split into 4"):
        micro_batch_split(6, 4)
