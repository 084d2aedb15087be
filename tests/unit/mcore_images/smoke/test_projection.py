"""--dry-run's projected wall time: measured runs count as measured, others are estimated and say so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcore_images.smoke import layouts, projection

TIMINGS = {"schema": projection.SCHEMA, "gpu": "NVIDIA H200", "measured": "2026-12-01", "steps": 10,
           "timing": {"launch_to_rank_s": 3.0, "imports_s": 11.0, "init_s": 1.0, "teardown_s": 2.0},
           "runs": {"dp1/dense/te": {"build_s": 0.5, "steps_s": 1.5}, "dp1/moe/te": {"build_s": 1.0, "steps_s": 6.0},
                    "tp2/dense/te": {"build_s": 0.5, "steps_s": 3.0}}}


def test_measured_runs_count_and_the_rest_are_estimated_from_their_dp_run() -> None:
    plan = layouts.plan(2, layouts.parse_layouts("tp2"), te=True, models=("dense", "moe"), specs=("te",),
                        checkpoint=False)
    p = projection.project(plan, TIMINGS, steps=20)
    # dp2 dense ← dp1 dense (est), tp2 dense measured, dp2 moe ← dp1 moe (est); tp2 moe te planned too
    ids = [r.id for r in plan.to_run]
    assert ids == ["dp2/dense/te", "tp2/dense/te", "dp2/moe/te", "tp2/moe/te"]
    assert p["measured"] == 1 and p["estimated"] == 3 and p["missing"] == []
    assert p["runs_s"] == pytest.approx((0.5 + 3.0) + (0.5 + 6.0) + 2 * (1.0 + 12.0))
    assert p["total_s"] == pytest.approx(15.0 + p["runs_s"] + 2.0)
    line = projection.render(p, TIMINGS, 2)
    assert line.startswith("projected wall time on 2 × NVIDIA H200: ") and "(1 measured, 3 estimated" in line


def test_round_trips_are_added_when_measured_and_named_when_not() -> None:
    plan = layouts.plan(2, layouts.parse_layouts("dp2"), te=True, models=("dense",), specs=("te",))
    assert [p.id for p in plan.round_trips] == ["tp2→pp2/dense/te", "pp2→dp2/dense/te"]
    timings = {**TIMINGS, "round_trips": {"tp2→pp2/dense/te": 7.5}}
    p = projection.project(plan, timings, steps=10)
    assert p["runs_s"] == pytest.approx(0.5 + 1.5 + 7.5) and p["missing"] == ["pp2→dp2/dense/te"]


def test_a_certificate_is_slimmed_and_a_stranger_file_refused(tmp_path: Path) -> None:
    cert = {"created": "2026-12-01", "command": ["python", "-m", "mcore_images.smoke"], "settings": {"steps": 10},
            "environment": {"gpu": {"model": "NVIDIA H200", "count": 1}, "packages": {}},
            "timing": {"wall_s": 30.0, "imports_s": 11.0},
            "runs": [{"id": "dp1/dense/te", "status": "passed", "timing": {"build_s": 0.5, "steps_s": 1.5}},
                     {"id": "cp2/dense/local", "status": "skipped", "timing": {}}]}
    path = tmp_path / "certificate.json"
    path.write_text(json.dumps(cert))
    assert projection.load(path)["runs"] == {"dp1/dense/te": {"build_s": 0.5, "steps_s": 1.5}}
    path.write_text(json.dumps({"hello": 1}))
    with pytest.raises(ValueError, match="neither a smoke certificate"):
        projection.load(path)


def test_the_shipped_timings_load() -> None:
    data = projection.load(projection.default_file())
    assert data["gpu"] == "NVIDIA H200" and "dp1/dense/te" in data["runs"]
