"""The attention check's verdicts: the tolerance (flash-attention's rule), each status, the section's verdict and
its Markdown, and the certificate that carries it."""

from __future__ import annotations

import math

import pytest

from mcore_images.smoke import certificate
from mcore_images.smoke.attention import table
from mcore_images.smoke.kit import numerics

GOOD = {"out": (0.011, 0.012, 4.0), "dq": (0.02, 0.015, 3.0), "dk": (0.02, 0.02, 3.0), "dv": (0.03, 0.03, 5.0)}


def test_the_limit_is_twice_bf16s_error_plus_two_ulps_of_the_largest_reference_value() -> None:
    assert numerics.attention_limit(0.01, 4.0) == pytest.approx(2 * 0.01 + 2 * 2**-7 * 4.0)
    assert numerics.attention().limits == {"ratio": 2.0, "floor_ulps": 2.0}
    assert "flash-attention" in numerics.attention().why


@pytest.mark.parametrize(("error", "ok"), [(0.0, True), (2 * 0.01 + 2 * 2**-7 * 4.0, True), (0.09, False),
                                           (3.92, False), (math.nan, False), (math.inf, False)])
def test_a_tensor_passes_within_its_limit_and_never_with_a_nan(error: float, ok: bool) -> None:
    assert table.judge_tensor(error, 0.01, 4.0)["ok"] is ok


def test_a_nan_in_the_bf16_baseline_or_reference_never_passes() -> None:
    assert not table.judge_tensor(0.0, math.nan, 4.0)["ok"] and not table.judge_tensor(0.0, 0.01, math.inf)["ok"]


def test_one_wrong_tensor_fails_the_result_and_the_section_names_backend_and_case() -> None:
    wrong = {**GOOD, "dv": (4.28, 0.03, 5.0)}
    results = [table.result("fused", "sbhd MHA d64", "", selected="cuDNN fused", errors=GOOD),
               table.result("flash", "sbhd GQA 16/4 d128", "", selected="FlashAttention 4.0.0b36", errors=wrong),
               table.result("flash", "every case", "unavailable", reason="TE selects no backend: …")]
    assert [r["status"] for r in results] == ["passed", "failed", "unavailable"]
    sec = table.section(results, backends=[], cases=[], environment={}, tolerance={}, wall_s=1.0)
    assert sec["status"] == "failed" and sec["failed"] == [
        "flash (FlashAttention 4.0.0b36) × sbhd GQA 16/4 d128: dv 4.28 > 0.138"]
    assert sec["error"].startswith("attention wrong: flash (FlashAttention 4.0.0b36) × sbhd GQA 16/4 d128")


def test_unavailable_and_not_applicable_do_not_fail_but_nothing_run_could_not_run() -> None:
    rows = [table.result("flash", "every case", "unavailable", reason="no GPU"),
            table.result("local", "thd MHA d64", "not-applicable", reason="sbhd only")]
    sec = table.section(rows, backends=[], cases=[], environment={}, tolerance={}, wall_s=0.0)
    assert sec["status"] == "could-not-run" and sec["error"] == "no backend ran any case"
    sec = table.section([*rows, table.result("local", "sbhd MHA d64", "", errors=GOOD)], backends=[], cases=[],
                        environment={}, tolerance={}, wall_s=0.0)
    assert sec["status"] == "passed" and sec["error"] is None and sec["failed"] == []


def test_a_backend_that_raises_fails() -> None:
    res = table.result("flash", "thd MHA d64", "failed", selected=None, reason="raised RuntimeError: compile")
    sec = table.section([res], backends=[], cases=[], environment={}, tolerance={}, wall_s=0.0)
    assert sec["status"] == "failed" and "raised RuntimeError" in sec["error"]
    assert table.failed_to_finish("hung")["status"] == "failed"


def test_an_unknown_status_is_a_certificate_problem() -> None:
    sec = table.section([table.result("flash", "x", "wrong")], backends=[], cases=[], environment={}, tolerance={},
                        wall_s=0.0)
    assert certificate.validate(_cert(sec))[0].startswith("field attention.results.0.status: 'wrong' is not one of")


def _cert(section: dict) -> dict:
    cert = certificate.new(["python", "-m", "mcore_images.smoke"], "2026-12-06T00:00:00+00:00")
    cert.update(status="failed", exit_code=1, attention=section)
    return cert


def _rendered(section: dict) -> str:
    """The certificate around ``section`` as Markdown, once it is known to validate: what a reader is shown."""
    cert = _cert(section)
    assert certificate.validate(cert) == []
    return certificate.render_markdown(cert)


def test_the_certificate_validates_and_renders_its_attention_table() -> None:
    sec = table.section([table.result("flash", "sbhd MHA d64", "", selected="FlashAttention 4.0.0b36",
                                      errors={**GOOD, "out": (3.92, 0.012, 4.0)})],
                        backends=[{"name": "flash", "about": "attention_backend=flash"}], cases=["sbhd MHA d64"],
                        environment={"gpu": "H200"}, tolerance=numerics.attention().to_dict(), wall_s=3.0)
    text = _rendered(sec)
    assert "## Attention against an fp32 reference: FAILED" in text
    assert "| flash | FlashAttention 4.0.0b36 | sbhd MHA d64 | failed | 3.92e+00 > 8.65e-02 |" in text


def test_a_malformed_attention_section_is_a_certificate_problem() -> None:
    problems = certificate.validate(_cert({"status": "maybe", "results": [{"backend": "flash"}]}))
    assert [p.split(";")[0] for p in problems] == [
        "field attention.results.0: 'case' is a required property",
        "field attention.results.0: 'status' is a required property",
        "field attention.results.0: 'tensors' is a required property",
        "field attention.status: 'maybe' is not one of ['passed', 'failed', 'could-not-run']"]


def _unavailable_flash(environment: dict) -> dict:
    rows = [table.result("flash", "every case", "unavailable", reason="TE selects no backend: …"),
            table.result("fused", "sbhd MHA d64", "", selected="cuDNN fused", errors=GOOD)]
    return table.section(rows, backends=[], cases=[], environment=environment, tolerance={}, wall_s=1.0)


def test_the_section_links_the_measurement_its_te_flash_backend_rests_on() -> None:
    """An image of TE 2.20.2 on an H200 ships no FlashAttention 4: its certificate names the 2026-12-06 measurement
    (TE's flash backend wrong, FlashAttention 4 called directly right) and its evidence in the repository."""
    sec = _unavailable_flash({"gpu": "NVIDIA H200", "sm": "90", "transformer-engine": "2.20.2", "flash-attn-4": None})
    [measured] = sec["measured"]
    assert measured["verdict"] == "wrong" and measured["sm"] == 90
    assert "FlashAttention 4 called directly on the same inputs was right" in measured["why"]
    evidence = {r["evidence"] for r in measured["rests_on"]}
    assert evidence == {"docs/measurements/2026-12-06-attention-pairs/te2.20-b36-c4.8.1.json",
                        "docs/measurements/2026-12-06-attention-pairs/te2.20-b40-c4.8.1.json"}
    assert all(r["direct"] == "right" and r["through_te"] == "wrong" and r["date"] == "2026-12-06"
               for r in measured["rests_on"])
    text = _rendered(sec)
    assert "- TE 2.20.2's flash backend with FlashAttention 4 on sm_90, as measured on a GPU: wrong: " in text
    assert "docs/measurements/2026-12-06-attention-pairs/te2.20-b36-c4.8.1.json" in text


def test_a_te_release_with_no_measurement_is_said_so_and_cpu_runs_name_every_measured_gpu() -> None:
    sec = _unavailable_flash({"sm": "90", "transformer-engine": "2.16.0"})
    assert [(m["verdict"], m["rests_on"]) for m in sec["measured"]] == [(None, [])]
    assert "as measured on a GPU: not measured: TE 2.16.x's flash backend has no measurement" in "\n".join(
        table.markdown(sec))
    cpu = _unavailable_flash({"device": "cpu", "transformer-engine": "2.20.2"})
    assert [(m["sm"], m["verdict"]) for m in cpu["measured"]] == [(90, "wrong")]
    assert _unavailable_flash({"device": "cpu"})["measured"] == []  # no TE: nothing to rest on


def test_merge_refuses_a_file_that_is_not_an_attention_section(tmp_path, capsys: pytest.CaptureFixture) -> None:
    """merge holds each file to the schema's $defs/attention, as the certificate holds its section."""
    import json

    from mcore_images.smoke.attention import merge

    good = tmp_path / "good.json"
    good.write_text(json.dumps(table.could_not_run("no GPU")))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"status": "maybe", "results": []}))
    assert merge.main([str(good)]) == 0
    assert merge.main([str(good), str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"merge: {bad}: field attention.status: 'maybe' is not one of") and merge.FIX in err
