"""verl as labelled."""

from __future__ import annotations

from typing import Any

import imagecheck as ic
import pytest


@pytest.mark.parametrize("key", ic.components_of("app"))
def test_version_label_matches_installed(key: str, labels: dict[str, str], facts: dict[str, Any]) -> None:
    problems = ic.version_problems(key, labels, facts)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("key", ic.components_of("app"))
def test_imports(key: str, labels: dict[str, str], facts: dict[str, Any]) -> None:
    problems = ic.import_problems(key, labels, facts)
    assert not problems, "\n".join(problems)
