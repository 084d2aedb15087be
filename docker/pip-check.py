"""Judge `pip check` after a layer's lock is installed (docker/install-lock.sh runs this in the image).

pip check reports two things: broken requirements, and installed wheels whose own WHEEL file declares
tags this interpreter does not support. NVIDIA declares some aarch64 wheels "manylinux2014_sbsa" there
(nvidia-cusparselt-cu13's; SBSA is Arm's server architecture) while the file is named, chosen and
hash-checked as manylinux2014_aarch64. On aarch64 that line is the vendor's naming, not a broken install;
every other line fails the layer.

    python pip-check.py     run `pip check` in this interpreter; exit 0 when the layer is sound, 1 otherwise
"""

from __future__ import annotations

import platform
import re
import subprocess
import sys
from collections.abc import Callable
from importlib import metadata

UNSUPPORTED = re.compile(r"^(?P<name>\S+) (?P<version>\S+) is not supported on this platform$")
# Platform tags that name aarch64 under another word: NVIDIA's wheels say sbsa for Arm servers.
ALIASES = {"aarch64": ("_sbsa",)}


def wheel_tags(name: str) -> list[str]:
    """The Tag lines of an installed distribution's WHEEL file (empty when it has none)."""
    try:
        text = metadata.distribution(name).read_text("WHEEL") or ""
    except metadata.PackageNotFoundError:
        return []
    return [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Tag:")]


def judge(report: str, machine: str, tags_of: Callable[[str], list[str]] | None = None) -> tuple[list[str], list[str]]:
    """Split pip check's report into (failures, accepted notes) for this machine."""
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
        if found and suffixes and tags and all(t.endswith(suffixes) for t in tags):
            accepted.append(f"{found['name']} {found['version']}: its WHEEL declares {', '.join(tags)}, "
                            f"another name for {machine}; installed from its {machine} wheel")
        else:
            failures.append(line)
    return failures, accepted


def main() -> int:
    done = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True, check=False)
    report = done.stdout + done.stderr
    failures, accepted = judge(report, platform.machine())
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
