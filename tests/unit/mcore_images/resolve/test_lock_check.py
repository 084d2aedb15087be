"""The committed locks agree with env/stacks.json, carry hashes, and never re-pin a lower layer."""

from __future__ import annotations

import shutil
from pathlib import Path

from mcore_images.catalogue.stacks import Stack
from mcore_images.resolve import layer_requirements, lock_check, lock_files
from tests.unit.conftest import variant


def test_every_stack_has_consistent_locks(root: Path, stacks: dict[str, Stack]) -> None:
    problems = [p for s in stacks.values() for p in lock_check.check_locks(s, root)]
    assert not problems, problems


def test_a_bumped_pin_is_caught(root: Path, debian: Stack) -> None:
    problems = lock_check.check_locks(variant(debian, mcore="0.16.0"), root)
    assert any("megatron-core" in p and "mcore-images lock" in p for p in problems)


def test_lower_layer_conflict_is_caught(tmp_path: Path, root: Path, debian: Stack) -> None:
    folder = tmp_path / "env" / "locks" / debian.name
    shutil.copytree(lock_files.lock_dir(debian, root), folder)
    runtime = folder / "runtime.txt"
    runtime.write_text(runtime.read_text() + "torch==2.10.0 \\\n    --hash=sha256:" + "0" * 64 + "\n")
    problems = lock_check.check_locks(debian, tmp_path)
    assert any("torch==2.10.0 conflicts" in p for p in problems)


def test_a_runtime_lock_without_psutil_is_caught(tmp_path: Path, root: Path, debian: Stack) -> None:
    """megatron-core's checkpoint writer needs psutil undeclared: without it every save waits forever."""
    folder = tmp_path / "env" / "locks" / debian.name
    shutil.copytree(lock_files.lock_dir(debian, root), folder)
    runtime = folder / "runtime.txt"
    lines = runtime.read_text().split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("psutil=="))
    end = next(i for i in range(start + 1, len(lines)) if lines[i] and not lines[i].startswith(" "))
    runtime.write_text("\n".join(lines[:start] + lines[end:]))
    problems = lock_check.check_locks(debian, tmp_path)
    assert any("psutil missing" in p and "--from-layer runtime" in p for p in problems), problems
    assert "psutil" in layer_requirements.layer_inputs(debian)["runtime"]
