"""Shared fixtures for the tooling's unit tests (no docker, no torch needed)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mcore_images import tools
from mcore_images.catalogue.stacks import Stack, load_stacks
from mcore_images.image_build import jobs
from tests.support.machine import fake_machine

ROOT = Path(__file__).resolve().parents[2]
PYTHONPATH = str(ROOT / "src")
"""What a program of this checkout (python -m mcore_images.smoke, …) needs on its path: the package's src/."""


@pytest.fixture(autouse=True)
def own_state(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the tool remembers between runs (ledger versions seen) lives in a folder of the test's own: the
    machine's record of a real release never decides a unit test."""
    monkeypatch.setenv("MCORE_IMAGES_STATE", str(tmp_path_factory.mktemp("state")))


@pytest.fixture(autouse=True)
def own_machine(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The job planner reads a machine of the test's own (24 GiB available, 2 CPUs: a CI machine's size), in this
    process and in every program a test starts: no test depends on the host's free memory or CPU count."""
    root = fake_machine(tmp_path_factory.mktemp("machine"), available_gib=24, cpus=2)
    monkeypatch.setenv(jobs.PROBE_ROOT, str(root))
    return root


@pytest.fixture(autouse=True)
def this_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    """Programs a test starts (python -m mcore_images …) import this checkout's package, whichever copy of it an
    earlier `pip install -e` left installed (pytest's own pythonpath reaches only this process)."""
    inherited = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", PYTHONPATH + (os.pathsep + inherited if inherited else ""))


@pytest.fixture
def tools_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every program the tool starts (tools.INSTALL) found on PATH, for a test that fakes subprocess's answers: the
    test then runs the same on a machine with or without docker, oras or cosign."""
    monkeypatch.setattr(tools.shutil, "which", lambda name, *a, **k: f"/usr/bin/{name}" if name in tools.INSTALL
                        else None)


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def stacks() -> dict[str, Stack]:
    return load_stacks(ROOT / "env" / "stacks.json")


@pytest.fixture
def debian(stacks: dict[str, Stack]) -> Stack:
    return stacks["debian"]


def variant(stack: Stack, **changes: object) -> Stack:
    """A copy of a real stack with some fields or pins changed (bad inputs for the rules)."""
    return stack.replace(**changes)


def write_stacks(path: Path, entries: list[dict]) -> Path:
    path.write_text(json.dumps({"stacks": entries}))
    return path
