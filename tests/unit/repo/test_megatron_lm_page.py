"""docs/megatron-lm.md's torchvision section says the debian stacks' runtime images lack torchvision: held to their
locks, so that a stack that gains it makes the page say so."""

from __future__ import annotations

import re

from mcore_images.catalogue.stacks import load_stacks
from tests.unit.conftest import ROOT


def test_the_debian_runtime_images_lack_torchvision_as_the_page_says() -> None:
    page = (ROOT / "docs" / "megatron-lm.md").read_text()
    assert "## torchvision" in page and "the debian stacks' runtime\nimages do not carry" in page
    for stack in load_stacks().values():
        if stack.flavor != "debian":
            continue
        layers = ("base", "kernels", "runtime")
        held = [f"{stack.layer_stack(layer)}/{layer}.txt" for layer in layers
                if (ROOT / "env" / "locks" / stack.layer_stack(layer) / f"{layer}.txt").is_file()
                and re.search(r"^torchvision==", (ROOT / "env" / "locks" / stack.layer_stack(layer) /
                                                  f"{layer}.txt").read_text(), re.M)]
        assert not held, f"{stack.name}'s runtime image now has torchvision ({held}): update docs/megatron-lm.md"
