"""verl as labelled."""

from __future__ import annotations

from typing import Any

import pytest
from tests.image.shared_checks import versions

from mcore_images.catalogue import components


@pytest.mark.parametrize("comp", components.of_layer("app"), ids=lambda c: c.label)
def test_version_label_matches_installed(comp: components.Component, labels: dict[str, str],
    facts: dict[str, Any]) -> None:
    problems = versions.version_problems(comp, labels, facts)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("comp", components.of_layer("app"), ids=lambda c: c.label)
def test_imports(comp: components.Component, labels: dict[str, str],
    facts: dict[str, Any]) -> None:
    problems = versions.import_problems(comp, labels, facts)
    assert not problems, "\n".join(problems)
