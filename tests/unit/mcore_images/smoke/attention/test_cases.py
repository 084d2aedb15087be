"""The attention check's cases and backends: the grid the check promises, and each backend's NVTE variables as
megatron-core sets them."""

from __future__ import annotations

import pytest

from mcore_images.catalogue import flash_attention
from mcore_images.smoke.attention import cases as cs


@pytest.mark.parametrize("grid", [cs.GPU_CASES, cs.CPU_CASES])
def test_the_grid_covers_layouts_heads_and_head_dims(grid: list[cs.Case]) -> None:
    assert {(c.layout, c.heads == c.groups, c.head_dim) for c in grid} == {
        (layout, mha, dim) for layout in ("sbhd", "bshd", "thd") for mha in (True, False) for dim in (64, 128)}
    assert len({c.id for c in grid}) == len(grid) == 12


def test_packed_sequences_have_offsets_and_lengths_that_no_tile_divides() -> None:
    thd = next(c for c in cs.GPU_CASES if c.layout == "thd")
    assert thd.cu_seqlens == [0, 1000, 3048, 3825] and thd.batch == 1 and thd.max_seqlen == 2048
    assert any(n % 128 for n in thd.seqlens)
    sbhd = next(c for c in cs.GPU_CASES if c.layout == "sbhd")
    assert sbhd.batch == 2 and sbhd.max_seqlen == 2048


def test_each_te_backend_sets_the_variables_megatron_core_sets() -> None:
    for name, values in flash_attention.MEGATRON_SETS.items():
        if name == "local":
            assert cs.BY_NAME["local"].variables is None
            continue
        assert cs.BY_NAME[name].variables == dict(zip(flash_attention.NVTE_VARIABLES, map(str, values), strict=True))
    assert cs.BY_NAME["flash"].variables == {"NVTE_FLASH_ATTN": "1", "NVTE_FUSED_ATTN": "0", "NVTE_UNFUSED_ATTN": "0"}


def test_select_names_backends_and_refuses_an_unknown_one() -> None:
    assert [b.name for b in cs.select(None, {})] == [b.name for b in cs.BACKENDS]
    assert [b.name for b in cs.select("fused,fa4", {})] == ["fused", "fa4"]
    env = cs.select("as-set", {"NVTE_FUSED_ATTN": "0"})[0]
    assert env.variables == {"NVTE_FLASH_ATTN": "1", "NVTE_FUSED_ATTN": "0", "NVTE_UNFUSED_ATTN": "1"}
    with pytest.raises(ValueError, match=r"unknown backend 'flash2'.*flash, fused"):
        cs.select("flash2", {})


def test_megatron_cores_own_attention_takes_sbhd_only() -> None:
    by_layout = {c.layout: cs.applicable(cs.LOCAL, c) for c in cs.CPU_CASES}
    assert by_layout["sbhd"] is None and "sbhd only" in by_layout["bshd"] and "packed" in by_layout["thd"]
    assert all(cs.applicable(cs.BY_NAME[n], c) is None for n in ("flash", "sdpa", "fa4") for c in cs.CPU_CASES)
