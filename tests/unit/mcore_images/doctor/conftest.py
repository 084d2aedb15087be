"""The doctor tests' fake world, one per test (world.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from mcore_images.doctor import command as doctor
from tests.unit.mcore_images.doctor.world import HIDDEN, World


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    doctor.load_checks()
    before = set(sys.modules)
    yield World(tmp_path, monkeypatch)
    for name in set(sys.modules) - before:  # fake packages imported during the test, nothing else
        module = sys.modules.get(name)
        where = str(getattr(module, "__file__", None) or getattr(module, "__path__", [""])[0] or "")
        if module is None or where.startswith(str(tmp_path)) or name.split(".")[0] in HIDDEN:
            sys.modules.pop(name, None)
