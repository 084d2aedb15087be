"""Certificate schema and Markdown rendering, and the checks that fill it (judge)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from mcore_images.smoke import certificate, judge
from mcore_images.smoke.kit.numerics import Math, parity
from mcore_images.smoke.layouts import Layout, Run

TOL = parity(Math("bf16", "bf16", "bf16 compute"))


def record(rank: int, losses: list[float], norms: list[float], last: bool = True, dense: float = 1.0,
           dp: tuple = (0, 1)) -> dict:
    return {"rank": rank, "last_stage": last, "losses": losses if last else [math.nan] * len(losses),
            "grad_norms": norms, "step_s": [0.5, 0.1, 0.1], "build_s": 0.2, "dense_sum": dense,
            "expert_sum": 0.0, "dp_group": list(dp), "edp_group": list(dp)}


BASE = Run(Layout(dp=2), "dense", "local", baseline=True)
TP2 = Run(Layout(tp=2), "dense", "local")


def good_baseline() -> dict:
    return judge.evaluate(BASE, [record(0, [8.0, 6.0, 4.0], [2.0] * 3), record(1, [8.0, 6.0, 4.0], [2.0] * 3)],
                          TOL, None)


def sample_cert() -> dict:
    cert = certificate.new(["python", "-m", "mcore_images.smoke"], "2026-01-01T00:00:00+00:00")
    cert.update(status="passed", exit_code=0)
    cert["environment"] = {"packages": {"python": "3.12.3", "torch": "2.11.0", "megatron-core": "0.19.2"},
                           "cuda": "13.0", "nccl": "2.28.9", "gpu": {"model": "NVIDIA H200", "count": 1}}
    cert["settings"] = {"world_size": 2, "nodes": 1, "backend": "nccl", "dtype": "bf16", "steps": 3}
    cert["tolerance"] = TOL.to_dict()
    base = good_baseline()
    cert["runs"] = [base, judge.evaluate(TP2, [record(0, [8.001, 6.0, 4.0], [2.001] * 3, dp=(0,)),
                                               record(1, [8.001, 6.0, 4.0], [2.001] * 3, dp=(1,))], TOL, base),
                    judge.skipped(Run(Layout(cp=2), "dense", "local", skip="needs TE"))]
    cert["timing"] = {"wall_s": 30.0}
    return cert


def test_good_runs_pass_every_check() -> None:
    cert = sample_cert()
    assert [r["status"] for r in cert["runs"]] == ["passed", "passed", "skipped"]
    assert cert["runs"][1]["parity"]["loss_rel"] == pytest.approx(1.25e-4)


def test_schema_accepts_a_real_certificate_and_round_trips(tmp_path: Path) -> None:
    cert = sample_cert()
    assert certificate.validate(cert) == []
    json_path, md_path = certificate.write(cert, tmp_path)
    assert certificate.read(json_path) == json.loads(json.dumps(cert))
    assert md_path.read_text() == certificate.render_markdown(cert)


def test_schema_rejects_broken_certificates() -> None:
    cert = sample_cert()
    del cert["runs"][0]["losses"]
    cert["image"]["digest"] = "latest"
    cert["status"] = "great"
    problems = certificate.validate(cert)
    assert any("losses" in p for p in problems)
    assert any("sha256" in p for p in problems)
    assert any("status" in p for p in problems)
    assert certificate.validate({}) and "schema" in certificate.validate({})[0]


MEASURED = Path(__file__).resolve().parents[4] / "docs" / "measurements" / "2026-12-06-cuda-replica-te2.18"
"""The smoke, its attention check and the verl step run on an H100 (its README): what the programs really write."""


def test_the_schema_takes_what_the_programs_wrote_on_a_gpu() -> None:
    """The kept certificate (its fields as the ranks and the launcher wrote them: settings with the gradient
    accumulation fusion record, runs, timing), the attention section (with ``measured``) and the verl step's report,
    stamped as certificate.new stamps them: no problem; the fusion record or a measurement broken: named."""
    real = json.loads((MEASURED / "smoke-certificate.json").read_text())
    attention = json.loads((MEASURED / "attention.json").read_text())
    verl_step = json.loads((MEASURED / "verl_step.json").read_text())
    assert real["settings"]["gradient_accumulation_fusion"]["on"] is True and attention["measured"]
    cert = {**certificate.new(["python", "-m", "mcore_images.smoke"], "2026-12-06T00:00:00+00:00"),
            "tolerance": TOL.to_dict(), **real, "attention": attention, "verl_step": verl_step}
    assert certificate.validate(cert) == []
    assert certificate.section_problems("attention", attention) == []
    assert certificate.section_problems("verl_step", verl_step) == []
    fusion = {**real["settings"]["gradient_accumulation_fusion"], "on": "yes"}
    assert certificate.validate({**cert, "settings": {**real["settings"], "gradient_accumulation_fusion": fusion}})[
        0].startswith("field settings.gradient_accumulation_fusion.on: 'yes' is not of type 'boolean'")
    measured = [{**attention["measured"][0], "sm": "90"}]
    assert certificate.validate({**cert, "attention": {**attention, "measured": measured}})[0].startswith(
        "field attention.measured.0.sm: '90' is not of type 'integer'")
    assert certificate.section_problems("attention", {**attention, "measured": measured})[0].startswith(
        "field attention.measured.0.sm: '90' is not of type 'integer'")
    with pytest.raises(ValueError, match="no program of the smoke registers a certificate section 'attentions'"):
        certificate.section_problems("attentions", attention)


def test_markdown_has_header_facts_and_one_row_per_run() -> None:
    cert = sample_cert()
    cert["image"] = {"ref": "mcore:rt", "digest": "sha256:" + "a" * 64, "digest_source": "RepoDigests"}
    md = certificate.render_markdown(cert)
    assert md.startswith("# Smoke certificate: PASSED (exit 0)")
    assert "NVIDIA H200" in md and "NCCL 2.28.9" in md and "megatron-core 0.19.2" in md
    assert "transformer-engine –" in md and "sha256:" + "a" * 64 in md
    rows = [line for line in md.splitlines() if line.startswith("| ") and "/" in line.split("|")[1]]
    assert len(rows) == 3
    assert "| tp2/dense/local | passed | 8.001 → 4 |" in md
    assert "skipped: needs TE" in md
    assert "- GPU architectures: not recorded (not run in an image)" in md


def test_markdown_names_the_declared_gpu_architectures_and_this_runs_gpu() -> None:
    cert = sample_cert()
    cert["environment"]["gpu_archs"] = {"declared": "90;100", "gpus": "sm_90 H100/H200/GH200; sm_100 B200/GB200"}
    cert["environment"]["gpu"]["capability"] = "9.0"
    md = certificate.render_markdown(cert)
    assert "- GPU architectures: 90;100 (sm_90 H100/H200/GH200; sm_100 B200/GB200); this run's GPU is sm_90\n" in md
    cert["environment"]["gpu"]["capability"] = "10.3"
    md = certificate.render_markdown(cert)
    assert "this run's GPU is sm_103, which the image does not declare" in md


def test_parity_failure_is_reported_with_numbers() -> None:
    base = good_baseline()
    bad = judge.evaluate(TP2, [record(0, [8.2, 6.0, 4.0], [2.5] * 3), record(1, [8.2, 6.0, 4.0], [2.5] * 3)], TOL, base)
    assert bad["status"] == "failed"
    failed = {c["name"]: c["detail"] for c in bad["checks"] if not c["ok"]}
    assert set(failed) == {"step-0 loss matches dp-only", "step-0 grad norm matches dp-only"}
    assert "limit 3.91e-03" in failed["step-0 loss matches dp-only"]
    cert = sample_cert()
    cert["runs"].append(bad)
    assert "## Failed checks" in certificate.render_markdown(cert)


def test_nan_loss_flat_loss_rank_disagreement_and_replica_drift_fail() -> None:
    nan = judge.evaluate(BASE, [record(0, [8.0, math.nan, 4.0], [2.0] * 3)], TOL, None)
    flat = judge.evaluate(BASE, [record(0, [8.0, 7.9, 7.8], [2.0] * 3)], TOL, None)
    disagree = judge.evaluate(BASE, [record(0, [8.0, 6.0, 4.0], [2.0] * 3),
                                     record(1, [8.0, 6.0, 4.0], [2.1] * 3)], TOL, None)
    drift = judge.evaluate(BASE, [record(0, [8.0, 6.0, 4.0], [2.0] * 3, dense=1.0),
                                  record(1, [8.0, 6.0, 4.0], [2.0] * 3, dense=1.0000001)], TOL, None)
    names = [{c["name"] for c in r["checks"] if not c["ok"]} for r in (nan, flat, disagree, drift)]
    assert "loss and grad norm finite" in names[0]
    assert names[1] == {"loss decreases on the fixed batch"}
    assert names[2] == {"ranks agree on grad norm"}
    assert names[3] == {"dense weights equal across data-parallel replicas"}


def test_missing_baseline_fails_parity() -> None:
    res = judge.evaluate(TP2, [record(0, [8.0, 6.0, 4.0], [2.0] * 3)], TOL, None)
    assert res["status"] == "failed" and "did not run" in res["checks"][-1]["detail"]


def test_pipeline_stages_without_loss_are_not_compared() -> None:
    recs = [record(0, [8.0, 6.0, 4.0], [2.0] * 3, last=False), record(1, [8.0, 6.0, 4.0], [2.0] * 3)]
    assert judge.evaluate(BASE, recs, TOL, None)["status"] == "passed"


def test_progress_line_names_run_and_failures() -> None:
    line = judge.progress_line(sample_cert()["runs"][1], 2, 3)
    assert line.startswith("[smoke] 2/3 tp2/dense/local") and "PASSED" in line and "Δloss" in line
    assert "needs TE" in judge.progress_line(sample_cert()["runs"][2], 3, 3)


AGAIN = Run(Layout(dp=2), "dense", "local", repeat=True)


def test_a_deterministic_repeat_must_equal_its_baseline_bit_for_bit() -> None:
    base = good_baseline()
    same = judge.evaluate(AGAIN, [record(0, [8.0, 6.0, 4.0], [2.0] * 3), record(1, [8.0, 6.0, 4.0], [2.0] * 3)],
                          TOL, base)
    assert same["status"] == "passed" and same["id"] == "dp2/dense/local/repeat" and same["parity"] is None
    off = judge.evaluate(AGAIN, [record(0, [8.0, 6.0, 4.0000001], [2.0] * 3),
                                 record(1, [8.0, 6.0, 4.0000001], [2.0] * 3)], TOL, base)
    failed = [c for c in off["checks"] if not c["ok"]]
    assert off["status"] == "failed" and [c["name"] for c in failed] == ["losses bitwise equal to the first run"]
    assert "differ at steps [2]" in failed[0]["detail"]
    summary = judge.determinism([base, same, off | {"id": "dp2/moe/local/repeat"}])
    assert summary == {"bitwise_equal": False, "runs": {"dp2/dense/local": {"losses": True, "grad norms": True},
                                                        "dp2/moe/local": {"losses": False, "grad norms": True}}}
    assert judge.determinism([base]) is None


def test_the_certificate_states_determinism() -> None:
    cert = sample_cert()
    cert["determinism"] = {"bitwise_equal": True, "runs": {"dp2/dense/local": {"losses": True, "grad norms": True}}}
    assert ("- Determinism: each dp baseline run twice under deterministic settings: losses and grad norms bitwise "
            "equal (dp2/dense/local)") in certificate.render_markdown(cert)
