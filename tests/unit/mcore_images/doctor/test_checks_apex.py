"""The apex checks (src/mcore_images/doctor/checks_apex.py) made to fail and made to pass in the fake world of world.py:
apex's fused kernels."""

from __future__ import annotations

import sys

from mcore_images.doctor.model import Status
from tests.unit.mcore_images.doctor.world import World, status


def test_apex_absent_names_the_fallbacks(world: World) -> None:
    found = world.run("apex.fused")
    assert found.status == Status.WARN and "gradient_accumulation_fusion" in found.finding


def test_apex_broken_and_ok(world: World) -> None:
    world.torch()
    for name in ("fused_layer_norm_cuda", "fused_weight_gradient_mlp_cuda"):
        world.module_file(name)
    world.module_file("amp_C", "raise ImportError('amp_C.so: undefined symbol: _ZN2at4_ops')")
    found = world.run("apex.fused")
    assert found.status == Status.FAIL and "amp_C" in found.finding
    world.module_file("amp_C", "")
    sys.modules.pop("amp_C", None)
    assert status(world, "apex.fused") == Status.OK
