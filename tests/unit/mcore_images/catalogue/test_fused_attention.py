"""TE's cuDNN fused attention measurements held to the evidence they cite (attention sections in docs/measurements)."""

from __future__ import annotations

import json

from mcore_images.catalogue import fused_attention
from tests.unit.conftest import ROOT


def test_each_measurement_is_what_its_evidence_says() -> None:
    for m in fused_attention.MEASURED:
        section = json.loads((ROOT / m.evidence).read_text())
        env = section["environment"]
        assert (env["transformer-engine"], env["sm"]) == (m.te, str(m.sm)), m.evidence
        rows = [r for r in section["results"] if r["backend"] in ("fused", "auto")]
        assert rows, m.evidence
        if m.verdict == fused_attention.RAISES:
            assert all(r["status"] == "failed" and r["reason"].startswith("raised ") for r in rows), m.evidence
            assert all("CUDNN_ATTR_OPERATION_RESHAPE_MODE" in r["reason"] for r in rows) == (
                "RESHAPE_MODE" in m.detail)
        else:
            assert m.verdict == fused_attention.RIGHT and all(r["status"] == "passed" for r in rows), m.evidence
        readme = (ROOT / m.evidence).parent / "README.md"
        assert readme.is_file() and m.date in readme.read_text()


def test_measurement_finds_exactly_the_pair() -> None:
    assert fused_attention.measurement("2.17.1", "9.19.0.56", 90).verdict == fused_attention.RAISES
    assert fused_attention.measurement("2.18.0", "9.19.0.56", 90).verdict == fused_attention.RIGHT
    assert fused_attention.measurement("2.18.0", "9.19.0.56", 100) is None
    assert fused_attention.measurement("2.19.1", "9.19.0.56", 90) is None
    assert fused_attention.measurement("2.17.1", "9.19.0.56", 100) is None
