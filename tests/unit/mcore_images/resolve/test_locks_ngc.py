"""The ngc stack's layers never install what NGC's base provides, so turning NGC's pip constraint off
(PIP_CONSTRAINT= in the Dockerfile's os-ngc stage) cannot let a lock replace NGC's torch, TE or apex."""

from __future__ import annotations

import re

from mcore_images.catalogue import components
from mcore_images.catalogue.components import LOCK_LAYERS
from mcore_images.catalogue.stacks import load_stacks
from mcore_images.resolve import layer_requirements, lock_files
from tests.unit.conftest import ROOT

FROM_NGC = ("torch", "torchvision", "transformer-engine", "transformer-engine-torch", "apex", "flash-attn")
"""Some of what NGC's PyTorch container builds itself against its torch."""


def test_no_ngc_lock_installs_what_the_base_provides() -> None:
    ngc = load_stacks()["ngc"]
    assert {c.key: ngc.pins[c.key] for c in components.CATALOGUE if c.key in ("torch", "te", "apex")} == {
        "torch": ngc.torch, "te": ngc.te, "apex": "base"}
    assert ngc.torch_source == "base" and ngc.te_source == "base"
    for layer in LOCK_LAYERS:
        installed = lock_files.pins(lock_files.lock_path(ngc, layer).read_text())
        provided = [name for name in installed if layer_requirements.BASE_PROVIDED.match(name)]
        assert not provided, f"ngc/{layer}.txt: {installed}"
    assert all(layer_requirements.BASE_PROVIDED.match(name) for name in FROM_NGC)


def test_the_ngc_stage_turns_the_constraint_off_deliberately() -> None:
    stage = re.search(r"FROM \$\{BASE_IMAGE\} AS os-ngc\n(.*?)\n\n", (ROOT / "Dockerfile").read_text(), re.S)
    assert stage and re.search(r"^ENV PIP_CONSTRAINT=$", stage.group(1), re.M), "os-ngc must set PIP_CONSTRAINT="
    assert "/etc/pip/constraint.txt" in stage.group(1)  # the reason is written where the choice is made
