"""`python -m mcore_images.smoke.attention --out FILE` keeps the create-only rule (create_only.py), on a machine
without torch (hidden, whatever this one has: the run ends "could not run" and still writes its section).

Before: given DIR/certificate.json it replaced the user's certificate.json even on a run that could not run; given
attention.json it consumed the user's attention.json.tmp; given a folder it left a half-made FOLDER.tmp beside it and a
traceback; `--seed 99999999999999999999` ended in a traceback; Ctrl-C in a traceback."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mcore_images import create_only
from mcore_images.smoke.attention import cli
from tests.support.host import without_modules
from tests.unit.conftest import PYTHONPATH

USERS = b'{"mine": true, "notes": "a passed certificate of my own"}\n'


def attention(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([without_modules(tmp_path / "hidden", "torch"), PYTHONPATH]),
           "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run([sys.executable, "-m", "mcore_images.smoke.attention", *args], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_users_file_is_refused_before_anything_runs(tmp_path: Path) -> None:
    mine = tmp_path / "certificate.json"
    mine.write_bytes(USERS)
    before = sha(mine)
    done = attention(tmp_path, "--cpu", "--out", str(mine))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"smoke.attention: could not run: --out {mine} is a file `mcore-images smoke.attention` did not write: give a "
        "new file name, or move it away; nothing was changed"]
    assert sha(mine) == before and sorted(p.name for p in tmp_path.iterdir()) == ["certificate.json", "hidden"]


@pytest.mark.parametrize(("out", "said"), [
    ("{tmp}/folder", "--out {tmp}/folder is a folder: give the path of a new file"),
    ("/proc/nope/attention.json", "--out /proc/nope/attention.json cannot be created in /proc"),
    ("{tmp}/mine.txt/attention.json", "--out {tmp}/mine.txt/attention.json cannot be created: {tmp}/mine.txt is a "
                                      "file; choose a path under a folder"),
])
def test_a_folder_or_a_path_that_cannot_be_written_is_one_line(tmp_path: Path, out: str, said: str) -> None:
    (tmp_path / "folder").mkdir()
    (tmp_path / "mine.txt").write_text("mine\n")
    done = attention(tmp_path, "--cpu", "--out", out.format(tmp=tmp_path))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.splitlines()) == 1 and said.format(tmp=tmp_path) in done.stderr, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder", "hidden", "mine.txt"]
    assert list((tmp_path / "folder").iterdir()) == []


def test_a_users_tmp_file_beside_the_section_is_kept_and_the_section_taken_again(tmp_path: Path) -> None:
    out = tmp_path / "attention.json"
    mine = tmp_path / "attention.json.tmp"
    mine.write_bytes(USERS)
    before = sha(mine)
    for _ in range(2):  # the second run replaces the section the first wrote: its own
        done = attention(tmp_path, "--cpu", "--out", str(out))
        assert done.returncode == 2, done.stderr  # no torch: could not run, and said so in the section
        section = json.loads(out.read_text())
        assert section["status"] == "could-not-run"
        assert section[create_only.WRITTEN_BY] == "mcore-images smoke.attention"
    assert sha(mine) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["attention.json", "attention.json.tmp", "hidden"]


def test_a_seed_out_of_range_is_one_line(tmp_path: Path) -> None:
    done = attention(tmp_path, "--cpu", "--seed", "99999999999999999999")
    assert done.returncode == 2 and done.stderr.splitlines() == [
        "smoke.attention: could not run: argument --seed: 99999999999999999999 is out of range: give a whole number "
        "from 0 to 4294967295, e.g. 1234; see `python -m mcore_images.smoke.attention --help`"]


def test_ctrl_c_is_one_line_and_exit_130_with_out_untouched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture) -> None:
    def interrupted(*args: object, **kwargs: object) -> dict:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "run", interrupted)
    out = tmp_path / "attention.json"
    assert cli.main(["--cpu", "--out", str(out)]) == 130
    assert capsys.readouterr().err.strip().splitlines() == [
        "smoke.attention: interrupted (Ctrl-C): stopped; --out left as it was"]
    assert list(tmp_path.iterdir()) == []
