"""examples/train-gpt/train.py as the unit tests reach it: its path, and the script loaded as a module (it imports
the standard library and mcore_images only at its top, so no torch is needed)."""

from __future__ import annotations

import functools
import importlib.util
import sys
from types import ModuleType

from tests.unit.conftest import ROOT

SCRIPT = ROOT / "examples" / "train-gpt" / "train.py"


@functools.cache
def load() -> ModuleType:
    """The script as module ``train_gpt``, loaded once per test process."""
    spec = importlib.util.spec_from_file_location("train_gpt", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("train_gpt", module)
    spec.loader.exec_module(module)
    return module
