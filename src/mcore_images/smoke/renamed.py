"""The smoke's programs under the names they had before they moved into the tooling's namespace.

`python -m smoke`, `python -m smoke.bridge` and `python -m smoke.bench` (scripts and job files that users wrote)
still run in the images and in a checkout: the repository's top-level `smoke` folder, which the images copy beside
their venv's packages (the wheel leaves it out, so installing the tool's wheel adds no top-level name to a user's
environment), is a namespace folder holding only a `__main__.py` each, which calls ``run_as`` here. Having no
``__init__.py``, it never shadows a training repository's own `smoke` package or module: Python takes a namespace
folder only when no regular one is found anywhere on sys.path.
"""

from __future__ import annotations

import runpy
import sys


def run_as(module: str) -> None:
    """Say the new name once on stderr, then run ``module`` as ``python -m`` would, with the same arguments."""
    old = module.removeprefix("mcore_images.")
    print(f"note: `python -m {old}` is `python -m {module}` now; running that", file=sys.stderr)
    runpy.run_module(module, run_name="__main__", alter_sys=True)
