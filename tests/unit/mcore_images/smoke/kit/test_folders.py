"""Checkpoint folders: made and probed at start, held by one job, free again once that job is dead (no torch)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mcore_images.smoke.kit import folders
from tests.unit.conftest import PYTHONPATH

HOLD = """
import sys, time
from pathlib import Path
from mcore_images.smoke.kit import folders
owner = folders.Owner(Path(sys.argv[1]), "holder")
print("held", flush=True)
time.sleep(600)
"""


def holder(folder: Path) -> subprocess.Popen[str]:
    """Another process that takes ``folder`` and keeps it until it is killed."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": PYTHONPATH})
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_missing_folder_is_made_and_said_to_be_made(tmp_path: Path) -> None:
    target = tmp_path / "a" / "ckpt"
    assert folders.prepare(target) is True
    assert target.is_dir() and list(target.iterdir()) == []  # the probe is gone again
    assert folders.prepare(target) is False


def test_a_folder_another_rank_makes_in_between_is_taken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two ranks prepare one folder: the other makes it between this one's look and its mkdir."""
    target = tmp_path / "ckpt"
    real_is_dir = Path.is_dir
    looks = iter([False])  # the first look finds nothing; then the other rank's mkdir lands

    def is_dir(self: Path) -> bool:
        if self == target:
            seen = next(looks, None)
            if seen is not None:
                target.mkdir()
                return seen
        return real_is_dir(self)

    monkeypatch.setattr(Path, "is_dir", is_dir)
    assert folders.prepare(target) is False and real_is_dir(target)


def test_a_file_in_the_way_is_refused_and_left_alone(tmp_path: Path) -> None:
    (tmp_path / "ckpt").write_text("sentinel")
    with pytest.raises(folders.FolderError, match="exists and is not a folder"):
        folders.prepare(tmp_path / "ckpt")
    with pytest.raises(folders.FolderError, match=r"cannot create .*/ckpt/sub \(Not a directory\)"):
        folders.prepare(tmp_path / "ckpt" / "sub")
    assert (tmp_path / "ckpt").read_text() == "sentinel"


def test_only_an_empty_folder_is_removed(tmp_path: Path) -> None:
    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "sentinel").write_text("x")
    folders.remove_if_empty(tmp_path / "kept")
    assert (tmp_path / "kept" / "sentinel").read_text() == "x"
    (tmp_path / "empty").mkdir()
    folders.remove_if_empty(tmp_path / "empty")
    assert not (tmp_path / "empty").exists()


def test_a_second_job_is_refused_and_told_who_holds_the_folder(tmp_path: Path) -> None:
    proc = holder(tmp_path)
    try:
        with pytest.raises(folders.FolderError) as refused:
            folders.Owner(tmp_path, "train-gpt")
        line = str(refused.value)
        assert f"{tmp_path} is being written by another job (holder, pid {proc.pid} on host " in line
        assert line.endswith("let it finish or stop it, or pass another folder") and "\n" not in line
    finally:
        proc.kill()
        proc.wait()


def test_a_killed_holder_leaves_no_stale_lock(tmp_path: Path) -> None:
    proc = holder(tmp_path)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    owner = folders.Owner(tmp_path, "train-gpt")  # the resumed job takes the folder over at once
    info = json.loads((tmp_path / folders.LOCK_NAME).read_text())
    assert info["program"] == "train-gpt" and info["pid"] == os.getpid() and owner.warning is None


def test_the_lock_holds_while_its_holder_lives(tmp_path: Path) -> None:
    folders.Owner(tmp_path, "first").file  # noqa: B018  (dropped at once: the lock goes with it)
    kept = folders.Owner(tmp_path, "second")
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", "import sys; from pathlib import Path; "
                           "from mcore_images.smoke.kit import folders; folders.Owner(Path(sys.argv[1]), 'third')",
                           str(tmp_path)],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": PYTHONPATH}, timeout=60)
    assert proc.returncode != 0 and "is being written by another job (second, pid" in proc.stderr
    assert time.monotonic() - start < 30 and kept.file is not None


def test_a_lock_file_that_names_no_job_is_said_so() -> None:
    assert folders.describe("") == "its lock file names no job"
    assert folders.describe('{"program": "p", "pid": 3, "host": "h", "started": "t", "slurm_job": "9"}') == (
        "p, pid 3 on host h, started t, Slurm job 9")


def test_deleting_the_lock_file_does_not_let_a_second_writer_in(tmp_path: Path) -> None:
    """Before: the lock was on writer.lock, so `rm writer.lock` while job A ran let job B lock a new file and
    overwrite A's checkpoints. The lock is on the folder itself."""
    kept = folders.Owner(tmp_path, "first")
    (tmp_path / folders.LOCK_NAME).unlink()
    proc = subprocess.run([sys.executable, "-c", "import sys; from pathlib import Path; "
                           "from mcore_images.smoke.kit import folders; folders.Owner(Path(sys.argv[1]), 'second')",
                           str(tmp_path)],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": PYTHONPATH}, timeout=60)
    assert proc.returncode != 0 and "is being written by another job (its lock file" in proc.stderr, proc.stderr
    assert kept.folder_fd is not None and kept.warning is None


def test_a_held_folder_is_named_by_a_probe_that_does_not_take_it(tmp_path: Path) -> None:
    """A job judges whether another holds its folder before it judges the checkpoints there (before: a second job
    on a running job's folder was told its saves would move `latest` back, not that a job was writing there)."""
    folders.check_not_held(tmp_path / "missing")  # nothing there: nothing to name
    folders.check_not_held(tmp_path)  # free: the probe passes and leaves the folder free
    folders.check_not_held(tmp_path)
    proc = holder(tmp_path)
    try:
        with pytest.raises(folders.FolderBusy) as refused:
            folders.check_not_held(tmp_path)
        assert f"{tmp_path} is being written by another job (holder, pid {proc.pid} on host " in str(refused.value)
    finally:
        proc.kill()
        proc.wait()
    folders.check_not_held(tmp_path)
    owner = folders.Owner(tmp_path, "train-gpt")  # the probes left no lock behind
    assert owner.folder_fd is not None


def test_a_probe_of_another_job_does_not_refuse_the_claim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A probe holds a shared lock for an instant; a job claiming the folder in that instant tries again rather
    than naming a holder that is not there."""
    calls = []
    real = folders.fcntl.flock

    def flock(fd: int, op: int) -> None:
        calls.append(op)
        if len(calls) == 1:  # another job's probe holds its instant
            raise BlockingIOError
        real(fd, op)

    monkeypatch.setattr(folders.fcntl, "flock", flock)
    owner = folders.Owner(tmp_path, "train-gpt")
    assert owner.folder_fd is not None and len(calls) >= 2
