"""Every container start asks the same things first (container.preflight): `run`, and `smoke`, `bridge` and `bench
--image`. Docker here is a stand-in with no GPU runtime, answering as the Docker Engine does. Before: `mcore-images
smoke --image IMG` on such a host printed Docker's raw error and exited 125 (only `run` asked first), and an --out
with a colon reached docker's -v raw."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mcore_images.launch import container
from tests.unit.conftest import PYTHONPATH

DOCKER = """#!/bin/sh
echo "$*" >> "{log}"
case "$*" in
  "image inspect "*) exit 0 ;;
  *"--gpus"*) echo 'docker: Error response from daemon: could not select device driver "" with' \
                    'capabilities: [[gpu]].' >&2
              echo "Run 'docker run --help' for more information" >&2; exit 125 ;;
  *) exit 0 ;;
esac
"""


def run(tmp_path: Path, *argv: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    bin_ = tmp_path / "bin"
    bin_.mkdir(exist_ok=True)
    log = tmp_path / "docker.log"
    (bin_ / "docker").write_text(DOCKER.format(log=log))
    (bin_ / "docker").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}", "PYTHONPATH": PYTHONPATH}
    done = subprocess.run([sys.executable, "-m", "mcore_images", *argv], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    return done, log.read_text().splitlines() if log.exists() else []


@pytest.mark.parametrize("program", ["smoke", "bridge", "bench"])
def test_a_program_in_an_image_on_a_host_without_a_gpu_runtime_is_one_line(tmp_path: Path, program: str) -> None:
    done, calls = run(tmp_path, program, "--image", "mcore-images:runtime-debian", "--out", str(tmp_path / "out"))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: this Docker Engine has no GPU runtime (Error response from "
                                                   "daemon: could not select device driver"), lines
    assert "install the NVIDIA Container Toolkit" in lines[0] and "or pass --cpu" in lines[0]
    assert not (tmp_path / "out").exists()
    assert not any("python -m" in call for call in calls), calls  # the program never started


@pytest.mark.parametrize("argv", [
    ["run", "mcore-images:runtime-debian", "--out", "{tmp}/a:b", "--print"],
    ["smoke", "--image", "mcore-images:runtime-debian", "--out", "{tmp}/a:b"],
])
def test_an_out_with_a_colon_is_one_line_before_docker(tmp_path: Path, argv: list[str]) -> None:
    done, calls = run(tmp_path, *(a.format(tmp=tmp_path) for a in argv))
    assert done.returncode == 2 and calls == [], (done.stderr, calls)
    assert done.stderr.strip().splitlines() == [
        f"error: --out {tmp_path}/a:b is {tmp_path}/a:b, whose ':' docker's -v reads as a separator: give a folder "
        "whose path holds no ':'"]
    assert not (tmp_path / "a:b").exists()


def test_run_out_empty_is_refused_not_the_current_folder(tmp_path: Path) -> None:
    """Before: `run --out ''` mounted the current folder at /out."""
    done, calls = run(tmp_path, "run", "mcore-images:runtime-debian", "--out", "", "--print")
    assert done.returncode == 2 and calls == [] and "--out is empty" in done.stderr, done.stderr


def test_the_mount_check_itself(tmp_path: Path) -> None:
    assert container.mount_problem(tmp_path / "plain", "--out") is None
    assert "docker's -v reads as a separator" in (container.mount_problem(tmp_path / "x:y", "--out") or "")
