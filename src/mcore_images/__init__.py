"""Tooling for mcore-images: pinned stacks, build planning, certification and diagnostics.

This package runs on the host (Python >= 3.10) and never imports torch or megatron-core;
the doctor imports what it inspects lazily, one check at a time. Its packages follow the pipeline:
catalogue (what an image is made of) ← resolve (rules, locks, plan) ← image_build and release, with launch
(containers and programs) beside them, and doctor, report and the smoke on top.
"""

from pathlib import Path

__version__ = "0.1.0"

PACKAGE = Path(__file__).resolve().parent
"""This package's folder: its data/ travels in the wheel."""
SOURCE_TREE = PACKAGE.parents[1]
"""The checkout's root when the package runs from one (src/mcore_images/); elsewhere a folder without env/."""
