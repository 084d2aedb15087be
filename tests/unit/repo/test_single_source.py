"""One source of truth: no pinned version string is written anywhere but env/stacks.json.

Scanned: every file that builds or ships an image (Dockerfile, bake, Makefile, docker/, .ci/,
.github/, src/mcore_images/smoke/, the tooling). Exempt: env/ itself (the locks are derived and checked against the
pins by test_locks.py), docs and tests, and the modules that hold compatibility facts about
upstream releases (catalogue/upstream.py, the GPU measurements in flash_attention.py, fused_attention.py and
proven.py, the doctor) and the GPU measurement scripts
(.ci/gpu/: the releases they compare are their subject), which name versions on purpose.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from mcore_images.catalogue import components
from mcore_images.catalogue.stacks import Stack

EXEMPT = (re.compile(r"^env/"), re.compile(r"^docker-bake\.json$"), re.compile(r"\.md$"),
          re.compile(r"^tests/"), re.compile(r"^docs/"), re.compile(r"^src/mcore_images/catalogue/upstream\.py$"),
          re.compile(r"^src/mcore_images/catalogue/(flash_attention|fused_attention|proven)\.py$"),
          re.compile(r"^\.ci/gpu/"),
          re.compile(r"^src/mcore_images/doctor/"))
# Pins short enough to collide with unrelated numbers are matched as whole tokens.
TOKEN = r"(?<![\w.]){}(?![\w.])"


def tracked_files(root: Path) -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True).stdout
    return [f for f in out.splitlines() if not any(p.search(f) for p in EXEMPT)]


def pinned_strings(stacks: dict[str, Stack]) -> set[str]:
    """Every pin long enough to be recognised in text: full versions and commits of every catalogue
    component (MAJOR.MINOR pins such as Python's collide with ordinary numbers), and base digests."""
    keys = [c.key for c in components.CATALOGUE if c.pin != "major_minor"]
    values = set()
    for s in stacks.values():
        for key in (*keys, "base_digest"):
            value = getattr(s, key)
            if (value not in ("none", "base", "") and value.count(".") >= 2) or len(value) >= 40:
                values.add(value.removeprefix("sha256:"))
        values.add(s.base_image)
    return values


def test_no_pin_is_written_twice(root: Path, stacks: dict[str, Stack]) -> None:
    pins = pinned_strings(stacks)
    offenders = []
    for name in tracked_files(root):
        path = root / name
        if not path.is_file() or path.stat().st_size > 2_000_000:
            continue
        text = path.read_text(errors="ignore")
        for pin in pins:
            if re.search(TOKEN.format(re.escape(pin)), text):
                offenders.append(f"{name}: {pin}")
    assert not offenders, "pins copied out of env/stacks.json: " + ", ".join(offenders)


def test_the_check_catches_a_copy(stacks: dict[str, Stack]) -> None:
    pins = pinned_strings(stacks)
    torch = stacks["debian"].torch
    text = f"ARG TORCH_VERSION={torch}\n"
    assert any(re.search(TOKEN.format(re.escape(p)), text) for p in pins)
    assert not any(re.search(TOKEN.format(re.escape(p)), f"version {torch}.1") for p in pins - {torch + ".1"})
