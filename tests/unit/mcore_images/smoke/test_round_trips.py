"""Checkpoint round trips: which pairs a world size plans, how a pair is judged, how the certificate
shows it (pure parts, no torch)."""

from __future__ import annotations

import math

import pytest

from mcore_images.smoke import certificate, judge
from mcore_images.smoke.kit.numerics import Math, parity
from mcore_images.smoke.layouts import (
    CPU_SHAPE,
    GPU_SHAPE,
    ROUND_TRIPS,
    Layout,
    RoundTrip,
    Run,
    parse_layout,
    plan,
    render_plan,
)

TOL = parity(Math("bf16", "bf16", "bf16 compute"))


def pair(save: Layout, load: Layout, model: str = "dense") -> RoundTrip:
    return RoundTrip(Run(save, model, "local"), Run(load, model, "local"), async_save=True)


def record(rank: int, straight: list[float], resumed: list[float], norms: tuple[list[float], list[float]],
           last: bool = True) -> dict:
    nan = [math.nan] * len(straight)
    return {"rank": rank, "last_a": last, "last_b": last, "straight": straight if last else nan,
            "resumed": resumed if last else nan, "straight_norms": norms[0], "resumed_norms": norms[1],
            "save_s": 0.2, "finish_s": 1.0, "load_s": 0.1, "bytes": 5 * 2**20 if rank == 0 else None, "wall_s": 9.0}


@pytest.mark.parametrize("world", sorted(ROUND_TRIPS))
def test_every_pair_fits_its_world_and_changes_the_layout_where_it_can(world: int) -> None:
    pairs = plan(world, None, te=True, shape=GPU_SHAPE).round_trips
    assert pairs and pairs[0].async_save and not any(p.async_save for p in pairs[1:])
    for p in pairs:
        assert p.save.layout.size == p.load.layout.size == world and p.skip is None
        assert world == 1 or p.save.layout != p.load.layout
        assert p.save.spec == "te"
        # both sides split the expert optimizer off, or neither does (megatron-core cannot merge them)
        assert (p.save.layout.ep > 1) == (p.load.layout.ep > 1)
    assert {p.save.model for p in pairs} == {"dense", "moe"}


def test_pairs_follow_the_selected_models_and_can_be_turned_off() -> None:
    assert [p.id for p in plan(2, None, te=False, models=("dense",), specs=("local",),
                               shape=CPU_SHAPE).round_trips] == ["tp2→pp2/dense/local", "pp2→dp2/dense/local"]
    assert plan(2, None, te=False, specs=("local",), shape=CPU_SHAPE, checkpoint=False).round_trips == []


def test_dry_run_shows_the_pairs() -> None:
    text = render_plan(plan(2, None, te=False, specs=("local",), shape=CPU_SHAPE))
    assert "3 checkpoint round trip(s) of 3" in text
    assert "tp2 → pp2      dense local checkpoint round trip, background save" in text


def test_a_resume_within_tolerance_passes_and_a_drifting_one_fails() -> None:
    p = pair(Layout(tp=2), Layout(pp=2))
    norms = ([1.5, 1.2, 0.8], [1.5, 1.2, 0.8])
    good = judge.round_trip(p, [record(0, [2.0, 1.4, 0.7], [2.0, 1.4, 0.70001], norms),
                                record(1, [2.0, 1.4, 0.7], [2.0, 1.4, 0.70001], norms)], TOL, deterministic=True)
    assert good["status"] == "passed" and good["async_save"] and good["bytes"] == 5 * 2**20
    assert good["loss_rel"] == pytest.approx(1e-5 / 0.7, rel=1e-3)
    # a resume that lost the optimizer state starts Adam over: the losses leave the curve
    bad = judge.round_trip(p, [record(0, [2.0, 1.4, 0.7], [2.0, 1.6, 1.1], norms),
                               record(1, [2.0, 1.4, 0.7], [2.0, 1.6, 1.1], norms)], TOL, deterministic=True)
    assert bad["status"] == "failed"
    assert "largest relative difference 5.71e-01" in bad["checks"][0]["detail"]


def test_the_same_layout_under_deterministic_math_must_match_exactly() -> None:
    p = pair(Layout(), Layout())
    rec = record(0, [2.0, 1.4, 0.7], [2.0, 1.4, 0.7000001], ([1.0] * 3, [1.0] * 3))
    assert judge.round_trip(p, [rec], TOL, deterministic=True)["status"] == "failed"
    assert judge.round_trip(p, [rec], TOL, deterministic=False)["status"] == "passed"


def test_losses_come_from_the_last_pipeline_stage_and_nan_fails() -> None:
    p = pair(Layout(pp=2), Layout(dp=2))
    norms = ([1.0] * 3, [1.0] * 3)
    res = judge.round_trip(p, [record(0, [2.0] * 3, [2.0] * 3, norms, last=False),
                               record(1, [2.0, 1.0, 0.5], [2.0, 1.0, 0.5], norms)], TOL, deterministic=True)
    assert res["straight"] == [2.0, 1.0, 0.5] and res["status"] == "passed"
    nan = judge.round_trip(p, [record(0, [2.0] * 3, [math.nan] * 3, norms)], TOL, deterministic=True)
    assert nan["status"] == "failed"


def test_certificate_section_validates_and_renders() -> None:
    p = pair(parse_layout("tp2"), parse_layout("pp2"))
    norms = ([1.0] * 3, [1.0] * 3)
    res = judge.round_trip(p, [record(0, [2.0, 1.0, 0.5], [2.0, 1.0, 0.5], norms)], TOL, deterministic=True)
    skipped = judge.round_trip_skipped(RoundTrip(Run(Layout(cp=2), "dense", "local"), Run(Layout(dp=2), "dense",
                                                 "local"), False, skip="needs TE"))
    cert = certificate.new(["python", "-m", "mcore_images.smoke"], "2026-01-01T00:00:00+00:00")
    cert.update(status="passed", exit_code=0, checkpoint={
        "format": "torch_dist", "saved_after_steps": 3, "resumed_steps": 3, "distributed_optimizer": False,
        "folder": "/tmp/x", "verdict": "passed", "pairs": [res, skipped]})
    assert certificate.validate(cert) == []
    text = certificate.render_markdown(cert)
    assert "## Checkpoint round trips: PASSED" in text
    assert "| tp2 → pp2 | dense/local | passed | 5.0 | 0.20 + 1.00 background | 0.10 |" in text
    assert "| cp2 → dp2 | dense/local | skipped: needs TE |" in text
    assert certificate.validate({**cert, "checkpoint": {"pairs": [], "verdict": "maybe"}}) != []
    line = judge.round_trip_line(res, 1, 2)
    assert "tp2→pp2/dense/local" in line and "PASSED" in line and "in background" in line
