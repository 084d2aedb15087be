"""Fixtures of the app-layer tests: the runtime image of the same stack, to compare torch with."""

from __future__ import annotations

from typing import Any

import pytest
from tests.image.utils import docker, layers, probing


def find_runtime_image(image: docker.ImageInfo) -> tuple[docker.ImageInfo | None, list[str]]:
    """The runtime image this one was built on (layers.parent_image), else `<repo>:runtime-<stack>` (the app
    image's repository, then mcore-images) in the local store, and why each candidate was passed over."""
    parent = layers.parent_image(image, "runtime", image.stack_name)
    if parent is not None:
        return parent, []
    repos = [r for r in (layers._repository(image.ref), "mcore-images") if r]
    notes = ["no local runtime image of this stack has this image's first layers"]
    for ref in dict.fromkeys(f"{repo}:runtime-{image.stack_name}" for repo in repos):
        if not docker.image_exists(ref):
            notes.append(f"{ref} is not in the local image store")
            continue
        found = docker.inspect_image(ref)
        if found.layer != "runtime" or found.stack_name != image.stack_name:
            notes.append(
                f"{ref} is a {found.layer} image of stack {found.stack_name}, not the runtime of {image.stack_name}"
            )
            continue
        return found, notes
    return None, notes


@pytest.fixture(scope="session")
def runtime_image(image: docker.ImageInfo) -> docker.ImageInfo:
    found, notes = find_runtime_image(image)
    if found is None:
        pytest.skip("no runtime image of this stack to compare torch with: " + "; ".join(notes))
    return found


@pytest.fixture(scope="session")
def runtime_torch(runtime_image: docker.ImageInfo) -> dict[str, Any]:
    """torch's distribution record in the runtime image (probe.py in a short-lived container)."""
    torch = probing.probe_image(runtime_image.ref, modules=())["dists"].get("torch")
    if torch is None:
        pytest.fail(f"torch is not installed in {runtime_image.ref}")
    return torch
