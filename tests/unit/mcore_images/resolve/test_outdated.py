"""`mcore-images outdated` against a faked PyPI: newest final release, the rules a bump breaks, --bump."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from mcore_images.catalogue.stacks import Stack, load_stacks
from mcore_images.resolve import engines, outdated
from tests.unit.conftest import ROOT


def release(*versions: str, yanked: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"releases": {v: [{"yanked": v in yanked}] for v in versions}}


PYPI = {"torch": release("2.11.0"), "transformer-engine": release("2.20.2", "2.21.0"),
        "megatron-core": release("0.16.1", "0.19.2", "0.20.0rc1", "0.19.3", yanked=("0.19.3",)),
        "mbridge": release("0.15.1"), "megatron-bridge": release("0.6.2"), "verl": release("0.9.1"),
        "flash-attn-4": release("0.0.1", "4.0.0b36", yanked=("0.0.1",))}


def resolves(stack: Stack) -> str | None:  # a stand-in for uv: every bump resolves
    return None


def test_the_newest_final_unyanked_release() -> None:
    assert outdated.newest_release(PYPI["megatron-core"]) == "0.19.2"
    assert outdated.newest_release({"releases": {"1.0": []}}) is None


def test_a_bump_is_tried_through_the_rules() -> None:
    debian = load_stacks()["debian"]
    found = {f.component: f for f in outdated.check_stack(debian, lambda name: PYPI[name], {}, resolves)}
    assert found["torch"].status == "current"
    assert found["te"].status == "newer" and found["te"].newest == "2.21.0" and found["te"].breaks == ()
    mcore = found["mcore"]
    assert mcore.status == "newer" and mcore.newest == "0.19.2"
    assert mcore.breaks and mcore.breaks[0].startswith("[mbridge-mcore] mbridge 0.15.1 cannot build models")
    assert found["python"].status == "untracked" and "mbridge" in found and "verl" not in found


def test_bump_writes_only_what_keeps_every_rule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture) -> None:
    shutil.copytree(ROOT / "env", tmp_path / "env")
    monkeypatch.setenv("MCORE_IMAGES_ROOT", str(tmp_path))
    args = argparse.Namespace(bump="debian", stack=None, json=True, dry_run=False)
    assert outdated._run(args, fetch=lambda name: PYPI[name], resolve=resolves) == 0
    assert json.loads(capsys.readouterr().out) == {"te": "2.21.0"}
    bumped = load_stacks(tmp_path / "env" / "stacks.json")
    assert bumped["debian"].te == "2.21.0" and bumped["debian"].mcore == "0.16.1"
    assert bumped["debian-mcore019"].te == "2.21.0"  # it builds on debian's kernels layer


def test_a_dry_run_bump_prints_the_bump_and_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture) -> None:
    shutil.copytree(ROOT / "env", tmp_path / "env")
    monkeypatch.setenv("MCORE_IMAGES_ROOT", str(tmp_path))
    before = (tmp_path / "env" / "stacks.json").read_bytes()
    args = argparse.Namespace(bump="debian", stack=None, json=False, dry_run=True)
    assert outdated._run(args, fetch=lambda name: PYPI[name], resolve=resolves) == 0
    assert capsys.readouterr().out == "debian: te → 2.21.0 (dry run: nothing written)\n"
    assert (tmp_path / "env" / "stacks.json").read_bytes() == before


def test_pypi_unreachable_is_exit_2(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    def down(name: str) -> dict[str, Any]:
        raise OSError("network unreachable")

    args = argparse.Namespace(bump=None, stack="debian", json=False, dry_run=False)
    assert outdated._run(args, fetch=down, resolve=resolves) == 2
    assert "PyPI could not be read" in capsys.readouterr().err


def test_a_bump_the_rules_allow_but_uv_refuses_is_not_clean_and_not_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """The rules know some conflicts; the resolver knows all of them (verl 0.9.1 needs transformers >= 5.5.3,
    which the stack's constraint refuses): the bump is named with uv's reason and --bump leaves it out."""
    tried: list[str] = []

    def refuses_te(stack: Stack) -> str | None:
        tried.append(stack.te)
        return "uv finds no solution: transformer-engine-torch==2.21.0 needs torch>=2.12" if stack.te == "2.21.0" \
            else None

    debian = load_stacks()["debian"]
    found = {f.component: f for f in outdated.check_stack(debian, lambda name: PYPI[name], {}, refuses_te)}
    assert found["te"].breaks == ("[resolve] uv finds no solution: transformer-engine-torch==2.21.0 needs "
                                  "torch>=2.12",)
    assert "would break [resolve]" in found["te"].line()
    assert found["mcore"].breaks[0].startswith("[mbridge-mcore]") and "2.21.0" in tried  # rules first
    shutil.copytree(ROOT / "env", tmp_path / "env")
    monkeypatch.setenv("MCORE_IMAGES_ROOT", str(tmp_path))
    args = argparse.Namespace(bump="debian", stack=None, json=True, dry_run=False)
    assert outdated._run(args, fetch=lambda name: PYPI[name], resolve=refuses_te) == 0
    assert json.loads(capsys.readouterr().out) == {}


def test_a_candidate_engine_release_is_judged_by_the_requirements_read_for_it() -> None:
    # Before, a newer vLLM than env/engines.json records was "not recorded; run lock", a fix lock cannot make
    # (it records the committed pins only). Now the candidate's own metadata is read (here: faked) first.
    stack = next(s for s in load_stacks().values() if s.has("vllm"))
    read: list[str] = []

    def fake_read(bumped: Stack) -> None:
        read.append(bumped.vllm)
        engines.CANDIDATES["torch"].setdefault("vllm", {})["99.0.0"] = "==0.0.1"

    pypi = {**PYPI, "vllm": release(stack.vllm, "99.0.0")}
    try:
        found = {f.component: f for f in outdated.check_stack(stack, lambda name: pypi.get(name, release("0")), {},
                                                              resolves, read=fake_read)}
    finally:
        engines.CANDIDATES["torch"].get("vllm", {}).pop("99.0.0", None)
    assert "99.0.0" in read
    assert found["vllm"].status == "newer"
    assert any(b.startswith("[engine-torch]") and "vLLM 99.0.0 requires torch==0.0.1" in b
               for b in found["vllm"].breaks), found["vllm"].breaks


def test_a_candidate_whose_requirements_cannot_be_read_is_an_error_not_clean() -> None:
    stack = next(s for s in load_stacks().values() if s.has("vllm"))

    def unreachable(bumped: Stack) -> None:
        raise outdated.InputError("cannot read vllm 99.0.0's requirements from the index: connection refused")

    pypi = {**PYPI, "vllm": release(stack.vllm, "99.0.0")}
    found = {f.component: f for f in outdated.check_stack(stack, lambda name: pypi.get(name, release("0")), {},
                                                          resolves, read=unreachable)}
    assert found["vllm"].status == "error" and "cannot read vllm 99.0.0" in found["vllm"].note


def test_a_candidate_with_no_wheel_for_the_stacks_python_would_break_it_not_an_error() -> None:
    # Before: torch 2.15.0 (no cp310 wheel) for verl-mcore013 (Python 3.10) read "error: cannot read torch
    # 2.15.0's requirements from the index: ResolutionImpossible", and the run ended "PyPI could not be read".
    stack = next(s for s in load_stacks().values() if s.has("vllm"))

    def no_wheel(bumped: Stack) -> None:
        raise outdated.pypi.NoWheel(f"torch 99.0.0 has no wheel for Python {stack.python} (its wheels: cp399)")

    pypi = {**PYPI, "torch": release(stack.torch, "99.0.0")}
    found = {f.component: f for f in outdated.check_stack(stack, lambda name: pypi.get(name, release("0")), {},
                                                          resolves, read=no_wheel)}
    assert found["torch"].status == "newer" and found["torch"].breaks == (
        f"[wheel] torch 99.0.0 has no wheel for Python {stack.python} (its wheels: cp399)",)


def test_cudnn_follows_torch_not_pypi() -> None:
    # Before: a component with no lock requirement of its own read "follows its base image or git commit".
    stacks = load_stacks()
    found = {f.component: f for f in outdated.check_stack(stacks["debian"], lambda name: PYPI[name], {}, resolves)}
    assert found["cudnn"].status == "untracked" and found["cudnn"].note == "follows torch's exact requirement, not PyPI"
    ngc = {f.component: f for f in outdated.check_stack(stacks["ngc"], lambda name: PYPI[name], {}, resolves)}
    assert ngc["cudnn"].note.startswith("comes with the base image nvcr.io/nvidia/pytorch")


def test_a_te_release_newer_than_the_measured_one_is_the_candidate_to_measure(capsys: pytest.CaptureFixture) -> None:
    """TE's flash backend was measured with FlashAttention 4 on 2.20.2 (wrong on sm_90); PyPI's 2.21.0 is named once,
    with the command that measures it, and does not change the exit code."""
    args = argparse.Namespace(bump=None, stack="debian", json=False, dry_run=False)
    assert outdated._run(args, fetch=lambda name: PYPI[name], resolve=resolves) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "the candidate to measure" in line]
    assert len(lines) == 1 and lines[0].startswith(outdated.MEASURED_ACROSS), lines
    assert "2.20.2 → 2.21.0" in lines[0] and "wrong on sm_90" in lines[0]
    assert lines[0].endswith('PAIR_SET="te2.21.0-b36-c4.8.1 te2.21.0-b40-c4.8.1" bash .ci/gpu/attention-pairs.sh '
                             "prepare")


@pytest.mark.parametrize("newest", ["2.20.2", "2.19.0"])
def test_no_candidate_when_pypi_has_nothing_newer_than_the_measured_te(newest: str) -> None:
    pypi = {**PYPI, "transformer-engine": release("2.19.0", newest)}
    assert outdated.measure_candidate(lambda name: pypi[name], {}) is None


def test_a_later_patch_of_the_measured_series_is_a_candidate_too() -> None:
    """A patch release may carry TE's fix: 2.20.3 is measured before any stack ships FlashAttention 4 beside it."""
    pypi = {**PYPI, "transformer-engine": release("2.20.2", "2.20.3")}
    found = outdated.measure_candidate(lambda name: pypi[name], {})
    assert found is not None and found.newest == "2.20.3" and "te2.20.3-b40-c4.8.1" in found.note
