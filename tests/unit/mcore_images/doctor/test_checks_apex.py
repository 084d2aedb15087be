"""The apex checks (src/mcore_images/doctor/checks_apex.py) made to fail and made to pass in the fake world of world.py:
apex's fused kernels."""

from __future__ import annotations

import sys

from mcore_images.catalogue import wgrad_fusion
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


def _ours(world: World) -> None:
    """This project's fusion module, installed as its distribution installs it (top_level.txt names the module)."""
    world.module_file(wgrad_fusion.MODULE, f"PROVIDER = {wgrad_fusion.OURS!r}\n")
    world.dist(wgrad_fusion.OURS, "0.1.0")
    info = world.site / f"{wgrad_fusion.OURS.replace('-', '_')}-0.1.0.dist-info"
    (info / "top_level.txt").write_text(f"{wgrad_fusion.MODULE}\n")


def test_wgrad_fusion_skips_without_megatron_core(world: World) -> None:
    assert status(world, "wgrad.fusion") == Status.SKIP


def test_wgrad_fusion_absent_fails_naming_each_frameworks_switch(world: World) -> None:
    world.megatron()
    found = world.run("wgrad.fusion")
    assert found.status == Status.FAIL and "stops at the first step" in found.finding
    for flag in wgrad_fusion.OFF_FLAGS.values():
        assert flag in found.fix
    assert "\n" not in found.fix


def test_wgrad_fusion_from_this_project_needs_transformer_engine(world: World) -> None:
    world.megatron()
    _ours(world)
    found = world.run("wgrad.fusion")
    assert found.status == Status.FAIL and "Transformer Engine" in found.finding
    world.package("transformer_engine.pytorch")
    found = world.run("wgrad.fusion")
    assert found.status == Status.OK and wgrad_fusion.OURS in found.finding and "general_gemm" in found.finding
    # apex.fused leaves the module to wgrad.fusion: it is not called a missing or present apex extension
    apex = world.run("apex.fused")
    assert wgrad_fusion.MODULE not in apex.finding


def test_wgrad_fusion_from_apex(world: World) -> None:
    world.megatron()
    world.module_file(wgrad_fusion.MODULE)  # apex's extension: no PROVIDER, no distribution of ours
    found = world.run("wgrad.fusion")
    assert found.status == Status.OK and "apex's CUDA extension" in found.finding
