"""Rollout engines pin torch exactly: the rule engine-torch refuses a stack whose torch the engine's
recorded requirement does not hold, and the app tag names the engine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mcore_images.catalogue import tags
from mcore_images.catalogue.stacks import Stack, load_stacks
from mcore_images.resolve import engine_records, engines, pypi, rules
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
    other = "2.8.1" if stack.torch != "2.8.1" else "2.9.1"
    found = _engine_violations(variant(stack, torch=other))
    assert len(found) == 1 and "\n" not in found[0]
    assert f"vLLM {stack.vllm} requires torch==" in found[0] and f"the stack pins torch {other}" in found[0]


def test_an_unrecorded_engine_release_names_the_fix() -> None:
    stack = next(s for s in load_stacks().values() if s.has("vllm"))
    found = _engine_violations(variant(stack, vllm="0.0.1"))
    assert found and "is not recorded in env/engines.json" in found[0] and "mcore-images lock --stack" in found[0]


def test_the_app_tag_names_the_engine() -> None:
    stack = next(s for s in load_stacks().values() if s.has("vllm"))
    assert f"-vllm{stack.vllm}-mcore" in tags.layer_tag("app", stack)
    assert "vllm" not in tags.layer_tag("app", load_stacks()["ngc"])


def test_a_candidate_engine_release_is_judged_by_its_own_metadata_and_env_is_not_written(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # `build --set vllm=X` / `outdated` for a release env/engines.json has not recorded: the rule reads what
    # the index says of X (before: "not recorded; fix: run lock", which records committed pins only).
    stack = variant(next(s for s in load_stacks().values() if s.has("vllm")), vllm="0.0.1")
    before = engines.engines_file().read_text()
    asked: list[tuple[str, str]] = []

    def fake(engine: object, version: str, python: str) -> str:
        asked.append((version, python))
        return "==2.0.0"

    monkeypatch.setattr(engine_records, "read_requirement", fake)
    monkeypatch.setattr(engines, "CANDIDATES", {"torch": {}, "verl": {}, "megatron_bridge": {}})
    assert engine_records.read_candidates(stack) == ["vllm 0.0.1"]
    assert asked == [("0.0.1", stack.python)]
    found = _engine_violations(stack)
    assert found == [f"[engine-torch] stack '{stack.name}': vLLM 0.0.1 requires torch==2.0.0, the stack pins torch "
                     f"{stack.torch}; fix: pin the vLLM release whose torch requirement holds {stack.torch}, "
                     "or that torch"]
    assert engine_records.read_candidates(stack) == [] and len(asked) == 1  # read once per process
    assert engines.engines_file().read_text() == before


def test_build_with_an_engine_release_the_index_cannot_give_is_one_line_before_anything_runs() -> None:
    env = {**os.environ, "PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_RETRIES": "0", "PIP_TIMEOUT": "2"}
    done = subprocess.run([sys.executable, "-m", "mcore_images", "build", "--stack", "debian-verl", "--set",
                           "vllm=0.9.9", "--dry-run"], capture_output=True, text=True, check=False, env=env)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "cannot read vllm 0.9.9's requirements from the index" in done.stderr, done.stderr


def verl_findings(stack: Stack) -> list[str]:
    return [str(v) for v in rules.check(stack) if v.rule == "verl-requirements"]


def test_every_verl_stack_honours_what_its_verl_declares() -> None:
    carried = [s for s in load_stacks().values() if s.has("verl")]
    assert carried, "no stack carries verl"
    for stack in carried:
        assert verl_findings(stack) == [], stack.name


@pytest.mark.parametrize(("changes", "needle"), [
    ({"vllm": "0.14.0", "torch": "2.9.1"}, "verl 0.8.0 requires vllm<=0.12.0,>=0.8.5, the stack pins vLLM 0.14.0"),
    ({"constraints": ("transformers>=5",), "verl": "0.9.9"}, "is not recorded in env/engines.json"),
])
def test_a_stack_that_contradicts_verl_is_refused(changes: dict, needle: str) -> None:
    """Before: debian-verl with vLLM 0.14.0 passed every rule although verl 0.8.0's vllm extra stops at 0.12.0."""
    stack = load_stacks()["debian-verl"].replace(**changes)
    found = verl_findings(stack)
    assert found and needle in found[0], found


def test_verls_transformers_range_is_judged_against_the_constraints() -> None:
    """verl 0.9.1 needs transformers >= 5.5.3; a stack constrained to transformers < 5 cannot carry it (what
    `outdated` called "rules ok" for a verl 0.6.1 stack's bump to 0.9.1)."""
    stack = load_stacks()["debian-verl"].replace(verl="0.9.1")
    found = verl_findings(stack)
    assert any("transformers" in f and "transformers<5" in f for f in found), found


@pytest.mark.parametrize(("first", "second", "meet"), [
    (">=5.5.3,<5.11", "<5", False), (">=4.40", "<5", True), ("==4.57.1", "<5", True), ("<=0.12.0", ">0.12", False),
    ("~=0.2", ">=0.2.17", True), ("!=0.9.0,<=0.10.0,>=0.8.0", "<0.9", True)])
def test_can_meet(first: str, second: str, meet: bool) -> None:
    from mcore_images.catalogue.versions import SpecifierSet, can_meet

    assert can_meet(SpecifierSet(first), SpecifierSet(second)) is meet


def test_torchs_cudnn_requirement_is_read_for_the_images_platform(monkeypatch: pytest.MonkeyPatch) -> None:
    # torch's metadata names its cuDNN wheel with a platform marker (and other platforms' wheels beside it).
    asked: list[tuple[str, str, str]] = []

    def metadata(distribution: str, version: str, python: str) -> dict[str, object]:
        asked.append((distribution, version, python))
        return {"requires_dist": [
            "filelock", "nvidia-cudnn-cu12==9.1.0.70; platform_system == 'Linux' and platform_machine == 'aarch64'",
            "nvidia-cudnn-cu12==9.10.2.21; platform_system == 'Linux' and platform_machine == 'x86_64'",
            "nvidia-cudnn-frontend>=1.0; extra == 'optional'"]}

    monkeypatch.setattr(pypi, "read_metadata", metadata)
    assert engine_records.read_cudnn("2.9.0", "3.11") == "nvidia-cudnn-cu12==9.10.2.21"
    assert asked == [("torch", "2.9.0", "3.11")]
    monkeypatch.setattr(pypi, "read_metadata", lambda *args: {"requires_dist": ["filelock"]})
    assert engine_records.read_cudnn("2.9.0", "3.11") == ""


def test_a_candidate_torch_is_judged_by_the_cudnn_its_metadata_requires(monkeypatch: pytest.MonkeyPatch) -> None:
    # `build --set torch=X` / `outdated`: torch X's cuDNN requirement is read from the index, never written to env/.
    stack = variant(load_stacks()["debian"], torch="2.11.9")
    before = engines.engines_file().read_text()
    monkeypatch.setattr(engines, "CANDIDATES", {"torch": {}, "verl": {}, "megatron_bridge": {}, "cudnn": {},
                                                 "torch_wheels": {}})
    monkeypatch.setattr(engine_records, "read_cudnn", lambda torch, python: "nvidia-cudnn-cu13==9.99.0.1")
    monkeypatch.setattr(engine_records, "read_torch_wheel", lambda torch, python, machine: {
        "wheel": f"torch-{torch}-{machine}.whl", "bytes": 1, "cuda_runtime": "cuda-toolkit[cudart]==13.0.2"})
    assert engine_records.read_candidates(stack) == ["torch 2.11.9"]
    lines = [str(v) for v in rules.check(stack) if v.rule == "cudnn-torch"]
    assert lines == [f"[cudnn-torch] stack 'debian': torch 2.11.9 requires nvidia-cudnn-cu13==9.99.0.1 (the cuDNN it "
                     f"loads), the stack pins cuDNN {stack.cudnn}; fix: set cudnn to '9.99.0.1'"]
    assert not [v for v in rules.check(variant(stack, cudnn="9.99.0.1")) if v.rule == "cudnn-torch"]
    assert engines.engines_file().read_text() == before


def test_every_pypi_torch_has_its_cudnn_recorded() -> None:
    for stack in load_stacks().values():
        recorded = engines.torch_cudnn(stack)
        assert (recorded is None) == (stack.torch_source != "pypi"), stack.name
        assert "torch" not in {c.key for c in engines.unrecorded(stack)}, stack.name


def test_lock_records_torchs_cudnn_beside_what_was_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "env").mkdir()
    committed = json.loads(engines.engines_file().read_text())
    (tmp_path / "env" / "engines.json").write_text(json.dumps({**committed, "cudnn": {}}))
    monkeypatch.setattr(engine_records, "read_cudnn", lambda torch, python: f"nvidia-cudnn-cu13==9.0.{python[-2:]}")
    monkeypatch.setattr(engine_records, "read_torch_wheel",
                        lambda torch, python, machine: committed["torch_wheels"][torch][
                            engines.wheel_key(python, machine)])
    engine_records.record(load_stacks()["debian"], root=tmp_path)
    written = json.loads((tmp_path / "env" / "engines.json").read_text())
    assert written["cudnn"] == {"2.11.0": "nvidia-cudnn-cu13==9.0.13"}
    assert {k: v for k, v in written.items() if k not in ("cudnn", "about")} == \
        {k: v for k, v in committed.items() if k not in ("cudnn", "about")}
    assert "cudnn-torch" in written["about"]


@pytest.mark.parametrize(("pythons", "raised"), [
    (["cp311", "cp312"], True),   # wheels, none for 3.10: a verdict on the version
    (["cp310", "cp311"], False),  # a wheel for 3.10: pip failed for another reason, the caller says so
    (["py3"], False),
    ([], False),                  # nothing listed: the index is the problem
])
def test_a_release_without_a_wheel_for_the_python_is_told_apart(monkeypatch: pytest.MonkeyPatch, pythons: list[str],
                                                                 raised: bool) -> None:
    monkeypatch.setattr(pypi, "wheel_pythons", lambda project, version: pythons)
    if raised:
        with pytest.raises(pypi.NoWheel, match=r"torch 2.15.0 has no wheel for Python 3.10 \(its wheels: cp311"):
            pypi._no_wheel_for("torch", "2.15.0", "3.10")
    else:
        pypi._no_wheel_for("torch", "2.15.0", "3.10")


def test_wheel_pythons_reads_the_release_wheels_only(monkeypatch: pytest.MonkeyPatch) -> None:
    files = [{"filename": n} for n in ("torch-2.15.0-cp311-cp311-manylinux_2_28_x86_64.whl",
                                        "torch-2.15.0-cp314-cp314t-win_amd64.whl", "torch-2.14.0-cp310-cp310-any.whl",
                                        "torch-2.15.0.tar.gz")]
    monkeypatch.setattr(pypi, "index_files", lambda project: files)
    assert pypi.wheel_pythons("torch", "2.15.0") == ["cp311", "cp314"]
