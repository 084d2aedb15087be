"""Installable alone: the package as pip installs it (its files and package data, no checkout around it)
plans, names tags, checks a verify request and runs the doctor from any folder; commands that need the
checkout say so in one line."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.conftest import ROOT

PACKAGE = ROOT / "src" / "mcore_images"


@pytest.mark.parametrize(("folder", "shipped"), [("env", "**/*"), ("deploy", "k8s/*.yaml")])
def test_the_wheels_package_data_holds_what_the_tool_reads(folder: str, shipped: str) -> None:
    """data/env and data/deploy link to the checkout's env/ and deploy/ (one copy of each file); the wheel takes what
    the package-data globs match: every file of env/, the Kubernetes Job of deploy/ (`kube-manifest`)."""
    line = re.search(r"^mcore_images = (\[.*\])$", (ROOT / "pyproject.toml").read_text(), re.M)
    assert line, "pyproject.toml has no package-data line for mcore_images"
    globs = json.loads(line.group(1))
    assert (PACKAGE / "data" / folder).resolve() == (ROOT / folder).resolve()
    files = [p.relative_to(PACKAGE).as_posix() for p in (PACKAGE / "data" / folder).glob(shipped) if p.is_file()]
    assert files and all(any(fnmatch.fnmatch(f, g) for g in globs) for f in files), [
        f for f in files if not any(fnmatch.fnmatch(f, g) for g in globs)]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """site-packages with the package copied as a wheel lays it out (links followed), and an empty folder."""
    site = tmp_path_factory.mktemp("site")
    shutil.copytree(PACKAGE, site / "mcore_images", symlinks=False,
                    ignore=shutil.ignore_patterns("__pycache__"))
    return site, tmp_path_factory.mktemp("anywhere")


def _run(installed: tuple[Path, Path], *args: str, path: str | None = None) -> subprocess.CompletedProcess[str]:
    """The installed package's command from an empty folder; ``path``: a PATH of the test's own."""
    site, cwd = installed
    env = {k: v for k, v in os.environ.items() if k not in ("MCORE_IMAGES_ROOT", "PYTHONPATH")}
    env["PYTHONPATH"] = str(site)
    if path is not None:
        env["PATH"] = path
    return subprocess.run([sys.executable, "-m", "mcore_images", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, check=False, timeout=120)


def test_plan_and_tags_work_from_any_folder(installed: tuple[Path, Path]) -> None:
    plan = _run(installed, "plan", "--format", "names")
    assert plan.returncode == 0 and "debian" in plan.stdout.split(), plan.stderr
    tags = _run(installed, "tags", "--stack", "debian", "--layer", "runtime")
    assert tags.returncode == 0 and "runtime-mcore" in tags.stdout, tags.stderr


def test_verify_reaches_the_registry_with_the_shipped_policies(installed: tuple[Path, Path], tmp_path: Path) -> None:
    """With a key and the wheel's own policies, verify gets as far as the registry tools: on a PATH of the test's
    own, without oras (what `make test` needs has none), it names them and how to install them. The same request
    with the real oras, against a port where no registry listens, is a registry test (tests/registry)."""
    _, cwd = installed
    key = cwd / "cosign.pub"
    key.write_text("-----BEGIN PUBLIC KEY-----\n")
    bare = tmp_path / "bin"
    bare.mkdir()
    done = _run(installed, "verify", "127.0.0.1:9/none:tag", "--key", str(key), path=str(bare))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "COULD-NOT-CHECK" in done.stdout and "policy release" in done.stdout, done.stdout
    assert "oras is not installed or not on PATH: install oras and cosign" in done.stdout, done.stdout


def test_kube_manifest_prints_the_shipped_job(installed: tuple[Path, Path]) -> None:
    """Before: FileNotFoundError (no data/deploy); the wheel carried no Job."""
    done = _run(installed, "kube-manifest", "registry.local:5000/mcore-images:runtime-debian")
    assert done.returncode == 0, done.stderr
    assert "image: registry.local:5000/mcore-images:runtime-debian" in done.stdout and "kind: Job" in done.stdout


def test_the_doctor_runs(installed: tuple[Path, Path]) -> None:
    done = _run(installed, "doctor", "--only", "python")
    assert "Traceback" not in done.stderr and " ok," in done.stdout, (done.stdout, done.stderr)


@pytest.mark.parametrize("command", [["validate"], ["lock", "--check"], ["build", "--dry-run"]])
def test_checkout_commands_say_they_need_one(installed: tuple[Path, Path], command: list[str]) -> None:
    done = _run(installed, *command)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "works in a checkout of mcore-images" in lines[0], done.stderr
