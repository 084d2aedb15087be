"""FlashAttention facts (flash_attention.py) as the rules and the doctor's te.attention read them: what a run's
settings leave TE, and which FlashAttention TE can run for training on which GPU."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from mcore_images.catalogue import flash_attention as fa
from mcore_images.catalogue.flash_attention import FlashView
from tests.unit.conftest import ROOT

FLASH_ONLY = {"NVTE_FLASH_ATTN": "1", "NVTE_FUSED_ATTN": "0", "NVTE_UNFUSED_ATTN": "0"}


@pytest.mark.parametrize(("environ", "allowed"), [
    ({}, (True, True, True)),  # nothing set: TE may use any
    (FLASH_ONLY, (True, False, False)),  # what megatron-core sets for attention_backend=flash
    ({fa.ASKED: "flash"}, (True, False, False)),
    ({fa.ASKED: "auto"}, (True, True, True)),
    ({fa.ASKED: "fused"}, (False, True, False)),
    ({fa.ASKED: "local"}, (False, False, False)),
])
def test_what_a_run_leaves_te(environ: dict[str, str], allowed: tuple[bool, bool, bool]) -> None:
    asked = fa.requested(environ)
    assert asked.allowed == allowed and asked.conflict is None


def test_a_variable_that_disagrees_with_the_backend_is_megatrons_assertion() -> None:
    asked = fa.requested({fa.ASKED: "flash", "NVTE_FUSED_ATTN": "1"})
    assert asked.conflict is not None and "NVTE_FUSED_ATTN=1 does not" in asked.conflict


@pytest.mark.parametrize(("view", "te", "sm", "usable"), [
    (FlashView(), "2.20.2", 90, []),  # nothing installed: attention_backend=flash has no backend
    (FlashView(fa4="4.0.0b36"), "2.20.2", 90, ["FlashAttention 4.0.0b36"]),
    (FlashView(fa4="4.0.0b36"), "2.20.2", 100, ["FlashAttention 4.0.0b36"]),
    (FlashView(fa4="4.0.0b36"), "2.20.2", 80, []),  # TE 2.20 serves FA4 from sm90
    (FlashView(fa4="4.0.0b36"), "2.16.0", 80, []),  # 2.16 selects it on sm80, but it has no backward there
    (FlashView(fa4="4.0.0b36"), "2.6.0", 90, []),  # TE 2.6 does not know FA4
    (FlashView(fa2="2.8.3"), "2.16.0", 80, ["FlashAttention 2.8.3"]),
    (FlashView(fa3="3.0.0"), "2.20.2", 100, []),  # FA3 is sm90 only
    (FlashView(fa4="4.0.0b36"), "2.16.0", None, ["FlashAttention 4.0.0b36"]),  # no GPU: what is installed
])
def test_which_flash_attention_te_can_train_with(view: FlashView, te: str, sm: int | None,
                                                   usable: list[str]) -> None:
    assert fa.flash_usable(view, te, sm) == usable


def test_te_lines_cover_the_stacks_releases() -> None:
    assert fa.te_line("2.16.0").fa4 and not fa.te_line("2.16.0").fa4_import_guarded
    assert fa.te_line("2.20.2").fa4_min_sm == 90 and not fa.te_line("2.6.0").fa4
    assert fa.te_line("1.13.0") is None


def _section(m: fa.Measurement) -> dict:
    return json.loads((ROOT / m.evidence).read_text())


def _half(sec: dict, backend: str) -> tuple[int, int, tuple[float, float]]:
    rows = [r for r in sec["results"] if r["backend"] == backend]
    out = [r["tensors"]["out"]["error"] for r in rows]
    return len(rows), sum(r["status"] == "failed" for r in rows), (min(out), max(out))


def _rounded(pair: tuple[float, float]) -> tuple[float, float]:
    return tuple(float(f"{v:.3g}") for v in pair)  # type: ignore[return-value]


@pytest.mark.parametrize("m", fa.MEASURED, ids=lambda m: f"{m.fa4}-{m.cutlass}-te{m.te}-sm{m.sm}")
def test_each_measurement_holds_what_its_evidence_says(m: fa.Measurement) -> None:
    """MEASURED is the record of the attention sections the GPU script wrote (kept in docs/measurements/): pair,
    TE, architecture, and for each half (fa4: called directly; flash: through TE) the cases, the wrong ones and the
    range of out errors, and the limits."""
    sec = _section(m)
    env = sec["environment"]
    assert (env["flash-attn-4"], env["nvidia-cutlass-dsl"], env["transformer-engine"], int(env["sm"])) == (
        m.fa4, m.cutlass, m.te, m.sm)
    for half, backend in ((m.direct, "fa4"), (m.through_te, "flash")):
        assert half is not None
        cases, wrong, out = _half(sec, backend)
        assert (half.cases, half.wrong, half.out_error) == (cases, wrong, _rounded(out)), backend
    limits = [r["tensors"]["out"]["limit"] for r in sec["results"] if r["backend"] == "flash"]
    assert m.out_limit == _rounded((min(limits), max(limits)))
    assert m.command.startswith('PAIR_SET="') and m.evidence.startswith(f"docs/measurements/{m.date}-")


def test_the_merged_table_in_the_docs_is_the_evidence_joined() -> None:
    """docs/measurements' attention-pairs.md is what `python -m mcore_images.smoke.attention.merge` makes of the
    sections MEASURED rests on: the excerpt in docs/smoke.md quotes evidence, not a copy typed by hand."""
    from mcore_images.smoke.attention import merge

    folders = {Path(m.evidence).parent for m in fa.MEASURED}
    for folder in folders:
        sections = [_section(m) for m in fa.MEASURED if Path(m.evidence).parent == folder]
        assert merge.render(sections) == (ROOT / folder / "attention-pairs.md").read_text()
    smoke_doc = (ROOT / "docs" / "smoke.md").read_text()
    table = (ROOT / sorted(folders)[-1] / "attention-pairs.md").read_text().splitlines()
    quoted = [line for line in smoke_doc.splitlines() if line.startswith("| TE ")]
    assert quoted and all(line in table for line in quoted), quoted


@pytest.mark.parametrize(("fa4", "cutlass", "te", "sm", "verdict"), [
    ("4.0.0b36", "4.8.1", "2.20.2", 90, fa.WRONG),  # measured: through TE 2.20.2
    ("4.0.0b40", "4.8.1", "2.20.0", 90, fa.WRONG),  # an earlier patch of the series: the series' verdict
    (None, None, "2.20.2", 90, fa.WRONG),  # TE's flash backend with any FlashAttention 4: the fault is TE's
    ("4.0.0b36", "4.8.1", None, 90, fa.RIGHT),  # called directly
    ("4.0.0b36", "4.8.1", "2.21.0", 90, None),  # the next series: not measured
    ("4.0.0b36", "4.8.1", "2.20.2", 100, None),  # another architecture: not measured
    ("4.0.0b11", "4.5.2", None, 90, None),  # the 2026-12-06 b11 run imported neither half: no measurement
])
def test_what_the_measurements_say(fa4: str | None, cutlass: str | None, te: str | None, sm: int,
                                   verdict: str | None) -> None:
    assert fa.judge(fa4, cutlass, te, sm).verdict == verdict


@pytest.mark.parametrize(("te", "fa4", "cutlass", "name"), [
    ("2.21.0", "4.0.0b40", "4.8.1", "te2.21.0-b40-c4.8.1"),
    ("2.21.0", "4.1.0", "4.9.0", "te2.21.0-fa4.1.0-c4.9.0"),
    ("2.20", "4.0.0rc1", "4.8.1", "te2.20-fa4.0.0rc1-c4.8.1"),
])
def test_a_pair_name_is_one_the_gpu_script_takes(te: str, fa4: str, cutlass: str, name: str,
                                                  tmp_path: Path) -> None:
    """The script parses what pair_name writes: a bad name is refused before any step (exit 2, one line), a good
    one reaches the step's own check (here: `check` of a pair PAIR_SET does not hold)."""
    assert fa.pair_name(te, fa4, cutlass) == name
    script = ROOT / fa.MEASURE_SCRIPT

    def run(pair_set: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(script), "check", "te9.9-b1-c1.0"], env={
            "PATH": os.environ["PATH"], "PAIR_SET": pair_set, "PAIRS": str(tmp_path)},
            capture_output=True, text=True, timeout=60)

    good, bad = run(name), run(name.replace("-c", "-x"))
    assert good.returncode == 2 and "unknown pair te9.9-b1-c1.0" in good.stderr, good.stderr
    assert bad.returncode == 2 and "is not te<TE>-b<N>-c<DSL>" in bad.stderr, bad.stderr


def test_the_measure_command_names_every_pair_right_called_directly() -> None:
    assert fa.measure_command("2.21.0") == (
        'PAIR_SET="te2.21.0-b36-c4.8.1 te2.21.0-b40-c4.8.1" bash .ci/gpu/attention-pairs.sh prepare')
