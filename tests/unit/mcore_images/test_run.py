"""`mcore-images run`: the flags NVIDIA's containers ask for, and the README line is what --print prints."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from mcore_images import cli, run
from tests.unit.conftest import ROOT


def test_print_gives_the_readme_line(capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["run", "mcore-images:runtime-debian", "--print", "--", "python", "-m", "smoke", "--out",
                     "/out/smoke"]) == 0
    line = capsys.readouterr().out.strip()
    assert line in (ROOT / "README.md").read_text(), line
    words = shlex.split(line.replace('"$PWD/out"', "PWD/out"))
    for flag in ("--gpus", "--ipc=host", "memlock=-1", "stack=67108864", "NCCL_NVLS_ENABLE=0"):
        assert flag in words
    assert re.search(r'-v "\$PWD/out":/out', line)


def test_cpu_drops_gpus_and_no_command_is_an_interactive_shell(tmp_path: Path) -> None:
    argv = run.command_for("img", [], cpu=True, out=tmp_path, memlock=False, tty=True)
    assert "--gpus" not in argv and "memlock=-1" not in argv and "--ipc=host" in argv
    assert argv[-2:] == ["img", "bash"] and "-it" in argv and f"{tmp_path.resolve()}:/out" in argv
    scripted = run.command_for("img", ["python", "-V"], cpu=False, out=tmp_path, memlock=True, tty=True)
    assert "-it" not in scripted and scripted[-3:] == ["img", "python", "-V"] and "--gpus" in scripted


def test_an_image_that_is_not_there_is_one_line_after_one_pull(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture) -> None:
    """Before: `run no/such:image` went on to the memlock probe and docker run, and ended in docker's own error
    after two pull attempts."""
    log = tmp_path / "docker.log"
    docker = tmp_path / "docker"
    docker.write_text(f"#!/bin/sh\necho \"$@\" >> {log}\n"
                      "case \"$1\" in image) exit 1;; pull) echo 'pull access denied for no/such' >&2; exit 1;; "
                      "esac\nexit 0\n")
    docker.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{__import__('os').environ['PATH']}")
    assert cli.main(["run", "no/such:image", "--out", str(tmp_path / "out"), "--", "true"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no/such:image is not in the local Docker and could not be pulled" in err[0]
    assert "pull access denied" in err[0]
    assert log.read_text().splitlines() == ["image inspect no/such:image", "pull -q no/such:image"]
    assert not (tmp_path / "out").exists()
