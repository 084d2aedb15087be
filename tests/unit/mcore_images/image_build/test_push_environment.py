"""A build that pushes candidates judges what reaches bake from the environment as it judges the arguments after
--: every variable the bake files declare can be set from there, and only those bake_args.CANDIDATE_ENV allows may
be. `docker` is a recorder on PATH that answers as an engine with buildx would; the checkout is a copy of its bake
files, env/ and Dockerfile in a temporary root."""

from __future__ import annotations

import os
import re
import shutil
import stat
from pathlib import Path

import pytest

from mcore_images import cli
from mcore_images.image_build import bake_args
from mcore_images.image_build.debian_base import RECIPE
from tests.unit.conftest import ROOT

SHA = "0123456789abcdef0123456789abcdef01234567"
BUILD = ["build", "--stack", "debian-verl", "--candidate", SHA, "--registry", "127.0.0.1:5000"]


@pytest.fixture
def engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A checkout copy as MCORE_IMAGES_ROOT and a `docker` that records every call: its reads answer as an engine
    with buildx and the stack's Debian base would, and bake "succeeds" without building anything."""
    root = tmp_path / "checkout"
    root.mkdir()
    shutil.copytree(ROOT / "env", root / "env")
    shutil.copytree(ROOT / "docker", root / "docker")
    for name in ("docker-bake.hcl", "docker-bake.json", "Dockerfile"):
        shutil.copy(ROOT / name, root / name)
    log = tmp_path / "docker.log"
    recorder = tmp_path / "bin" / "docker"
    recorder.parent.mkdir()
    recorder.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "{log}"\n'
                        f'case "$1 $2" in "image inspect") echo {RECIPE};; esac\nexit 0\n')
    recorder.chmod(recorder.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{recorder.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("MCORE_IMAGES_ROOT", str(root))
    declared = re.findall(r'^variable\s+"(\w+)"', (root / "docker-bake.hcl").read_text(), re.M)
    for name in [*declared, "SOURCE_DATE_EPOCH", "DEBIAN_MIRROR"]:  # this machine's own settings
        monkeypatch.delenv(name, raising=False)
    return log


def baked(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if line.startswith("buildx bake")] if log.exists() else []


@pytest.mark.parametrize(("name", "value"), [
    ("LOCKS", "{tmp}/locks"), ("GIT_SHA", "0" * 40), ("CACHE_FROM", "type=local,src={tmp}/cache"),
    ("CACHE_TO", "type=local,dest={tmp}/cache"), ("SOURCE_DATE_EPOCH", "1"),
])
def test_a_variable_that_changes_what_a_candidate_is_made_of_is_refused_before_bake(
        name: str, value: str, engine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture) -> None:
    """Before: `LOCKS=DIR GIT_SHA=000…0 CACHE_FROM=… mcore-images build --candidate …` ran bake with --push,
    contexts.locks=DIR and a revision label that lies, where `-- --set '*.contexts.locks=…'` is refused."""
    monkeypatch.setenv(name, value.format(tmp=tmp_path))
    assert cli.main(BUILD) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {name}=") and f"unset {name}, or build without --candidate" \
        in err[0], err
    assert baked(engine) == []


def test_the_allowed_variables_reach_a_candidate_build(engine: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    allowed = {"REGISTRY": "127.0.0.1:5000", "IMAGE_REPO": "mcore-images", "MAX_JOBS": "2", "NVCC_THREADS": "1",
               "CA_BUNDLE": str(ca), "PIP_INDEX_URL_FILE": str(ca), "NO_CACHE_FILTER": "runtime"}
    assert set(allowed) == set(bake_args.CANDIDATE_ENV)
    for name, value in allowed.items():
        monkeypatch.setenv(name, value)
    assert cli.main(BUILD) == 0
    [bake] = baked(engine)
    assert "--push" in bake.split() and f"runtime-debian-verl.tags=127.0.0.1:5000/mcore-images:candidate-{SHA}" in bake


def test_a_variable_no_list_names_is_refused_once_a_bake_file_declares_it(engine: Path,
                                                                         monkeypatch: pytest.MonkeyPatch,
                                                                         capsys: pytest.CaptureFixture) -> None:
    """The variables are read from the bake files, not from a list here: a new one is refused until it is allowed."""
    root = Path(os.environ["MCORE_IMAGES_ROOT"])
    hcl = root / "docker-bake.hcl"
    hcl.write_text(hcl.read_text() + '\nvariable "BASE_OVERRIDE" {\n  default = ""\n}\n')
    monkeypatch.setenv("BASE_OVERRIDE", "docker-image://alpine")
    assert cli.main(BUILD) == 2
    assert "BASE_OVERRIDE=docker-image://alpine is set in the environment" in capsys.readouterr().err
    assert baked(engine) == []


def test_a_cache_import_changes_what_a_pushed_candidate_is_made_of() -> None:
    """`-- --set '*.cache-from=…'` on a candidate push: the same as CACHE_FROM in the environment."""
    own = {"target": {"runtime-debian": {"context": ".", "cache-from": []}}}
    given = {"target": {"runtime-debian": {"context": ".", "cache-from": [{"type": "local", "src": "/cache"}]}}}
    assert bake_args.changed(own, given) == ["runtime-debian.cache-from"]
    assert bake_args.changed(own, {"target": {"runtime-debian": {"context": ".", "cache-from": [],
                                                                 "no-cache": True}}}) == []
