"""Checks, findings and the runner that keeps one broken check from hiding the others.

A check is a small function registered with an id, the severity it reports when it trips, and a
default fix. It returns an Outcome built with ok()/trip()/warn()/skip(); the runner turns that into
a Finding. Anything a check raises becomes a 'crash' finding, and the next check still runs. A check
that imports a package, loads a native library or asks the driver is registered `isolated`: it runs
in the worker interpreter (isolate.py), where a segfault or a hang is one finding too.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import textwrap
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any


class Status(str, Enum):  # noqa: UP042 - StrEnum would change str() of a member
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"
    CRASH = "crash"

    def __str__(self) -> str:
        return self.value


FAILING = (Status.FAIL, Status.CRASH)


@dataclass(frozen=True)
class Outcome:
    """What a check function returns; `status` None means 'tripped', i.e. the check's own severity."""

    status: Status | None
    message: str
    fix: str | None = None
    details: dict[str, Any] = field(default_factory=dict)


def ok(message: str, **details: Any) -> Outcome:
    return Outcome(Status.OK, message, None, details)


def trip(message: str, fix: str | None = None, **details: Any) -> Outcome:
    """The problem this check exists for: reported at the check's registered severity."""
    return Outcome(None, message, fix, details)


def warn(message: str, fix: str | None = None, **details: Any) -> Outcome:
    """A lesser problem than the check's severity (e.g. an optional package is absent)."""
    return Outcome(Status.WARN, message, fix, details)


def skip(message: str, **details: Any) -> Outcome:
    """The check does not apply here (its subject is absent, no GPU, ...)."""
    return Outcome(Status.SKIP, message, None, details)


@dataclass
class Context:
    """Everything a check reads from the outside world, so tests can point it at fakes."""

    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)
    proc: Path = Path("/proc")
    cgroup: Path = Path("/sys/fs/cgroup")
    etc: Path = Path("/etc")
    sys_dir: Path = Path("/sys")
    dev: Path = Path("/dev")
    load_library: Callable[[str], str | None] = field(default=lambda name: _load_error(name))
    """Try to load a shared library by name: None when it loads, else the loader's error."""
    hf_config: Path | None = None
    run_program: Callable[[Sequence[str], Mapping[str, str], float], tuple[int | None, str]] = field(
        default=lambda argv, env, timeout: _run_program(argv, env, timeout))
    """Run a Python program of this interpreter (``python -m …``): (exit code, stdout); exit None when it ran past
    ``timeout`` seconds."""
    memo: dict[str, Any] = field(default_factory=dict)
    watch: Callable[[str, bool], None] | None = None
    """Told (key, True) before a fact is computed and (key, False) after: the worker reports it, so a
    crash or hang can be blamed on the import that was running."""

    def cached(self, key: str, compute: Callable[[], Any]) -> Any:
        """Compute a fact once per run (imports, GPU queries); a raised error is cached and re-raised."""
        if key not in self.memo:
            if self.watch:
                self.watch(key, True)
            try:
                self.memo[key] = (True, compute())
            except Exception as error:  # cached so every dependent check sees the same failure
                self.memo[key] = (False, error)
            if self.watch:
                self.watch(key, False)
        good, value = self.memo[key]
        if not good:
            raise value
        return value


def _run_program(argv: Sequence[str], env: Mapping[str, str], timeout: float) -> tuple[int | None, str]:
    import subprocess

    try:
        done = subprocess.run([sys.executable, *argv], env=dict(env), capture_output=True, text=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return None, ""
    return done.returncode, done.stdout


def _load_error(name: str) -> str | None:
    import ctypes

    try:
        ctypes.CDLL(name)
    except OSError as error:
        return str(error)
    return None


CheckFunc = Callable[[Context], Outcome]


@dataclass(frozen=True)
class Check:
    id: str
    severity: Status
    fix: str
    func: CheckFunc
    isolated: bool = False
    """Runs in the worker interpreter, not in the doctor's own (see `check`)."""

    @property
    def summary(self) -> str:
        return (self.func.__doc__ or "").strip().splitlines()[0] if self.func.__doc__ else self.id


REGISTRY: dict[str, Check] = {}


def check(
    check_id: str, severity: Status, fix: str, *, isolated: bool = False
) -> Callable[[CheckFunc], CheckFunc]:
    """Register a check function under `check_id`; `fix` is its default fix text.

    `isolated=True` for a check that imports a package, loads a native library or asks the driver
    (anything that can segfault or hang): it then runs in the worker interpreter. Checks that only
    read files, the environment and metadata run in the doctor's own interpreter.
    """
    if severity not in (Status.FAIL, Status.WARN):
        raise ValueError(f"severity of {check_id} must be fail or warn")

    def register(func: CheckFunc) -> CheckFunc:
        known = REGISTRY.get(check_id)
        if known and known.func.__module__ != func.__module__:  # a reload of the same module may replace
            raise ValueError(f"check id {check_id} registered twice")
        REGISTRY[check_id] = Check(check_id, severity, fix, func, isolated)
        return func

    return register


@dataclass(frozen=True)
class Finding:
    id: str
    status: Status
    finding: str
    fix: str
    details: dict[str, Any]
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = str(self.status)
        data["details"] = _plain(self.details)
        return data


def _plain(value: Any) -> Any:
    """Make details JSON-safe: paths and sets become strings and lists."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=str) if isinstance(value, (set, frozenset)) else value
        return [_plain(v) for v in items]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def run_one(item: Check, ctx: Context) -> Finding:
    """Run one check; whatever it raises is reported as a crash of that check alone."""
    start = time.monotonic()
    try:
        outcome = item.func(ctx)
        if not isinstance(outcome, Outcome):
            raise TypeError(f"check returned {type(outcome).__name__}, not Outcome")
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # SystemExit from a package's import must not end the doctor
        last = traceback.format_exception_only(type(error), error)[-1].strip()
        return Finding(
            item.id,
            Status.CRASH,
            f"the check itself crashed: {last}",
            "the other findings stand; run `python -X faulthandler -m mcore_images.doctor "
            f"--only {item.id}` and report the traceback",
            {},
            time.monotonic() - start,
        )
    status = outcome.status or item.severity
    fix = "" if status in (Status.OK, Status.SKIP) else (outcome.fix or item.fix)
    return Finding(item.id, status, outcome.message, fix, outcome.details, round(time.monotonic() - start, 3))


def run_checks(ctx: Context, checks: Iterable[Check]) -> list[Finding]:
    return [run_one(item, ctx) for item in checks]


def exit_code(findings: Sequence[Finding]) -> int:
    """0 when nothing failed; 1 when a check failed or crashed (a crash means 'not verified')."""
    return 1 if any(f.status in FAILING for f in findings) else 0


def to_json(findings: Sequence[Finding], meta: Mapping[str, Any]) -> str:
    counts = {str(s): sum(f.status == s for f in findings) for s in Status}
    return json.dumps(
        {
            **_plain(meta),
            "counts": counts,
            "exit_code": exit_code(findings),
            "findings": [f.to_dict() for f in findings],
        },
        indent=2,
    )


def to_table(findings: Sequence[Finding], width: int | None = None) -> str:
    """A plain-text table: status, check id, finding, fix; long cells wrap inside their column."""
    width = width or max(80, min(shutil.get_terminal_size((120, 24)).columns, 200))
    id_w = max(len("check"), *(len(f.id) for f in findings)) if findings else 5
    text_w = max(20, (width - id_w - 10) // 2)
    lines = [
        f"{'':5} {'check':{id_w}}  {'finding':{text_w}}  fix",
        "-" * min(width, 5 + id_w + 2 * text_w + 6),
    ]
    for f in findings:
        left = textwrap.wrap(f.finding, text_w) or [""]
        right = textwrap.wrap(f.fix, text_w) or [""]
        for i in range(max(len(left), len(right))):
            head = f"{f.status.value.upper():5} {f.id:{id_w}}" if i == 0 else " " * (6 + id_w)
            cell = left[i] if i < len(left) else ""
            lines.append(f"{head}  {cell:{text_w}}  {right[i] if i < len(right) else ''}".rstrip())
    counts = ", ".join(f"{sum(f.status == s for f in findings)} {s}" for s in Status)
    lines.append(f"\n{counts}")
    return "\n".join(lines)


def stdout_to_stderr() -> Callable[[], None]:
    """Point fd 1 at stderr while checks run (imports print), so --json output stays clean."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)

    def restore() -> None:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)

    return restore
