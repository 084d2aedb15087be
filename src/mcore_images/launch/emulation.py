"""Running another machine's programs here: the kernel's binfmt_misc hands them to QEMU (Debian's qemu-user,
MIN_QEMU or newer; `make emulation` fetches and registers it). What builds or runs an image of another platform asks
``problem`` first, so a missing or too old registration is one line naming the fix before docker starts, never an
"exec format error" minutes into a build or a test limit missed hours into one.

Docker needs the registration's F flag ("fix binary"): the kernel opens the interpreter when the entry is registered,
so a container whose root has no qemu-aarch64 still runs aarch64 programs.
"""

from __future__ import annotations

import os
import platform as _platform
import re
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from packaging.version import Version

from mcore_images.catalogue import platforms
from mcore_images.catalogue.platforms import Platform

BINFMT = Path("/proc/sys/fs/binfmt_misc")
SLOWDOWN = 12.0
"""How many times longer another platform's programs take here under QEMU (MIN_QEMU) than natively: the factor the
time limits of tests that run them are stretched by. Measured on this project's 2-core x86_64 CI machine under QEMU
10.0.2: `python -c "import torch, megatron.core"` in the debian runtime took 4.8-8.0 s as linux/amd64 and 47-52 s as
linux/arm64 (about 10x; 46 s under 11.1.3, 170-193 s under 7.2); a pure-Python loop took 0.25 s and 6.6 s."""
QEMU_FAULTS = (
    ("10.0", "runs Debian's arm64 programs about 9x slower: it emulates their pointer authentication with the "
             "QARMA5 cipher"),
    ("11.1", "can deadlock a child forked from a many-threaded program, such as megatron-core's checkpoint writer"),
)
"""Each QEMU release emulated builds and tests need, and what the ones before it do wrong here. Measured on this
project's x86_64 CI machine: a pure-Python loop in an arm64 trixie root took 58.7 s under 7.2 (bookworm's own),
6.7 s under 10.0 and 0.48 s natively; the smoke's full-folder checkpoint test hung in 3 of 7 runs under 10.0.2 (the
writer forked from a 120-thread rank waited in pthread_mutex_lock inside QEMU before running a guest instruction)
and in 0 of 8 under 11.1.3."""
MIN_QEMU = QEMU_FAULTS[-1][0]
"""The oldest QEMU emulated builds and tests run under; .ci/emulation.sh fetches Debian's qemu-user of it (from
trixie-backports) and holds the same value."""
FIX = f"run `make emulation` (fetches Debian's qemu-user {MIN_QEMU} or newer and registers it with the F flag)"


def fault(version: str) -> str | None:
    """What goes wrong here under QEMU ``version``, None when it is MIN_QEMU or newer."""
    return next((why for floor, why in QEMU_FAULTS if Version(version) < Version(floor)), None)


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


def problem(target: Platform, machine_name: str | None = None, binfmt: Path | None = None,
            probe: Callable[[list[str]], str | None] | None = None) -> str | None:
    """Why this machine cannot run ``target``'s programs (one line with the fix), None when it can: natively, or
    through an enabled binfmt_misc entry with the F flag for a QEMU at MIN_QEMU or newer (``probe`` reads its version;
    registered_version by default)."""
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
    version = (probe or registered_version)(lines)
    if version is None:
        return f"{what}, and the interpreter {entry} holds did not say its QEMU version; {FIX}"
    if why := fault(version):
        return f"{what} at QEMU {MIN_QEMU} or newer ({entry} holds QEMU {version}, which {why}); {FIX}"
    return None


def registered_version(entry_lines: list[str]) -> str | None:
    """The version of the QEMU the kernel holds for a binfmt_misc entry (with the F flag it keeps the interpreter it
    opened at registration, so an upgraded package alone changes nothing): a file of the entry's magic bytes is handed
    to that interpreter, and QEMU_VERSION makes QEMU print its version and exit before it reads the file."""
    fields = dict(line.split(" ", 1) for line in entry_lines if line.startswith(("magic ", "offset ")))
    magic, offset = fields.get("magic", ""), fields.get("offset", "0")
    if not re.fullmatch(r"(?:[0-9a-f]{2})+", magic) or not offset.isdigit():
        return None
    with tempfile.TemporaryDirectory() as scratch:
        probe = Path(scratch, "probe")
        probe.write_bytes(bytes(int(offset)) + bytes.fromhex(magic))
        probe.chmod(0o700)
        try:
            out = subprocess.run([str(probe)], env={**os.environ, "QEMU_VERSION": "1"}, capture_output=True,
                                 text=True, timeout=30, check=False).stdout
        except (OSError, subprocess.TimeoutExpired):
            return None
    found = re.search(r"^qemu-\w+ version (\d+(?:\.\d+)*)", out, re.MULTILINE)
    return found.group(1) if found else None
