"""The folders programs on the image write checkpoints into: checked at start (there, or creatable, and
writable), owned by one job at a time, and how much room they have left.

Standard library only: the smoke's launcher checks its folder before torchrun starts, where torch may
be missing.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import socket
import sys
import tempfile
from pathlib import Path
from typing import IO

LOCK_NAME = "writer.lock"
"""The file in a checkpoint folder that the job writing there holds locked, and describes."""
PROBE_PREFIX = ".write-test-"
"""The name of the file ``prepare`` writes and removes to prove a folder writable (another rank's may be there)."""


def own_files(name: str) -> bool:
    """Whether a file of a checkpoint folder is one these helpers put there (the lock, a write probe) rather than
    anything a save wrote: a folder holding only these holds no checkpoint yet."""
    return name == LOCK_NAME or name.startswith(PROBE_PREFIX)


class FolderError(Exception):
    """A folder that cannot be written; str() is one line naming the cause."""


class FolderBusy(FolderError):
    """A folder another job is writing; str() is one line naming that job and the fix."""


def prepare(folder: Path) -> bool:
    """Create ``folder`` (and its parents) when missing and prove that a file can be written in it, before
    any work starts. Returns whether this call created it (so that only then may its caller remove it)."""
    created = False
    if not folder.is_dir():
        try:
            folder.mkdir(parents=True)
            created = True
        except FileExistsError:  # another rank or job made it in the meantime, or it is a file
            if not folder.is_dir():
                raise FolderError(f"{folder} exists and is not a folder") from None
        except OSError as exc:
            raise FolderError(f"cannot create {folder} ({exc.strerror})") from exc
    try:
        fd, probe = tempfile.mkstemp(prefix=PROBE_PREFIX, dir=folder)
    except OSError as exc:
        raise FolderError(f"cannot write in {folder} ({exc.strerror})") from exc
    try:
        os.write(fd, b"\0")
    except OSError as exc:
        raise FolderError(f"cannot write in {folder} ({exc.strerror})") from exc
    finally:
        os.close(fd)
        os.unlink(probe)
    return created


def remove_if_empty(folder: Path) -> None:
    """Remove a folder this program created, only when nothing is left in it (rmdir cannot delete files)."""
    with contextlib.suppress(OSError):
        folder.rmdir()


def free_bytes(folder: Path) -> int:
    """Bytes this process may still write on the file system holding ``folder`` (root may use the
    reserved blocks too)."""
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    st = os.statvfs(probe)
    blocks = st.f_bfree if os.geteuid() == 0 else st.f_bavail
    return blocks * st.f_frsize


class Owner:
    """This job's hold on a checkpoint folder: an exclusive ``flock`` on the folder itself, kept until the process
    ends, and ``LOCK_NAME`` in it saying which job holds it. The kernel drops the lock when its holder dies, SIGKILL
    included, so a killed job leaves no stale lock behind and its resumed run takes the folder over at once (on NFS
    the server drops it when the client's lease lapses). A pid and host written in a file could not tell a dead job
    from a live one in another container or on another node; the lock can. The lock is on the folder, not on the
    file: a deleted ``LOCK_NAME`` (made again by the next job, a new file) cannot let a second writer in. Where the
    file system cannot lock a folder, the file is locked instead, and that is said."""

    def __init__(self, folder: Path, program: str) -> None:
        self.path = folder / LOCK_NAME
        self.file: IO[str] | None = None
        self.folder_fd: int | None = None
        self.warning: str | None = None
        try:
            self.folder_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
            fcntl.flock(self.folder_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.folder_fd)  # type: ignore[arg-type]
            self.folder_fd = None
            raise FolderBusy(f"{folder} is being written by another job ({self._holder()}): let it finish or stop "
                              "it, or pass another folder") from None
        except OSError:  # the folder cannot be opened or locked here (some network file systems): lock the file
            if self.folder_fd is not None:
                os.close(self.folder_fd)
            self.folder_fd = None
        try:
            handle = open(self.path, "a+")  # noqa: SIM115  (held for the life of the process)
        except OSError as exc:
            raise FolderError(f"cannot write in {folder} ({exc.strerror})") from exc
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            self.__del__()
            raise FolderBusy(f"{folder} is being written by another job ({self._holder()}): let it finish or stop "
                              "it, or pass another folder") from None
        except OSError as exc:  # a file system without locks (e.g. Lustre mounted without -o flock)
            if self.folder_fd is None:
                self.warning = (f"cannot lock {self.path} ({exc.strerror}): nothing stops a second job from "
                                "writing into the same folder")
                handle.close()
                return
        if self.folder_fd is None:
            self.warning = (f"cannot lock the folder {folder} itself: {LOCK_NAME} is locked instead, and deleting it "
                            "would let a second job in")
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({
            "program": program, "host": socket.gethostname(), "pid": os.getpid(),
            "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "slurm_job": os.environ.get("SLURM_JOB_ID"), "argv": sys.argv,
        }) + "\n")
        handle.flush()
        self.file = handle

    def __del__(self) -> None:  # the folder's lock goes with its holder, as the file's does with its handle
        if self.folder_fd is not None:
            os.close(self.folder_fd)
            self.folder_fd = None

    def _holder(self) -> str:
        try:
            return describe(self.path.read_text())
        except OSError:
            return "its lock file is gone"


def describe(text: str) -> str:
    """The holder a lock file names, in a few words."""
    try:
        info = json.loads(text)
        who = f"{info['program']}, pid {info['pid']} on host {info['host']}, started {info['started']}"
    except (ValueError, KeyError, TypeError):
        return "its lock file names no job"
    return who + (f", Slurm job {info['slurm_job']}" if info.get("slurm_job") else "")
