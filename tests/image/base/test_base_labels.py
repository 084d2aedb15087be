"""Labels: present, and equal to the pins of env/stacks.json for the labelled stack."""

from __future__ import annotations

from tests.image.shared_checks import versions
from tests.image.utils import docker

from mcore_images.catalogue import components
from mcore_images.catalogue.images import label
from mcore_images.catalogue.stacks import LAYERS, Stack

BASE_LABELS = ("layer", "stack", "flavor", "base", *(c.label for c in components.of_layer("base")), "size-budget-gb")
"""What every layer carries: the stack's identity, the base layer's components (the catalogue's), its budget."""


def test_base_labels_present(image: docker.ImageInfo) -> None:
    missing = [label(key) for key in BASE_LABELS if image.label(key) in (None, "")]
    assert not missing, f"{image.shown} lacks labels {missing}; docker-bake.json sets them on every layer"
    assert image.layer in LAYERS


def test_labels_match_stacks_json(image: docker.ImageInfo, stack: Stack) -> None:
    problems = versions.label_pin_problems(image, stack)
    assert not problems, "\n".join(problems)
