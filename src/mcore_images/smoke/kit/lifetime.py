"""Processes that end with the process that started them, however it ends.

A rank leaves with os._exit (no atexit handlers, no multiprocessing finalizers) or is killed by torchrun,
Slurm or the smoke's launcher, so nothing it started can rely on being told to stop: megatron-core's
result-queue manager, its forked writers and their workers were left running with parent 1 after every
smoke that saved in the background, and ranks outlived a torchrun killed by SIGKILL (torchrun starts each
rank in a session of its own, which no signal to torchrun's group reaches). The kernel can do the telling:
``prctl(PR_SET_PDEATHSIG)``. Standard library only: the ranks call it before torch is imported.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
"""prctl(2): the signal the kernel sends this process when the thread that started it ends."""


def die_with_parent(parent: int | None = None) -> None:
    """Have the kernel end this process (SIGKILL) when its parent does. ``parent``: the pid it must still
    have (default: the one it has now); when the parent has already gone, leave at once."""
    if not sys.platform.startswith("linux"):
        return
    expected = os.getppid() if parent is None else parent
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != expected:  # it ended before the request took effect
        os._exit(0)


_forking_parent = 0
"""The pid of the process that is forking, set in it just before each fork (the child reads its copy)."""
_tied = False


def _remember_parent() -> None:
    global _forking_parent
    _forking_parent = os.getpid()


def helpers_die_with_rank() -> None:
    """From now on every process this one forks (megatron-core's background writer, and the workers that one
    forks in turn) ends with its parent. Call on the main thread: the kernel ties a child to the thread that
    forked it, and megatron-core's saves fork from the training loop's thread."""
    global _tied
    if not _tied:
        os.register_at_fork(before=_remember_parent, after_in_child=lambda: die_with_parent(_forking_parent))
        _tied = True
