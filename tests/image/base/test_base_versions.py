"""Python, CUDA and torch: each label equals what the image has, and torch imports."""

from __future__ import annotations

from typing import Any

import imagecheck as ic
import pytest


@pytest.mark.parametrize("key", ic.components_of("base"))
def test_version_label_matches_installed(key: str, labels: dict[str, str], facts: dict[str, Any]) -> None:
    problems = ic.version_problems(key, labels, facts)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("key", [k for k in ic.components_of("base") if ic.COMPONENTS[k].modules])
def test_imports(key: str, labels: dict[str, str], facts: dict[str, Any]) -> None:
    problems = ic.import_problems(key, labels, facts)
    assert not problems, "\n".join(problems)


def test_pip_check(host: Any) -> None:
    """Every installed distribution has its requirements (the locks are complete closures)."""
    result = host.run("python -m pip check")
    assert result.rc == 0, f"pip check: {result.stdout.strip()} {result.stderr.strip()}"


def test_no_distribution_installed_twice(facts: dict[str, Any]) -> None:
    """Two metadata folders of one distribution: one layer installed over another's copy."""
    problems = ic.duplicate_problems(facts)
    assert not problems, "\n".join(problems)
