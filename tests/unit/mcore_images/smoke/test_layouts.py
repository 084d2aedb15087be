"""Layout planning of the smoke suite: what fits N ranks, what is skipped and why, bad input."""

from __future__ import annotations

import pytest

from mcore_images.smoke.kit.errors import CouldNotRun
from mcore_images.smoke.layouts import (
    CATALOGUE,
    CPU_SHAPE,
    GPU_SHAPE,
    Layout,
    choose_world,
    parse_layout,
    parse_layouts,
    plan,
    split_problem,
)


def test_parse_spellings_and_canonical_names() -> None:
    assert parse_layout("tp2-pp2") == Layout(tp=2, pp=2)
    assert parse_layout("TP2xPP2") == Layout(tp=2, pp=2)
    assert parse_layout("pp4×vpp2").name == "pp4-vpp2"
    assert parse_layout("dp2-tp2").size == 4
    assert parse_layout("ep2").size == 2 and parse_layout("tp2-ep2").size == 4 and parse_layout("ep8").size == 8
    assert Layout().name == "dp1"


@pytest.mark.parametrize("bad", ["tq2", "tp0", "tp2-tp2", "vpp2", "", "tp", "pp2-vpp2-q"])
def test_bad_layouts_are_one_line_errors(bad: str) -> None:
    with pytest.raises(CouldNotRun) as err:
        parse_layout(bad)
    assert "\n" not in str(err.value)


def test_catalogue_sizes_match_their_layouts() -> None:
    for size, names in CATALOGUE.items():
        assert all(parse_layout(n).size == size for n in names), size


@pytest.mark.parametrize(("available", "world"), [(1, 1), (2, 2), (3, 2), (4, 4), (7, 4), (8, 8), (16, 8)])
def test_world_is_largest_catalogue_size_that_fits(available: int, world: int) -> None:
    assert choose_world(available, None) == world


def test_asking_for_more_gpus_than_exist_is_an_error() -> None:
    with pytest.raises(CouldNotRun, match="needs 4 GPUs but 2 are available"):
        choose_world(2, parse_layouts("tp2,tp4"))
    with pytest.raises(CouldNotRun, match="no GPU visible"):
        choose_world(0, None)


def test_selected_layouts_set_the_world() -> None:
    assert choose_world(8, parse_layouts("tp2")) == 2
    assert parse_layouts("all") is None


def test_one_gpu_plan_is_dense_and_moe_dp1() -> None:
    p = plan(1, None, te=False, specs=("local",))
    assert [r.id for r in p.to_run] == ["dp1/dense/local", "dp1/moe/local"]
    assert all(r.baseline for r in p.runs)


def test_two_gpu_plan_local_spec() -> None:
    p = plan(2, None, te=False, specs=("local",))
    runs = {r.id: r for r in p.runs}
    assert [r.id for r in p.to_run] == ["dp2/dense/local", "tp2/dense/local", "pp2/dense/local",
                                        "dp2/moe/local", "pp2/moe/local", "dp2-ep2/moe/local"]
    assert "Transformer Engine" in (runs["cp2/dense/local"].skip or "")
    assert "sequence parallelism" in (runs["tp2/moe/local"].skip or "")
    assert "dp2-ep2/dense/local" not in runs  # a dense model has no experts to spread


def test_te_spec_runs_cp_and_moe_with_tp() -> None:
    p = plan(2, None, te=True, specs=("local", "te"))
    ids = [r.id for r in p.to_run]
    assert "cp2/dense/te" in ids and "tp2/moe/te" in ids and "cp2/dense/local" not in ids


def test_baseline_comes_first_per_model_and_spec() -> None:
    p = plan(4, None, te=True)
    seen: set[tuple[str, str]] = set()
    for run in p.runs:
        key = (run.model, run.spec)
        assert run.baseline == (key not in seen), run.id
        seen.add(key)
        assert run.baseline_id == f"dp4/{run.model}/{run.spec}"


def test_smaller_layouts_are_filled_with_dp_and_deduplicated() -> None:
    p = plan(4, parse_layouts("tp2,dp2-tp2,pp2"), te=False, specs=("local",), models=("dense",))
    assert [r.layout.name for r in p.runs] == ["dp4", "dp2-tp2", "dp2-pp2"]


def test_every_catalogue_layout_splits_the_gpu_model() -> None:
    for size, names in CATALOGUE.items():
        for name in names:
            full = parse_layout(name).filled(8 if size <= 8 else size)
            assert split_problem(GPU_SHAPE, full, "moe") is None, name
            assert split_problem(CPU_SHAPE, full, "moe") is None, name


def test_layout_that_does_not_divide_the_world_is_an_error() -> None:
    with pytest.raises(CouldNotRun, match="multiple of 4"):
        plan(6, parse_layouts("tp4"), te=False)


def test_model_shape_rejects_bad_splits() -> None:
    assert "experts" in (split_problem(GPU_SHAPE, Layout(ep=16, dp=16), "moe") or "")
    assert "heads" in (split_problem(GPU_SHAPE, Layout(tp=16), "dense") or "")
