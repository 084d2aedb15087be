"""The QEMU floor lives in two places that cannot import each other: .ci/emulation.sh installs and registers QEMU
on a machine that may not have the tooling yet, and mcore_images.launch.emulation refuses an older registration before
a build or test. They must say the same version."""

from __future__ import annotations

import re
from pathlib import Path

from mcore_images.launch import emulation

SCRIPT = Path(__file__).resolve().parents[3] / ".ci" / "emulation.sh"


def test_the_script_installs_the_qemu_the_tooling_requires() -> None:
    found = re.search(r"^MIN_QEMU=(\S+)", SCRIPT.read_text(), re.MULTILINE)
    assert found is not None and found.group(1) == emulation.MIN_QEMU
