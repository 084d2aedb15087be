"""The smoke's launcher counts the attention check: a wrong backend fails a run that passed, a check that could not
run makes it could-not-run, and a check that hangs or dies without its section fails."""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

import pytest

from mcore_images.smoke import launcher
from mcore_images.smoke.kit import errors


def test_a_wrong_backend_fails_a_run_that_passed() -> None:
    wrong = {"status": "failed", "error": "attention wrong: flash × sbhd MHA d64: out 3.92 > 0.0865"}
    assert launcher.with_attention(errors.PASSED, None, wrong) == (
        errors.FAILED, "attention check: attention wrong: flash × sbhd MHA d64: out 3.92 > 0.0865")
    code, error = launcher.with_attention(errors.FAILED, "rank 1 failed", wrong)
    assert code == errors.FAILED and error.startswith("rank 1 failed; attention check: attention wrong")


def test_a_check_that_could_not_run_leaves_no_passed_certificate() -> None:
    missing = {"status": "could-not-run", "error": "no backend ran any case"}
    assert launcher.with_attention(errors.PASSED, None, missing) == (
        errors.COULD_NOT_RUN, "attention check: no backend ran any case")
    assert launcher.with_attention(errors.PASSED, None, {"status": "passed"}) == (errors.PASSED, None)
    assert launcher.with_attention(errors.PASSED, None, None) == (errors.PASSED, None)


def test_a_check_that_hangs_or_writes_nothing_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    args = argparse.Namespace(attention=True, cpu=True, watchdog=5.0)

    def hangs(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess:
        raise subprocess.TimeoutExpired(cmd, 5.0)

    monkeypatch.setattr(launcher.subprocess, "run", hangs)
    sec = launcher.run_attention(args, tmp_path, {})
    assert sec is not None and sec["status"] == "failed" and "within 5 s" in sec["error"]
    monkeypatch.setattr(launcher.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(cmd, 139))
    sec = launcher.run_attention(args, tmp_path, {})
    assert sec is not None and sec["status"] == "failed" and "exited 139 without writing" in sec["error"]
    assert launcher.run_attention(argparse.Namespace(attention=False), tmp_path, {}) is None
