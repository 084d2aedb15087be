"""The megatron checks (src/mcore_images/doctor/checks_megatron.py) made to fail and made to pass in the fake world of
world.py: megatron-core: found, recent enough, not shadowed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from mcore_images.doctor.model import Status
from tests.unit.mcore_images.doctor.world import World, status


def test_megatron_core_not_found_is_the_seed_error(world: World) -> None:
    found = world.run("megatron.core")
    assert found.status == Status.FAIL and "megatron.core not found" in found.finding
    assert "pip install" in found.fix


def test_megatron_core_too_old_or_broken_or_fine(world: World) -> None:
    world.megatron("0.12.0")
    assert "older than 0.13.0" in world.run("megatron.core").finding
    world.megatron("0.19.2", init="raise ModuleNotFoundError(\"No module named 'triton'\")")
    found = world.run("megatron.core")
    assert found.status == Status.FAIL and "triton" in found.fix


def test_megatron_core_ok(world: World) -> None:
    world.megatron("0.19.2")
    found = world.run("megatron.core")
    assert found.status == Status.OK and "0.19.2" in found.finding


def test_megatron_shadow(world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert status(world, "megatron.shadow") == Status.SKIP
    world.megatron("0.19.2")
    assert status(world, "megatron.shadow") == Status.OK
    checkout = tmp_path / "Megatron-LM"
    world.megatron("0.20.0", root=checkout)
    monkeypatch.syspath_prepend(str(checkout))
    found = world.run("megatron.shadow")
    assert found.status == Status.FAIL and "0.20.0" in found.finding and "hides" in found.finding


def test_a_declared_megatron_lm_checkout_may_shadow_the_same_release(world: World, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: a Megatron-LM checkout on PYTHONPATH always failed megatron.shadow, even when the user meant it
    (Megatron-LM's training scripts run from their checkout); now $MEGATRON_LM_CHECKOUT declares it."""
    world.megatron("0.19.2")
    checkout = tmp_path / "Megatron-LM"
    world.megatron("0.19.2", root=checkout)
    monkeypatch.syspath_prepend(str(checkout))
    assert world.run("megatron.shadow").status == Status.FAIL
    world.environ["MEGATRON_LM_CHECKOUT"] = str(checkout)
    found = world.run("megatron.shadow")
    assert found.status == Status.OK and "declared Megatron-LM checkout" in found.finding


def test_a_declared_checkout_of_another_release_or_not_in_front_fails(world: World, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    world.megatron("0.19.2")
    checkout = tmp_path / "Megatron-LM"
    world.megatron("0.20.0", root=checkout)
    world.environ["MEGATRON_LM_CHECKOUT"] = str(checkout)
    absent = world.run("megatron.shadow")
    assert absent.status == Status.FAIL and "no megatron/core on sys.path is inside it" in absent.finding
    monkeypatch.syspath_prepend(str(checkout))
    other = world.run("megatron.shadow")
    assert other.status == Status.FAIL and "0.20.0" in other.finding and "core_v0.19.2" in other.fix


def test_megatron_core_without_a_version(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    other = world.tmp / "checkout"
    other.mkdir()
    monkeypatch.syspath_prepend(str(other))
    world.package("megatron.core", root=other)
    world.dist("megatron-core", "0.16.1")  # installed in site/, but the copy imported is other/'s
    found = world.run("megatron.core")
    assert found.status == Status.FAIL and "has no version" in found.finding
    assert "pip install --force-reinstall 'megatron-core>=0.13.0'" in found.fix
    for name in ("megatron.core", "megatron"):
        sys.modules.pop(name, None)
    world.package("megatron.core", {"__init__.py": "__version__ = '0.12.0'\n"}, root=other)
    assert "older than 0.13.0" in world.run("megatron.core").finding


def test_megatron_core_version_from_its_own_dist_info(world: World) -> None:
    world.package("megatron.core")
    world.dist("megatron-core", "0.16.1")  # the dist-info that installed this very copy
    found = world.run("megatron.core")
    assert found.status == Status.OK and "0.16.1" in found.finding
