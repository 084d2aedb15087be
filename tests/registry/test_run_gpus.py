"""`mcore-images run --gpus` as Docker itself parses it: `docker create` with the value run passes, then the
container's HostConfig.DeviceRequests as `docker inspect` reads it (no GPU or NVIDIA runtime is needed to create
one). Before: `--gpus device=0,1` reached Docker as it was, which reads it as CSV: device 0 alone."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcore_images.launch import run


@pytest.fixture(scope="module")
def image(small_root: Path) -> Iterator[str]:
    ref = f"mcore-images-test-gpus:{uuid.uuid4().hex[:8]}"
    subprocess.run(["docker", "import", str(small_root), ref], check=True, capture_output=True)
    yield ref
    subprocess.run(["docker", "image", "rm", "-f", ref], check=False, capture_output=True)


def device_request(image: str, value: str) -> dict:
    name = f"gpus-{uuid.uuid4().hex[:8]}"
    created = subprocess.run(["docker", "create", "--name", name, "--gpus", value, image, "true"],
                             capture_output=True, text=True, check=False)
    try:
        assert created.returncode == 0, created.stderr
        inspected = subprocess.run(["docker", "inspect", name], capture_output=True, text=True, check=True)
        (request,) = json.loads(inspected.stdout)[0]["HostConfig"]["DeviceRequests"]
        return request
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)


@pytest.mark.parametrize(("given", "ids", "count"), [
    ("0,1", ["0", "1"], 0), ("device=0,1", ["0", "1"], 0), ('"device=0,1"', ["0", "1"], 0),
    ("device=2", ["2"], 0), ("all", None, -1), ("2", None, 2),
])
def test_docker_gets_the_gpus_asked_for(image: str, given: str, ids: list[str] | None, count: int) -> None:
    request = device_request(image, run.gpus_value(given))
    assert request.get("DeviceIDs") == ids and request.get("Count") == count, request


def test_the_value_as_it_was_gave_one_gpu(image: str) -> None:
    """What the old pass-through meant: Docker reads device=0,1 unquoted as two CSV fields."""
    assert device_request(image, "device=0,1").get("DeviceIDs") == ["0"]
