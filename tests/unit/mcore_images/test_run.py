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
