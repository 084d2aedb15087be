"""Tooling for mcore-images: pinned stacks, build planning, certification and diagnostics.

This package runs on the host (Python >= 3.10) and never imports torch or megatron-core;
the doctor imports what it inspects lazily, one check at a time.
"""

__version__ = "0.1.0"
