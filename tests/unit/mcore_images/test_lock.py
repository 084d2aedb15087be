"""The committed locks agree with env/stacks.json, carry hashes, and never re-pin a lower layer."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mcore_images import lock
from mcore_images.stacks import Stack
from tests.unit.conftest import variant


def test_every_stack_has_consistent_locks(root: Path, stacks: dict[str, Stack]) -> None:
    problems = [p for s in stacks.values() for p in lock.check_locks(s, root)]
    assert not problems, problems


def test_a_bumped_pin_is_caught(root: Path, debian: Stack) -> None:
    problems = lock.check_locks(variant(debian, mcore="0.16.0"), root)
    assert any("megatron-core" in p and "mcore-images lock" in p for p in problems)


def test_lower_layer_conflict_is_caught(tmp_path: Path, root: Path, debian: Stack) -> None:
    folder = tmp_path / "env" / "locks" / debian.name
    shutil.copytree(lock.lock_dir(debian, root), folder)
    runtime = folder / "runtime.txt"
    runtime.write_text(runtime.read_text() + "torch==2.10.0 \\\n    --hash=sha256:" + "0" * 64 + "\n")
    problems = lock.check_locks(debian, tmp_path)
    assert any("torch==2.10.0 conflicts" in p for p in problems)


def test_a_runtime_lock_without_psutil_is_caught(tmp_path: Path, root: Path, debian: Stack) -> None:
    """megatron-core's checkpoint writer needs psutil undeclared: without it every save waits forever."""
    folder = tmp_path / "env" / "locks" / debian.name
    shutil.copytree(lock.lock_dir(debian, root), folder)
    runtime = folder / "runtime.txt"
    lines = runtime.read_text().split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("psutil=="))
    end = next(i for i in range(start + 1, len(lines)) if lines[i] and not lines[i].startswith(" "))
    runtime.write_text("\n".join(lines[:start] + lines[end:]))
    problems = lock.check_locks(debian, tmp_path)
    assert any("psutil missing" in p and "--from-layer runtime" in p for p in problems), problems
    assert "psutil" in lock.layer_inputs(debian)["runtime"]


def test_layer_inputs_follow_the_pins(debian: Stack) -> None:
    inputs = lock.layer_inputs(debian, ["torch>=2.1", "einops", "transformer_engine_cu13==2.20.2"])
    assert inputs["base"] == [f"torch=={debian.torch}"]
    assert f"megatron-core[mlm]=={debian.mcore}" in inputs["runtime"]
    assert set(lock.UNDECLARED_RUNTIME) <= set(inputs["runtime"])
    assert "einops" in inputs["kernels"]
    assert not any(r.startswith("torch") for r in inputs["kernels"])
    assert all(r.endswith(f"=={debian.cuda}.*") for r in inputs["builder"] if r.startswith("nvidia-"))


def test_ngc_lock_drops_what_the_base_provides() -> None:
    text = ("numpy==2.0 \\\n    --hash=sha256:aa\ntorch==2.11.0 \\\n    --hash=sha256:bb\n"
            "nvidia-nccl-cu13==2 \\\n    --hash=sha256:cc\n")
    kept = lock.pins(lock._drop_base_provided(text))
    assert kept == {"numpy": "2.0"}


@pytest.mark.parametrize("line,expected", [("megatron-core==0.16.1 \\", ("megatron-core", "0.16.1")),
                                           ("mbridge[megatron]==0.15.1 \\", ("mbridge", "0.15.1"))])
def test_pins_parser(line: str, expected: tuple[str, str]) -> None:
    assert lock.pins(line) == {expected[0]: expected[1]}


def test_a_numpy1_verl_app_caps_pyarrow() -> None:
    """verl < 0.9 pins numpy < 2; pyarrow >= 26 does not import with it (Ray's actors import pyarrow)."""
    from mcore_images.stacks import get_stack
    numpy1 = lock.layer_inputs(get_stack("debian-verl"))["app"]
    assert set(lock.UNDECLARED_APP_NUMPY1) <= set(numpy1)
    assert not set(lock.UNDECLARED_APP_NUMPY1) & set(lock.layer_inputs(get_stack("ngc"))["app"])  # verl 0.9.1


def test_uvs_reason_is_its_conclusion_not_the_hint_after_it() -> None:
    stderr = ("  × No solution found when resolving dependencies:\n"
              "  ╰─▶ Because a==1 depends on b>2 and you require b<2, we can conclude that your requirements are "
              "unsatisfiable.\n\nhint: You require CPython 3.12 (`cp312`), but we only found wheels for x: `cp311`\n")
    assert lock.uv_reason(stderr).endswith("we can conclude that your requirements are unsatisfiable.")
    assert lock.uv_reason("error: no such index\n") == "error: no such index"
    assert lock.uv_reason("") == "no output"
