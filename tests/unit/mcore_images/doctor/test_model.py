"""The doctor's runner, output and command line: crashes stay contained, exit codes follow findings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mcore_images.doctor import command as doctor
from mcore_images.doctor import model
from mcore_images.doctor.model import Check, Context, Status, ok, skip, trip, warn
from tests.unit.conftest import ROOT

SRC = ROOT / "src"


def make(check_id: str, severity: Status, func) -> Check:
    return Check(check_id, severity, f"fix for {check_id}", func)


def test_trip_takes_the_check_severity_and_default_fix() -> None:
    ctx = Context()
    failing = model.run_one(make("a", Status.FAIL, lambda c: trip("broken")), ctx)
    warning = model.run_one(make("b", Status.WARN, lambda c: trip("meh", "own fix")), ctx)
    assert (failing.status, failing.fix) == (Status.FAIL, "fix for a")
    assert (warning.status, warning.fix) == (Status.WARN, "own fix")
    assert model.run_one(make("c", Status.FAIL, lambda c: ok("fine")), ctx).fix == ""


def test_a_crashing_check_is_reported_and_the_rest_still_run() -> None:
    def boom(ctx: Context):
        raise RuntimeError("kaboom")

    def exits(ctx: Context):
        raise SystemExit(3)  # what some packages do on import

    checks = [
        make("x.boom", Status.FAIL, boom),
        make("x.exit", Status.WARN, exits),
        make("x.fine", Status.FAIL, lambda c: ok("fine")),
    ]
    findings = model.run_checks(Context(), checks)
    assert [f.status for f in findings] == [Status.CRASH, Status.CRASH, Status.OK]
    assert "kaboom" in findings[0].finding and "--only x.boom" in findings[0].fix
    assert model.exit_code(findings) == 1


def test_exit_code_and_outputs() -> None:
    findings = model.run_checks(
        Context(),
        [
            make("a.one", Status.FAIL, lambda c: warn("w", x={1, 2})),
            make("a.two", Status.FAIL, lambda c: skip("s", p=Path("/x"))),
        ],
    )
    assert model.exit_code(findings) == 0
    data = json.loads(model.to_json(findings, {"host": "h"}))
    assert data["exit_code"] == 0 and data["counts"]["warn"] == 1
    assert data["findings"][0]["details"] == {"x": [1, 2]} and data["findings"][1]["details"] == {"p": "/x"}
    table = model.to_table(findings, width=100)
    assert "WARN  a.one" in table and "SKIP  a.two" in table and "1 warn" in table


def test_cached_errors_are_raised_again() -> None:
    ctx, calls = Context(), []

    def compute() -> int:
        calls.append(1)
        raise ImportError("no torch")

    for _ in range(2):
        with pytest.raises(ImportError):
            ctx.cached("k", compute)
    assert len(calls) == 1


def test_registry_has_at_least_15_distinct_checks_with_fixes() -> None:
    checks = doctor.load_checks()
    assert len(checks) >= 15
    for item in checks.values():
        assert item.fix and item.severity in (Status.FAIL, Status.WARN) and item.func.__doc__


def test_the_cli_runs_the_doctor(capsys: pytest.CaptureFixture[str]) -> None:
    from mcore_images import cli

    code = cli.main(["doctor", "--json", "--only", "env.nvte-attn"])
    data = json.loads(capsys.readouterr().out)
    assert [f["id"] for f in data["findings"]] == ["env.nvte-attn"]
    assert code == data["exit_code"]


def test_unknown_check_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert doctor.main(["--only", "no.such.check"]) == 2
    assert "unknown check" in capsys.readouterr().err


def test_only_prefix_selects_a_family() -> None:
    chosen = doctor.select(doctor.load_checks(), ["te"])
    assert {c.id for c in chosen} == {"te.import", "te.cuda-wheel", "te.cudnn", "te.attention"}


def test_runs_where_only_python_and_pip_are(tmp_path: Path) -> None:
    """A fresh venv holds pip alone: what someone else's image without our dependencies looks like
    (version comparisons then use the packaging library pip carries)."""
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "venv")], check=True, timeout=120)
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(SRC)}
    out = subprocess.run(
        [str(tmp_path / "venv" / "bin" / "python"), "-m", "mcore_images.doctor", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    data = json.loads(out.stdout)
    assert out.returncode == data["exit_code"] in (0, 1)
    assert data["counts"]["crash"] == 0
    assert len(data["findings"]) == len(doctor.load_checks())


def test_bad_hf_config_path_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert doctor.main(["--hf-config", str(tmp_path / "missing.json")]) == 2
    assert "config.json" in capsys.readouterr().err


def test_every_check_has_a_failing_and_a_passing_test() -> None:
    """Guard: a new check needs tests beside this file (its id must appear in one of this folder's tests)."""
    text = "".join(path.read_text() for path in Path(__file__).parent.glob("test_*.py"))
    missing = [cid for cid in doctor.load_checks() if f'"{cid}"' not in text]
    assert not missing, missing
