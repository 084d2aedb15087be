""".ci/disk.sh picks what it may delete by the project's labels and the CI registry's repository: tiny images
built in the real engine land in the step that removes them, and an image without the project's labels or
this commit's candidate in none. `show` lists the picks; `ensure` removes them through the same listers."""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.registry.conftest import HOST

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / ".ci" / "disk.sh"
STEP = re.compile(r"^\[disk\] step (\d+) removes (\S+)$")


def disk(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """.ci/disk.sh with ``args`` and the extra environment ``env``; its log is on stderr."""
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, check=False,
                          timeout=300, env={**os.environ, **env})


def build(tag: str, labels: dict[str, str]) -> None:
    """An empty image whose labels are the only thing that tells disk.sh what it is."""
    dockerfile = "FROM scratch\n" + "".join(f"LABEL {key}={value}\n" for key, value in labels.items())
    subprocess.run(["docker", "build", "-q", "-t", tag, "-"], input=dockerfile, text=True, check=True,
                   capture_output=True, timeout=120)


@pytest.fixture
def images() -> Iterator[dict[str, str]]:
    run = uuid.uuid4().hex[:10]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
    made = {
        "old candidate": (f"{HOST}/mcore-images:candidate-0000000-{run}-runtime-debian",
                          {"io.mcore-images.layer": run}),
        "this commit's candidate": (f"{HOST}/mcore-images:candidate-{head}-{run}-runtime-debian",
                                    {"io.mcore-images.layer": f"{run}-head"}),
        "layer": (f"mcore-images-disktest:{run}-runtime", {"io.mcore-images.layer": f"{run}-local"}),
        "base": (f"mcore-images-disktest:{run}-base", {"io.mcore-images.base-recipe": run}),
        "foreign": (f"disktest-foreign:{run}", {"org.example.owner": run}),
    }
    for tag, labels in made.values():
        build(tag, labels)
    try:
        yield {what: tag for what, (tag, _) in made.items()}
    finally:
        for tag, _ in made.values():
            subprocess.run(["docker", "image", "rm", tag], capture_output=True, check=False, timeout=120)


def picks() -> dict[str, str]:
    shown = disk("show", MCORE_REGISTRY_PORT=HOST.rsplit(":", 1)[1])
    assert shown.returncode == 0, shown.stderr
    return {match[2]: match[1] for line in shown.stderr.splitlines() if (match := STEP.match(line))}


def test_each_image_lands_in_its_step(images: dict[str, str]) -> None:
    steps = picks()
    assert steps.get(images["old candidate"]) == "1"
    assert steps.get(images["layer"]) == "2"
    assert steps.get(images["base"]) == "7"
    assert images["this commit's candidate"] not in steps
    assert images["foreign"] not in steps


def test_enough_room_deletes_nothing(images: dict[str, str]) -> None:
    ensured = disk(MCORE_CI_FREE_GIB="0")
    assert ensured.returncode == 0, ensured.stderr
    assert "no deletion needed" in ensured.stderr
    listed = subprocess.run(["docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}}"], capture_output=True,
                            text=True, check=True, timeout=120).stdout.split()
    assert set(images.values()) <= set(listed)


def test_bad_setting_is_one_line_exit_2() -> None:
    refused = disk(MCORE_CI_FREE_GIB="forty")
    assert refused.returncode == 2
    assert refused.stderr.strip().count("\n") == 0
    assert "MCORE_CI_FREE_GIB=40" in refused.stderr
