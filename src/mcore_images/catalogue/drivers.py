"""The oldest NVIDIA driver each stack's CUDA runs on.

Under CUDA's minor-version compatibility, an application built with any CUDA 12.x runs on a Linux driver
of at least 525.60.13, and one built with any 13.x on at least 580.65.06 (NVIDIA's CUDA Compatibility
guide: "Minimum Required Driver Version for CUDA Minor Version Compatibility"; features new in a later
minor release may need that release's own driver). The images also state ``NVIDIA_REQUIRE_CUDA``, which
the NVIDIA Container Toolkit checks when a container starts.
"""

from __future__ import annotations

MIN_DRIVER: dict[str, str] = {"12": "525.60.13", "13": "580.65.06"}


def min_driver(cuda: str) -> str | None:
    """The minimum Linux driver for a stack's CUDA (major.minor); None for a CUDA major not in the table."""
    return MIN_DRIVER.get(cuda.split(".")[0])
