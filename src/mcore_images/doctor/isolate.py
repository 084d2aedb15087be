"""Checks in worker interpreters (worker.py): a segfault or a hang inside an import is one finding.

The doctor's own interpreter never imports what it inspects. It starts a worker for the checks
registered `isolated` and reads the worker's events. When the worker dies (a signal, an exit) or a
check runs past the timeout (then the worker and whatever it started are killed), the check it was
in gets a 'crash' finding that says how and in which import; a new worker takes the checks left,
told to refuse that import, so the checks after it report "torch does not import" at once instead
of dying or waiting the same way. One worker serves all the checks while nothing goes wrong, so the
packages are imported once, as in one interpreter.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import site
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcore_images import PACKAGE
from mcore_images.doctor import probes
from mcore_images.doctor.model import Check, Finding, Status

PACKAGE_ROOT = PACKAGE.parent  # the folder that holds mcore_images/
DEFAULT_TIMEOUT_S = 120.0
"""Per check. Long enough for a first `import torch` + TE from a cold network file system; a hang
then costs two minutes once, because the import that hung is not retried."""
TAIL_BYTES = 4096
GRACE_S = 1.0
"""After a timeout the worker gets SIGUSR1 first (its faulthandler prints where it hung), then SIGKILL."""


@dataclass
class Death:
    """How a worker ended before it reported every check it was given."""

    check_id: str | None  # the check it was in; None: before the first one started
    how: str  # "was killed by SIGSEGV", "did not finish in 2 s", "exited 1"
    probe: str | None  # the innermost import or driver query running then (a probes cache key)
    seconds: float
    tail: str  # the last line the worker wrote on stderr
    timed_out: bool


def worker_env() -> dict[str, str]:
    """The caller's environment; this package is appended to PYTHONPATH where a fresh interpreter would
    not find it. (The worker then takes the doctor's sys.path, so everything else is imported from where
    the doctor's own interpreter would import it.)"""
    inherited = os.environ.get("PYTHONPATH", "")
    known = {Path(p).resolve() for p in [*getattr(site, "getsitepackages", list)(), site.getusersitepackages()]}
    known |= {Path(p).resolve() for p in inherited.split(os.pathsep) if p}
    if PACKAGE_ROOT in known:
        return dict(os.environ)
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [inherited, str(PACKAGE_ROOT)]))}


def worker_command(checks: Sequence[Check], hf_config: Path | None, failed: dict[str, str]) -> list[str]:
    modules = sorted({c.func.__module__ for c in checks} - {"__main__"})
    request = {
        "checks": [c.id for c in checks],
        "modules": [m for m in modules if not m.startswith("mcore_images.doctor.")],
        "hf_config": str(hf_config) if hf_config else None,
        "failed": failed,
        "sys_path": list(sys.path),
    }
    return [sys.executable, "-m", "mcore_images.doctor.worker", json.dumps(request)]


@dataclass
class Worker:
    """One worker process and what it has reported so far."""

    checks: Sequence[Check]
    hf_config: Path | None
    timeout: float
    failed: dict[str, str]
    findings: dict[str, Finding] = field(default_factory=dict)
    current: str | None = None
    probes: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    tail: bytes = b""
    lines: bytes = b""
    stopped: tuple[str | None, list[str]] | None = None  # (check, probes) when the timeout struck
    stopped_at: float = 0.0

    def run(self) -> Death | None:
        """Run the worker to its end; None when it reported every check."""
        proc = subprocess.Popen(
            worker_command(self.checks, self.hf_config, self.failed),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=worker_env(),
            start_new_session=True,  # its own process group: a timeout kills what it started, too
        )
        try:
            self._read(proc)
            if self.stopped is None:  # the pipes closed: give its exit status a moment to arrive
                done = len(self.findings) == len(self.checks)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(GRACE_S if done else max(GRACE_S, self.started + self.timeout - time.monotonic()))
        finally:
            # Always the whole group: a hang, a worker that does not exit after its last finding, Ctrl-C here, or
            # a worker gone but something it started still running (the kernel keeps the group's id from reuse
            # while a member lives, so the group is still this worker's).
            _kill(proc)
            proc.wait()
            for stream in (proc.stdout, proc.stderr):
                if stream:
                    stream.close()
        if len(self.findings) == len(self.checks):
            return None
        current, running = self.stopped or (self.current, self.probes)
        if self.stopped:
            how = f"did not finish in {self.timeout:g} s"
        elif proc.returncode < 0:
            how = f"was killed by {_signal_name(-proc.returncode)}"
        else:
            how = f"exited {proc.returncode}"
        lines = self.tail.decode(errors="replace").strip().splitlines()
        return Death(
            current,
            how,
            running[-1] if running else None,
            round(time.monotonic() - self.started, 3),
            lines[-1].strip() if lines and proc.returncode > 0 else "",
            self.stopped is not None,
        )

    def _read(self, proc: subprocess.Popen[bytes]) -> None:
        """Follow the worker's events and forward its stderr until it ends or a check runs past the
        timeout (then it is sent SIGUSR1 and its last words are read for GRACE_S)."""
        assert proc.stdout and proc.stderr
        with selectors.DefaultSelector() as streams:
            streams.register(proc.stdout, selectors.EVENT_READ, self._events)
            streams.register(proc.stderr, selectors.EVENT_READ, self._stderr)
            while streams.get_map():
                now = time.monotonic()
                left = (self.stopped_at + GRACE_S if self.stopped else self.started + self.timeout) - now
                if left <= 0 and self.stopped:
                    return
                if left <= 0:
                    self.stopped, self.stopped_at = (self.current, list(self.probes)), now
                    _signal(proc, signal.SIGUSR1)
                    continue
                ready = streams.select(min(left, 0.5))
                for key, _ in ready:
                    data = os.read(key.fd, 65536)
                    if data:
                        key.data(data)
                    else:
                        streams.unregister(key.fileobj)
                if not ready and proc.poll() is not None:  # exited, but something it started holds the pipes
                    return

    def _stderr(self, data: bytes) -> None:
        sys.stderr.write(data.decode(errors="replace"))
        sys.stderr.flush()
        self.tail = (self.tail + data)[-TAIL_BYTES:]

    def _events(self, data: bytes) -> None:
        self.lines += data
        while b"\n" in self.lines:
            line, self.lines = self.lines.split(b"\n", 1)
            try:
                event = json.loads(line)
            except ValueError:
                continue
            self._event(event)

    def _event(self, event: dict[str, Any]) -> None:
        if self.stopped:  # past the timeout: what it still says does not count
            return
        if "start" in event:
            self.current, self.probes, self.started = event["start"], [], time.monotonic()
        elif "begin" in event:
            self.probes.append(event["begin"])
        elif "end" in event and self.probes:
            self.probes.pop()
        elif "finding" in event:
            data = event["finding"]
            self.findings[data["id"]] = Finding(
                data["id"], Status(data["status"]), data["finding"], data["fix"], data["details"], data["seconds"]
            )
            self.current, self.probes, self.started = None, [], time.monotonic()


def _signal(proc: subprocess.Popen[bytes], number: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, number)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """The worker and everything it started (its own process group)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        _signal(proc, signal.SIGKILL)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _doing(probe: str | None) -> str:
    if probe is None:
        return ""
    if probe.startswith(probes.IMPORT):
        return f" inside `import {probe.removeprefix(probes.IMPORT)}`"
    if probe == probes.GPUS:
        return f" asking the driver for the GPUs ({probes.LIBCUDA})"
    return f" computing {probe}"


def crashed(check_id: str, death: Death, timeout: float) -> Finding:
    """The finding for the check a worker died in (or, when it died before any, the next one)."""
    doing = _doing(death.probe)
    if death.check_id is None:
        finding = f"the doctor's worker {death.how} before the check started"
    elif death.timed_out:
        finding = f"the check did not finish in {timeout:g} s{doing} and was stopped"
    else:
        finding = f"the check's interpreter {death.how}{doing}"
    if death.tail:
        finding += f": {death.tail}"
    module = death.probe.removeprefix(probes.IMPORT) if death.probe and death.probe.startswith(probes.IMPORT) else None
    if module:
        finding += f"; the checks after it see `import {module}` as failing"
    if death.timed_out:  # the worker printed its traceback on stderr when it was stopped
        where = "the traceback the doctor printed on stderr shows where it hangs"
        fix = f"if it is only slow here, rerun with a longer --timeout (now {timeout:g} s); else {where}"
    elif module:
        fix = f"see where `import {module}` crashes: python -X faulthandler -c 'import {module}'"
    else:
        fix = f"see where it crashes: python -X faulthandler -m mcore_images.doctor --in-process --only {check_id}"
    if module:
        top = module.split(".")[0]
        fix += f"; then reinstall {top}, or drop the library it loads from LD_LIBRARY_PATH / LD_PRELOAD"
    else:
        fix += "; the other findings stand"
    details = {"worker": death.how, "probe": death.probe, "timeout_s": timeout}
    return Finding(check_id, Status.CRASH, finding, fix, details, death.seconds)


def run_isolated(
    checks: Iterable[Check], hf_config: Path | None, timeout: float = DEFAULT_TIMEOUT_S, fresh: bool = False
) -> dict[str, Finding]:
    """Findings of `checks` from workers: one for all (restarted after a death), or one per check (`fresh`)."""
    findings: dict[str, Finding] = {}
    failed: dict[str, str] = {}  # probe key → how it failed; a later worker refuses it
    checks = list(checks)
    for batch in [[c] for c in checks] if fresh else [checks]:
        pending = batch
        while pending:
            worker = Worker(pending, hf_config, timeout, dict(failed))
            death = worker.run()
            findings.update(worker.findings)
            if death is not None:
                blamed = death.check_id or next(c.id for c in pending if c.id not in findings)
                findings[blamed] = crashed(blamed, death, timeout)
                if death.probe:
                    failed[death.probe] = f"{death.how} in check {blamed}"
            pending = [c for c in pending if c.id not in findings]
    return findings
