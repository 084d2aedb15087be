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
import time
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


def busy_error(folder: Path) -> FolderBusy:
    """The refusal for a folder another job holds, naming that job from its lock file."""
    try:
        holder = describe((folder / LOCK_NAME).read_text())
    except OSError:
        holder = "its lock file is gone"
    return FolderBusy(f"{folder} is being written by another job ({holder}): let it finish or stop it, or pass "
                      "another folder")


def check_not_held(folder: Path) -> None:
    """Raise ``FolderBusy`` when another job holds ``folder`` now, without taking it: a job judges this before it
    judges what the folder holds, so that a second job is told of the first rather than of the first's checkpoints.
    The probe takes a shared lock for an instant: the ranks of one job may probe at once, and an ``Owner``'s
    exclusive lock, held by a running job, refuses it. A folder that is missing or cannot be locked here is not
    held, as far as this can tell; ``Owner`` decides when the job claims it."""
    for target, flags in ((folder, os.O_RDONLY | os.O_DIRECTORY), (folder / LOCK_NAME, os.O_RDONLY)):
        try:
            fd = os.open(target, flags)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raise busy_error(folder) from None
        except OSError:
            continue  # no locks on this file system: Owner says so when it claims the folder
        finally:
            os.close(fd)  # closing drops the probe's lock


def lock_exclusive(fd: int, tries: int = 5, pause_s: float = 0.05) -> None:
    """Take ``fd``'s exclusive lock without waiting on a holder: a few short tries let another job's
    ``check_not_held`` probe (an instant's shared lock) pass; a running job's lock still refuses within
    ``tries * pause_s`` (BlockingIOError)."""
    for attempt in range(tries):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if attempt == tries - 1:
                raise
            time.sleep(pause_s)


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
            lock_exclusive(self.folder_fd)
        except BlockingIOError:
            os.close(self.folder_fd)  # type: ignore[arg-type]
            self.folder_fd = None
            raise busy_error(folder) from None
        except OSError:  # the folder cannot be opened or locked here (some network file systems): lock the file
            if self.folder_fd is not None:
                os.close(self.folder_fd)
            self.folder_fd = None
        try:
            handle = open(self.path, "a+")  # noqa: SIM115  (held for the life of the process)
        except OSError as exc:
            raise FolderError(f"cannot write in {folder} ({exc.strerror})") from exc
        try:
            lock_exclusive(handle.fileno())
        except BlockingIOError:
            handle.close()
            self.__del__()
            raise busy_error(folder) from None
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


def describe(text: str) -> str:
    """The holder a lock file names, in a few words."""
    try:
        info = json.loads(text)
        who = f"{info['program']}, pid {info['pid']} on host {info['host']}, started {info['started']}"
    except (ValueError, KeyError, TypeError):
        return "its lock file names no job"
    return who + (f", Slurm job {info['slurm_job']}" if info.get("slurm_job") else "")
