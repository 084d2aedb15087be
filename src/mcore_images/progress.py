"""Progress of long work: a line per step, saying what runs, how far it is and the time since it started.

A pull of a 6 GB image, an image's tests or a framework's own tests take minutes; before, they printed nothing until
they ended. The same lines serve a terminal and a CI log (no carriage returns, no colours): ``[tag] m:ss what``, one
per step, and one after each quiet stretch (``every`` seconds without a step) so a log never stalls silently.

``follow`` runs a program and hands each line of its output to a reader (a pull's layers, pytest's tests), which
says the steps; it keeps the whole output for the caller and stops the program at its time limit.
"""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TextIO

from mcore_images import tools

QUIET_S = 30.0
"""After this long without a step, one line says the work is still running (CI logs show no spinner)."""


def clock(seconds: float) -> str:
    """``m:ss``, or ``h:mm:ss`` past an hour."""
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


@dataclass
class Progress:
    """Says steps for one piece of work: ``[tag] m:ss what``, flushed at once."""

    tag: str
    stream: TextIO | None = None
    """Where the lines go (default: stderr, so a command's own output on stdout stays clean)."""
    now: Callable[[], float] = time.monotonic
    started: float = field(default=0.0)

    def __post_init__(self) -> None:
        self.started = self.now()

    @property
    def elapsed(self) -> float:
        return self.now() - self.started

    def say(self, what: str) -> None:
        print(f"[{self.tag}] {clock(self.elapsed)} {what}", file=self.stream or sys.stderr, flush=True)


class Reader(Protocol):
    """What follows a program's output: each line as it comes, and a call after each quiet stretch."""

    def line(self, text: str) -> None: ...

    def quiet(self) -> None: ...


@dataclass(frozen=True)
class Followed:
    returncode: int | None
    """None: stopped at its time limit."""
    output: str


def follow(argv: Sequence[str], reader: Reader, *, every: float | None = None, timeout: float | None = None,
           cwd: Path | None = None, env: Mapping[str, str] | None = None) -> Followed:
    """Run ``argv`` (stdout and stderr as one stream, stdin closed) and give ``reader`` each line of its output as it
    comes, and a ``quiet()`` call after every ``every`` seconds (default QUIET_S) without one; a program past
    ``timeout`` seconds is killed. A missing program is tools.require's one line (InputError)."""
    every = QUIET_S if every is None else every
    proc = tools.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                       text=True, errors="replace", cwd=cwd, env=None if env is None else dict(env))
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for text in proc.stdout:
            lines.put(text)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    deadline = None if timeout is None else time.monotonic() + timeout
    kept: list[str] = []
    while True:
        wait = every if deadline is None else max(0.0, min(every, deadline - time.monotonic()))
        try:
            text = lines.get(timeout=wait)
        except queue.Empty:
            if deadline is not None and time.monotonic() >= deadline:
                proc.kill()
                proc.wait()
                return Followed(None, "".join(kept))
            reader.quiet()
            continue
        if text is None:
            return Followed(proc.wait(), "".join(kept))
        kept.append(text)
        reader.line(text.rstrip("\n"))
