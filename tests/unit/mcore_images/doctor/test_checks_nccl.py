"""The nccl checks (src/mcore_images/doctor/checks_nccl.py) made to fail and made to pass in the fake world of world.py:
NCCL: the library torch loads and NVLink SHARP."""

from __future__ import annotations

from mcore_images.doctor.model import Status
from tests.unit.mcore_images.doctor.world import PIN, World, status, unversioned_libraries


def test_nccl_pip_differs_from_torch_pin(world: World) -> None:
    world.torch()
    world.dist("torch", "2.11.0", requires=PIN)
    world.dist("nvidia-nccl-cu13", "2.26.2")
    found = world.run("nccl.version")
    assert found.status == Status.FAIL and "pip install nvidia-nccl-cu13==2.27.7" in found.fix


def test_nccl_loaded_library_differs(world: World) -> None:
    world.torch(nccl=(2, 27, 7))
    world.dist("torch", "2.11.0", requires=PIN)
    world.dist("nvidia-nccl-cu13", "2.27.7")
    world.loads("/usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5", 22105)
    found = world.run("nccl.version")
    assert found.status == Status.FAIL and "2.21.5" in found.finding


def test_nccl_agrees(world: World) -> None:
    assert status(world, "nccl.version") == Status.SKIP
    world.torch(nccl=(2, 27, 7))
    world.dist("torch", "2.11.0", requires=PIN)
    world.dist("nvidia-nccl-cu13", "2.27.7")
    world.loads(world.pip_library("nccl", "libnccl.so.2"), 22707)
    found = world.run("nccl.version")
    assert found.status == Status.OK and "2.27.7" in found.finding


def test_nccl_nvls(world: World) -> None:
    assert status(world, "nccl.nvls") == Status.OK  # no GPUs
    world.gpus(90, 90, driver_cuda=13000)
    assert status(world, "nccl.nvls") == Status.WARN
    world.environ["NCCL_NVLS_ENABLE"] = "0"
    assert status(world, "nccl.nvls") == Status.OK
    world.environ["NCCL_NVLS_ENABLE"] = "yes"
    assert status(world, "nccl.nvls") == Status.WARN


def test_nccl_that_does_not_say_its_version(world: World) -> None:
    unversioned_libraries(world)
    found = world.run("nccl.version")
    assert found.status == Status.WARN and "ncclGetVersion" in found.finding
