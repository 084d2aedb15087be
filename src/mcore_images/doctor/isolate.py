"""`--isolate`: every check in its own interpreter, so even a segfault inside an import is one finding.

In-process checks already survive any Python exception; only a hard crash (SIGSEGV in a CUDA
library, an abort in a C++ static initialiser) can end the process. Isolation costs one interpreter
(and one torch import) per check, so it is opt-in.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

from mcore_images.doctor.model import Check, Finding, Status

PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the folder that holds mcore_images/
TIMEOUT_S = 300


def child_command(item: Check, hf_config: Path | None) -> list[str]:
    command = [sys.executable, "-m", "mcore_images.doctor", "--json", "--only", item.id]
    return command + (["--hf-config", str(hf_config)] if hf_config else [])


def died(item: Check, why: str, seconds: float) -> Finding:
    return Finding(
        item.id,
        Status.CRASH,
        f"the check's process {why}",
        f"run `python -m mcore_images.doctor --only {item.id}` to see the crash; the other findings stand",
        {},
        round(seconds, 3),
    )


def run_one_isolated(item: Check, hf_config: Path | None) -> Finding:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(PACKAGE_ROOT), os.environ.get("PYTHONPATH")])),
    }
    start = time.monotonic()
    try:
        proc = subprocess.run(
            child_command(item, hf_config), capture_output=True, text=True, env=env, timeout=TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        return died(item, f"did not finish in {TIMEOUT_S} s", time.monotonic() - start)
    if proc.returncode < 0:
        name = signal.Signals(-proc.returncode).name
        return died(item, f"was killed by {name}", time.monotonic() - start)
    try:
        data = json.loads(proc.stdout)["findings"][0]
    except (ValueError, KeyError, IndexError):
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return died(item, f"exited {proc.returncode} without a finding: {tail}", time.monotonic() - start)
    return Finding(
        data["id"],
        Status(data["status"]),
        data["finding"],
        data["fix"],
        data["details"],
        round(time.monotonic() - start, 3),
    )


def run_isolated(checks: Iterable[Check], hf_config: Path | None) -> list[Finding]:
    return [run_one_isolated(item, hf_config) for item in checks]
