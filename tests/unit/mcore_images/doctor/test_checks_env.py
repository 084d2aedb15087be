"""The env checks (src/mcore_images/doctor/checks_env.py) made to fail and made to pass in the fake world of world.py:
the environment: CUDA_DEVICE_MAX_CONNECTIONS, stale NVTE_* attention settings, PIP_CONSTRAINT."""

from __future__ import annotations

import pytest

from mcore_images.doctor.model import Status
from tests.unit.mcore_images.doctor.world import World, status


def test_cuda_device_max_connections(world: World) -> None:
    assert status(world, "env.cuda-max-connections") == Status.SKIP
    world.gpus(90, driver_cuda=13000)
    assert status(world, "env.cuda-max-connections") == Status.WARN
    world.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    assert status(world, "env.cuda-max-connections") == Status.OK
    world.gpus(100, driver_cuda=13000)
    assert status(world, "env.cuda-max-connections") == Status.WARN  # =1 not wanted on Blackwell
    del world.environ["CUDA_DEVICE_MAX_CONNECTIONS"]
    assert status(world, "env.cuda-max-connections") == Status.OK


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({}, Status.OK),
        ({"NVTE_FLASH_ATTN": "1", "NVTE_FUSED_ATTN": "1"}, Status.OK),
        ({"NVTE_FUSED_ATTN": "0"}, Status.WARN),  # fits flash / unfused / local, not the default auto
        ({"NVTE_FLASH_ATTN": "1", "NVTE_FUSED_ATTN": "1", "NVTE_UNFUSED_ATTN": "0"}, Status.FAIL),
        ({"NVTE_FLASH_ATTN": "true"}, Status.FAIL),
    ],
)
def test_stale_nvte_attention(world: World, values: dict[str, str], expected: Status) -> None:
    world.environ.update(values)
    assert status(world, "env.nvte-attn") == expected


def test_pip_constraint(world: World) -> None:
    assert status(world, "pip.constraint") == Status.OK
    (world.tmp / "etc" / "pip").mkdir()
    ngc = world.tmp / "etc" / "pip" / "constraint.txt"
    ngc.write_text("requests==2.31\n")
    assert status(world, "pip.constraint") == Status.OK
    ngc.write_text("torch==2.8.0a0+5228986c39.nv25.5\ntransformer_engine==2.3.0  # NGC\nrequests==2.31\n")
    found = world.run("pip.constraint")
    assert found.status == Status.WARN and "torch==2.8.0a0" in found.finding
