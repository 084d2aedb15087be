""".ci/phase.sh holds every CI phase to its row of .ci/budget.tsv: each phase `.ci/run` and `make ci` run has one,
the phases over budget and the total are printed at the end, and a run that reaches the `stop` row ends itself
naming the phase that ran long, with nothing it started left running (CI's hard limit is 90 minutes a run)."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.unit.conftest import ROOT
from tests.unit.repo.make_dry import VALUES, dry_run

PHASE = ROOT / ".ci" / "phase.sh"
CI_LIMIT_S = 90 * 60


def read_budget(path: Path) -> dict[str, int]:
    rows = (line.split("\t") for line in path.read_text().splitlines() if line and not line.startswith("#"))
    return {name: int(seconds) for name, seconds in rows}


def ci_phases() -> list[str]:
    """The phase names .ci/run and the Makefile's ci target pass to phase.sh."""
    text = (ROOT / ".ci" / "run").read_text()
    make = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^ci:.*\n((?:\t.*\n)+)", make, re.M)
    assert recipe, "the Makefile has no ci target"
    return re.findall(r"phase\.sh ([a-z][^\s]*) ", text + recipe.group(1))


def test_every_ci_phase_has_a_budget_and_the_budget_fits_the_limit() -> None:
    budget = read_budget(ROOT / ".ci" / "budget.tsv")
    phases = ci_phases()
    assert phases and not [p for p in phases if p not in budget], f"phases without a budget: {phases}"
    assert sum(budget[p] for p in phases) <= budget["total"] < budget["stop"] < CI_LIMIT_S


def run(tmp_path: Path, *argv: str, stop_s: int = 3600, started: float | None = None) -> subprocess.CompletedProcess:
    budget = tmp_path / "budget.tsv"
    budget.write_text(f"quick\t5\nslow\t1\ntotal\t60\nstop\t{stop_s}\n")
    env = {**os.environ, "CI_BUDGET": str(budget), "CI_PHASES": str(tmp_path / "phases.tsv"),
           "CI_STARTED": str(int(time.time() if started is None else started))}
    return subprocess.run(["bash", str(PHASE), *argv], env=env, capture_output=True, text=True, timeout=120,
                          check=False)


def test_a_phase_over_its_budget_is_named_at_the_end_with_the_total(tmp_path: Path) -> None:
    assert run(tmp_path, "quick", "true").returncode == 0
    slow = run(tmp_path, "slow", "sleep", "2.2")
    assert slow.returncode == 0 and "budget 1 s: OVER BUDGET" in slow.stdout, slow.stdout
    # The report repeats the seconds the phase measured, whatever the machine's load made of them.
    measured = re.search(r"^::phase slow: (\d+) s \(exit 0\)", slow.stdout, re.M)
    assert measured and int(measured.group(1)) >= 2, slow.stdout
    report = run(tmp_path, "--report").stdout
    assert f"::ci over budget: slow {measured.group(1)} s (budget 1 s)" in report, report
    assert re.search(r"^::ci total: \d+ s \(budget 60 s\)$", report, re.M), report
    assert "quick" not in report.split("over budget")[1], report


def test_the_run_stops_itself_at_the_stop_time_naming_the_phase(tmp_path: Path) -> None:
    """Before: phase.sh only printed a phase's time; a run past CI's limit was cut off with no word of where."""
    pidfile = tmp_path / "child.pid"
    started = time.time()
    done = run(tmp_path, "slow", "bash", "-c", f"sleep 300 & echo $! > {pidfile}; wait", stop_s=3,
               started=started)
    assert done.returncode == 124, done.stdout + done.stderr
    assert time.time() - started < 60
    assert "::ci stopped: the run reached 3 s (0 min) in phase slow" in done.stderr, done.stderr
    child = int(pidfile.read_text())
    time.sleep(0.5)
    assert not Path(f"/proc/{child}").exists() or "zombie" in Path(f"/proc/{child}/status").read_text().lower(), \
        "the phase's own child outlived the stop"
    assert (tmp_path / "phases.tsv").read_text().splitlines()[-1].split("\t")[::2] == ["slow", "124"]


def test_outside_a_run_a_phase_is_timed_and_never_stopped(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("CI_STARTED", "CI_PHASES")}
    done = subprocess.run(["bash", str(PHASE), "example-job", "sh", "-c", "exit 3"], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 3, done.stdout + done.stderr
    assert re.search(r"::phase example-job: \d+ s \(exit 3\), budget \d+ s", done.stdout), done.stdout


def test_the_makefile_dry_runs_of_the_unit_tests_add_no_row_to_the_runs_table(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """make runs a recipe line that names $(MAKE) even under -n, so the unit tests' `make -n ci` ran every
    `.ci/phase.sh` line of the ci target: inside CI's lint+unit phase each added a 1-second row to the run's own
    table (`::ci release-local 1 1290 0`, …), ahead of the real ones."""
    table = tmp_path / "phases.tsv"
    table.write_text("")
    monkeypatch.setenv("CI_PHASES", str(table))
    monkeypatch.setenv("CI_STARTED", str(int(time.time())))
    lines = dry_run("ci", VALUES)
    assert any("phase.sh" in line for line in lines), lines[:5]
    assert table.read_text() == "", table.read_text()
