"""Every component as labelled: its installed version is its label, and its modules import (or, labelled none, do
not). One test each, over the whole catalogue, named by label: a component is checked in images of the layer that
adds it and of every child layer (docker-stacks' pattern, as the per-layer folders apply)."""

from __future__ import annotations

from typing import Any

import pytest

from mcore_images.catalogue import components
from tests.image.shared_checks import versions
from tests.image.utils import docker, layers


def carried(comp: components.Component, image: docker.ImageInfo) -> None:
    """Skip a component whose layer is above the image's."""
    if not layers.layer_applies(comp.layer, image.layer or ""):
        pytest.skip(f"{comp.label} is added by the {comp.layer} layer; {image.shown} is a {image.layer} image")


@pytest.mark.parametrize("comp", components.CATALOGUE, ids=lambda c: c.label)
def test_version_label_matches_installed(comp: components.Component, image: docker.ImageInfo,
                                         labels: dict[str, str], facts: dict[str, Any]) -> None:
    carried(comp, image)
    problems = versions.version_problems(comp, labels, facts)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("comp", [c for c in components.CATALOGUE if c.modules], ids=lambda c: c.label)
def test_imports(comp: components.Component, image: docker.ImageInfo, labels: dict[str, str],
                 facts: dict[str, Any]) -> None:
    """torch, transformer_engine.pytorch, apex's fused modules, megatron-core, the bridges, verl and the rollout
    engines import without a GPU, exactly where labelled."""
    carried(comp, image)
    problems = versions.import_problems(comp, labels, facts)
    assert not problems, "\n".join(problems)
