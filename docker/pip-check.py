"""Judge `pip check` after a layer's lock is installed (docker/install-lock.sh runs this in the image).

pip check reports two things: broken requirements, and installed wheels whose own WHEEL file declares
tags this interpreter does not support. NVIDIA declares some aarch64 wheels "manylinux2014_sbsa" there
(nvidia-cusparselt-cu13's; SBSA is Arm's server architecture) while the file is named, chosen and
hash-checked as manylinux2014_aarch64. On aarch64 that line is the vendor's naming, not a broken install.
A stack's declared override (env/stacks.json) breaks one requirement on purpose: the lock's header names it
("# Override: PIN over PACKAGE's own requirement", src/mcore_images/resolve/declared_overrides.py), and that
requirement of that package, met by that release, is accepted. A distribution the stack leaves out of its locks
("# Left out: NAME, …") is not installed on purpose: "X requires NAME, which is not installed." is accepted for it.
Every other line fails the layer.

    python pip-check.py [LOCK ...] [--override PACKAGE:PIN ...] [--left-out NAME ...]
        run `pip check` in this interpreter; exit 0 when the layer is sound, 1 otherwise. The overrides and the
        left-out distributions are read from each LOCK's header, or given as PACKAGE:PIN
        (megatron-bridge:flashinfer-python==0.6.12) and NAME (fast-hadamard-transform).
"""

from __future__ import annotations

import platform
import re
import subprocess
import sys
from collections.abc import Callable
from importlib import metadata

UNSUPPORTED = re.compile(r"^(?P<name>\S+) (?P<version>\S+) is not supported on this platform$")
BROKEN = re.compile(r"^(?P<requirer>\S+) (?P<at>\S+) has requirement (?P<requirement>.+), but you have "
                    r"(?P<name>\S+) (?P<version>\S+)\.$")
MISSING = re.compile(r"^(?P<requirer>\S+) (?P<at>\S+) requires (?P<name>\S+), which is not installed\.$")
OVERRIDE_LINE = re.compile(r"^# Override: (?P<pin>\S+) over (?P<over>\S+)'s own requirement")
LEFT_OUT_LINE = re.compile(r"^# Left out: (?P<name>[^\s,]+),")
# Platform tags that name aarch64 under another word: NVIDIA's wheels say sbsa for Arm servers.
ALIASES = {"aarch64": ("_sbsa",)}


def wheel_tags(name: str) -> list[str]:
    """The Tag lines of an installed distribution's WHEEL file (empty when it has none)."""
    try:
        text = metadata.distribution(name).read_text("WHEEL") or ""
    except metadata.PackageNotFoundError:
        return []
    return [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Tag:")]


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


Override = tuple[str, str, str]
"""(package whose requirement is overridden, overriding distribution, its release), names canonical."""


def override(over: str, pin: str) -> Override:
    name, _, version = pin.partition("==")
    return canonical(over), canonical(name.split("[", 1)[0]), version


def _header(lock_text: str) -> list[str]:
    """A lock's header: its leading comment lines."""
    lines = lock_text.splitlines()
    return lines[:next((i for i, line in enumerate(lines) if not line.startswith("#")), len(lines))]


def declared(lock_text: str) -> list[Override]:
    """The overrides a lock's header names."""
    return [override(found["over"], found["pin"]) for line in _header(lock_text)
            if (found := OVERRIDE_LINE.match(line))]


def left_out(lock_text: str) -> list[str]:
    """The distributions a lock's header names as left out (canonical)."""
    return [canonical(found["name"]) for line in _header(lock_text) if (found := LEFT_OUT_LINE.match(line))]


def judge(report: str, machine: str, tags_of: Callable[[str], list[str]] | None = None,
          overrides: list[Override] | tuple[Override, ...] = (),
          absent: list[str] | tuple[str, ...] = ()) -> tuple[list[str], list[str]]:
    """Split pip check's report into (failures, accepted notes) for this machine, these declared overrides and
    these left-out distributions (``absent``, canonical)."""
    failures: list[str] = []
    accepted: list[str] = []
    tags_of = tags_of or wheel_tags
    suffixes = ALIASES.get(machine, ())
    for line in report.splitlines():
        line = line.strip()
        if not line or line == "No broken requirements found.":
            continue
        found = UNSUPPORTED.match(line)
        tags = tags_of(found["name"]) if found else []
        broken = BROKEN.match(line)
        missing = MISSING.match(line)
        if found and suffixes and tags and all(t.endswith(suffixes) for t in tags):
            accepted.append(f"{found['name']} {found['version']}: its WHEEL declares {', '.join(tags)}, "
                            f"another name for {machine}; installed from its {machine} wheel")
        elif broken and (canonical(broken["requirer"]), canonical(broken["name"]), broken["version"]) in overrides:
            accepted.append(f"{broken['requirer']} {broken['at']}'s requirement {broken['requirement']}: overridden "
                            f"by the stack's declared override {broken['name']}=={broken['version']}")
        elif missing and canonical(missing["name"]) in absent:
            accepted.append(f"{missing['requirer']} {missing['at']} requires {missing['name']}, which the stack's "
                            "locks leave out (env/stacks.json says why)")
        else:
            failures.append(line)
    return failures, accepted


def arguments(argv: list[str]) -> tuple[list[Override], list[str]]:
    """The declared overrides and left-out distributions named on the command line: LOCK paths, --override
    PACKAGE:PIN and --left-out NAME."""
    overrides: list[Override] = []
    absent: list[str] = []
    args = iter(argv)
    for arg in args:
        if arg == "--override":
            over, _, pin = next(args, "").partition(":")
            if "==" not in pin:
                raise SystemExit(f"pip-check: --override takes PACKAGE:NAME==VERSION, got {over}:{pin}")
            overrides.append(override(over, pin))
        elif arg == "--left-out":
            name = next(args, "")
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
                raise SystemExit(f"pip-check: --left-out takes a distribution name, got {name!r}")
            absent.append(canonical(name))
        else:
            with open(arg, encoding="utf-8") as lock:
                text = lock.read()
            overrides += declared(text)
            absent += left_out(text)
    return overrides, absent


def main(argv: list[str] | None = None) -> int:
    overrides, absent = arguments(sys.argv[1:] if argv is None else argv)
    done = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True, check=False)
    report = done.stdout + done.stderr
    failures, accepted = judge(report, platform.machine(), overrides=overrides, absent=absent)
    for note in accepted:
        print(f"pip-check: accepted: {note}")
    if failures:
        print("\n".join(failures))
        return 1
    if done.returncode != 0 and not accepted:
        print(report)
        return 1
    print("pip-check: no broken requirements")
    return 0


if __name__ == "__main__":
    sys.exit(main())
