"""Running another machine's programs here: the kernel's binfmt_misc hands them to QEMU (Debian's qemu-user-static,
registered by binfmt-support; `make emulation` installs both). What builds or runs an image of another platform asks
``problem`` first, so a missing registration is one line naming the fix before docker starts, never an "exec format
error" minutes into a build.

Docker needs the registration's F flag ("fix binary"): the kernel opens the interpreter when the entry is registered,
so a container whose root has no qemu-aarch64-static still runs aarch64 programs.
"""

from __future__ import annotations

import platform as _platform
from pathlib import Path

from mcore_images import platforms
from mcore_images.platforms import Platform

BINFMT = Path("/proc/sys/fs/binfmt_misc")
SLOWDOWN = 40.0
"""How many times longer another platform's programs take here under QEMU than natively: the factor the time limits
of tests that run them are stretched by. Measured on this project's 2-core x86_64 CI machine (qemu-user-static 7.2):
`python -c "import torch, megatron.core"` in the debian runtime took 4.9 s as linux/amd64 and 170-193 s as
linux/arm64 (35-39x); a pure-Python loop took 0.13 s and 26.7 s."""
FIX = "run `make emulation` (installs qemu-user-static and binfmt-support and registers QEMU with the F flag)"


def machine() -> str:
    """This machine, as ``uname -m`` names it (the Docker Engine runs here: CI's and a workstation's do)."""
    return _platform.machine()


def native(target: Platform, machine_name: str | None = None) -> bool:
    """Whether this machine runs ``target``'s programs itself."""
    return platforms.of_machine(machine_name or machine()) == target


def slowdown(target: Platform | None, machine_name: str | None = None) -> float:
    """The factor by which a time limit on ``target``'s programs is stretched on this machine: 1 for a native (or
    unknown) platform, SLOWDOWN for one that runs under QEMU. A limit is a native-speed promise; under emulation the
    stretched limit still tells an ended run from one that waits for its outer timeout."""
    return 1.0 if target is None or native(target, machine_name) else SLOWDOWN


def problem(target: Platform, machine_name: str | None = None, binfmt: Path | None = None) -> str | None:
    """Why this machine cannot run ``target``'s programs (one line with the fix), None when it can: natively, or
    through an enabled binfmt_misc entry for QEMU that has the F flag."""
    here = machine_name or machine()
    if native(target, here):
        return None
    entry = (binfmt or BINFMT) / f"qemu-{target.machine}"
    what = f"{target.name} programs on this {here} machine need QEMU registered with binfmt_misc"
    try:
        lines = entry.read_text().splitlines()
    except OSError:
        return f"{what} (no {entry}); {FIX}"
    if not lines or lines[0].strip() != "enabled":
        return f"{what} ({entry} is disabled); {FIX}"
    flags = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("flags:")), "")
    if "F" not in flags:
        return (f"{what} with the F flag ({entry} has flags '{flags}': a container cannot reach the interpreter); "
                f"{FIX}")
    return None
