"""Rollout engines pin torch exactly: the rule engine-torch refuses a stack whose torch the engine's
recorded requirement does not hold, and the app tag names the engine."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from mcore_images import engines, rules, tags
from mcore_images.stacks import Stack, load_stacks
from tests.unit.conftest import variant


def _engine_violations(stack: Stack) -> list[str]:
    return [str(v) for v in rules.check(stack) if v.rule == "engine-torch"]


def test_every_pinned_engine_has_its_torch_requirement_recorded_and_holds() -> None:
    carried = [s for s in load_stacks().values() if any(s.has(e.key) for e in engines.ENGINES)]
    assert carried, "no stack carries a rollout engine"
    for stack in carried:
        assert engines.unrecorded(stack) == []
        assert _engine_violations(stack) == []


def test_a_torch_the_engine_does_not_pin_is_refused_in_one_line() -> None:
    stack = next(s for s in load_stacks().values() if s.has("vllm"))
    found = _engine_violations(variant(stack, torch="2.9.0"))
    assert len(found) == 1 and "\n" not in found[0]
    assert f"vLLM {stack.vllm} requires torch==" in found[0] and "the stack pins torch 2.9.0" in found[0]


def test_an_unrecorded_engine_release_names_the_fix() -> None:
    stack = next(s for s in load_stacks().values() if s.has("vllm"))
    found = _engine_violations(variant(stack, vllm="0.0.1"))
    assert found and "is not recorded in env/engines.json" in found[0] and "mcore-images lock --stack" in found[0]


def test_the_app_tag_names_the_engine() -> None:
    stack = next(s for s in load_stacks().values() if s.has("vllm"))
    assert f"-vllm{stack.vllm}-mcore" in tags.layer_tag("app", stack)
    assert "vllm" not in tags.layer_tag("app", load_stacks()["cuda"])


def test_build_refuses_an_engine_release_it_cannot_judge_before_anything_runs(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "mcore_images", "build", "--stack", "verl-mcore013", "--set",
                           "vllm=0.9.9", "--dry-run"], capture_output=True, text=True, check=False)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "[engine-torch]" in done.stderr and "vLLM 0.9.9" in done.stderr, done.stderr
