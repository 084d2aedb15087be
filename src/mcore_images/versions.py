"""Small, dependency-free version comparison (PEP 440 release segments are all we compare)."""

from __future__ import annotations

import re

_RELEASE = re.compile(r"^\s*v?(\d+(?:\.\d+)*)")


def release(version: str) -> tuple[int, ...]:
    """Numeric release tuple of a version string: '2.9.1+cu128' -> (2, 9, 1), '26.06' -> (26, 6)."""
    match = _RELEASE.match(version)
    if not match:
        raise ValueError(f"not a version: {version!r}")
    return tuple(int(part) for part in match.group(1).split("."))


def at_least(version: str, minimum: str) -> bool:
    """True when `version` >= `minimum`, comparing release segments padded with zeros."""
    a, b = release(version), release(minimum)
    width = max(len(a), len(b))
    return a + (0,) * (width - len(a)) >= b + (0,) * (width - len(b))


def major_minor(version: str) -> str:
    """'13.0.2' -> '13.0'."""
    parts = release(version)
    return ".".join(str(p) for p in (*parts, 0)[:2])
