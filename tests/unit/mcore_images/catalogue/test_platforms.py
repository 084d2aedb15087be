"""Platforms as a stack fact: parsed from env/stacks.json, refused where torch has no CUDA build for the machine
(read from the index into env/engines.json), and locked per machine (env/locks/aarch64/<stack>/ beside the x86_64
locks), the machines holding the same releases."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from mcore_images.catalogue import platforms
from mcore_images.catalogue.stacks import Stack, load_stacks, parse_document
from mcore_images.errors import InputError
from mcore_images.resolve import (
    engine_records,
    engines,
    layer_requirements,
    lock_check,
    lock_files,
    lock_update,
    pypi,
    rules,
    tag_content,
)
from tests.unit.conftest import variant


def _document(root: Path, **changes: Any) -> dict[str, Any]:
    data = json.loads((root / "env" / "stacks.json").read_text())
    entry = next(e for e in data["stacks"] if e["name"] == "debian")
    entry.update(changes)
    return data


def test_platform_names_are_ocis_and_machines_follow(debian: Stack) -> None:
    assert debian.platforms == ("linux/amd64", "linux/arm64")
    assert debian.machines == ("x86_64", "aarch64")
    assert platforms.of_machine("arm64") == platforms.BY_NAME["linux/arm64"]  # macOS's name for it
    assert platforms.of_arch("linux", "arm64") == platforms.BY_NAME["linux/arm64"]
    assert platforms.of_arch("windows", "amd64") is None
    assert platforms.short(debian.platforms) == "amd64, arm64"


def test_an_unknown_platform_is_one_line_naming_the_known_ones(root: Path) -> None:
    with pytest.raises(InputError) as caught:
        parse_document(_document(root, platforms=["linux/ppc64le"]), root / "env" / "stacks.json")
    message = str(caught.value)
    assert "stack 'debian'" in message and "'linux/ppc64le'" in message and "linux/amd64, linux/arm64" in message
    assert "\n" not in message


def test_a_stack_cannot_be_named_after_a_machine_whose_locks_share_env_locks(root: Path) -> None:
    with pytest.raises(InputError, match="holds the aarch64 locks of every stack; rename the stack"):
        parse_document(_document(root, name="aarch64"), root / "env" / "stacks.json")


def test_a_stack_sharing_layers_lists_the_same_platforms(root: Path) -> None:
    data = json.loads((root / "env" / "stacks.json").read_text())
    entry = next(e for e in data["stacks"] if e["name"] == "debian-mcore019")
    entry["platforms"] = ["linux/amd64"]
    with pytest.raises(InputError, match="platforms differ"):
        parse_document(data, root / "env" / "stacks.json")


def _wheel(cuda: bool) -> dict[str, Any]:
    return {"wheel": "torch-9.9.9-cp313-cp313-manylinux_2_28_aarch64.whl", "bytes": 104_230_578,
            "cuda_runtime": "nvidia-cuda-runtime-cu12==12.8.90" if cuda else ""}


def test_platform_torch_refuses_a_cpu_build_in_one_line(debian: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engines, "torch_wheel", lambda stack, machine: _wheel(machine != "aarch64"))
    found = [str(v) for v in rules.check(debian) if v.rule == "platform-torch"]
    assert found == ["[platform-torch] stack 'debian': torch 2.11.0 has no CUDA build for aarch64 on PyPI, so no "
                     "linux/arm64 image: torch-9.9.9-cp313-cp313-manylinux_2_28_aarch64.whl (104 MB) requires no CUDA "
                     "runtime on aarch64 (a CPU build); fix: drop linux/arm64 from platforms, or pin a torch whose "
                     "aarch64 wheel is a CUDA build"]
    assert not [v for v in rules.check(variant(debian, platforms=("linux/amd64",))) if v.rule == "platform-torch"]


def test_platform_torch_asks_for_what_is_not_recorded(debian: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engines, "torch_wheel", lambda stack, machine: None if machine == "aarch64" else _wheel(True))
    found = [v for v in rules.check(debian) if v.rule == "platform-torch"]
    assert len(found) == 1 and "not recorded" in found[0].message and "mcore-images lock --stack debian" in found[0].fix


def test_ngcs_torch_comes_with_its_base_on_every_platform(stacks: dict[str, Stack]) -> None:
    assert not [v for v in rules.check(stacks["ngc"]) if v.rule == "platform-torch"]


def test_the_recorded_facts_refuse_arm64_to_the_torch_2_9_stacks(stacks: dict[str, Stack]) -> None:
    # What env/engines.json holds from the index: torch 2.9's aarch64 wheel is a CPU build, 2.11's a CUDA build.
    verl = variant(stacks["debian-verl"], platforms=("linux/amd64", "linux/arm64"))
    assert [v.rule for v in rules.check(verl)] == ["platform-torch"]
    assert engines.torch_wheel(stacks["debian"], "aarch64")["cuda_runtime"].startswith("cuda-toolkit[cudart]")


@pytest.mark.parametrize(("requires", "machine", "expected"), [
    (['nvidia-cuda-runtime-cu12==12.8.90; platform_system == "Linux" and platform_machine == "x86_64"'], "x86_64",
     "nvidia-cuda-runtime-cu12==12.8.90"),
    (['nvidia-cuda-runtime-cu12==12.8.90; platform_system == "Linux" and platform_machine == "x86_64"'], "aarch64",
     ""),
    (['cuda-toolkit[cublas,cudart]==13.0.2; platform_system == "Linux"'], "aarch64", "cuda-toolkit[cudart]==13.0.2"),
    (['cuda-toolkit[cublas]==13.0.2; platform_system == "Linux"', "filelock"], "aarch64", ""),
])
def test_a_cuda_build_is_one_that_requires_the_cuda_runtime_on_its_machine(
        monkeypatch: pytest.MonkeyPatch, requires: list[str], machine: str, expected: str) -> None:
    asked: list[tuple[str, ...]] = []

    def report(distribution: str, version: str, python: str, tags: tuple[str, ...]) -> dict[str, Any]:
        asked.append(tags)
        return {"metadata": {"requires_dist": requires},
                "download_info": {"url": f"https://files.example/torch-2.11.0-cp313-{machine}.whl"}}

    monkeypatch.setattr(pypi, "install_report", report)
    monkeypatch.setattr(pypi, "file_size", lambda project, name: 7)
    assert engine_records.read_torch_wheel("2.11.0", "3.13", machine) == {
        "wheel": f"torch-2.11.0-cp313-{machine}.whl", "bytes": 7, "cuda_runtime": expected}
    assert f"manylinux_2_28_{machine}" in asked[0]


def _copy_debian_locks(root: Path, tmp_path: Path) -> Path:
    for machine in ("x86_64", "aarch64"):
        shutil.copytree(lock_files.lock_dir(load_stacks()["debian"], root, machine),
                        lock_files.lock_dir(load_stacks()["debian"], tmp_path, machine))
    return tmp_path


def test_the_committed_arm64_locks_are_checked_and_agree_with_x86_64(root: Path, stacks: dict[str, Stack]) -> None:
    for stack in stacks.values():
        for machine in stack.machines:
            assert (lock_files.lock_dir(stack, root, machine) / "runtime.txt").is_file(), (stack.name, machine)
        agreed = lock_files.default_pins(stack, "aarch64", root)
        for layer in lock_files.own_layers(stack) if "aarch64" in stack.machines else ():
            arm = lock_files.pins(lock_files.lock_path(stack, layer, root, "aarch64").read_text())
            assert {k: v for k, v in arm.items() if k in agreed and agreed[k] != v} == {}, (stack.name, layer)
    assert (root / "env/locks/aarch64/debian/base.txt").read_text().splitlines()[1].startswith(
        "# Python 3.13, aarch64-manylinux_2_28")


def test_an_arm64_lock_that_drifts_from_x86_64_is_caught(tmp_path: Path, root: Path, debian: Stack) -> None:
    checkout = _copy_debian_locks(root, tmp_path)
    path = lock_files.lock_path(debian, "runtime", checkout, "aarch64")
    path.write_text(path.read_text().replace("\nsix==", "\nsix==0.0.1\nsix-was=="))
    problems = lock_check.check_locks(debian, checkout)
    assert any("env/locks/aarch64/debian/runtime.txt: six is 0.0.1, the x86_64 locks pin" in p for p in problems), \
        problems


def test_a_missing_arm64_lock_and_stray_locks_are_caught(tmp_path: Path, root: Path, debian: Stack) -> None:
    checkout = _copy_debian_locks(root, tmp_path)
    lock_files.lock_path(debian, "kernels", checkout, "aarch64").unlink()
    assert "env/locks/aarch64/debian/kernels.txt is missing; run `mcore-images lock --stack debian`" in \
        lock_check.check_locks(debian, checkout)
    amd64_only = variant(debian, platforms=("linux/amd64",))
    assert any(p.startswith("env/locks/aarch64/debian/ holds aarch64 locks, but stack 'debian' does not list "
                            "linux/arm64") for p in lock_check.check_locks(amd64_only, checkout))


def test_locking_a_refused_platform_stops_before_resolving(debian: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engines, "unrecorded", lambda stack: [])
    monkeypatch.setattr(engines, "torch_wheel", lambda stack, machine: _wheel(machine != "aarch64"))
    monkeypatch.setattr(layer_requirements, "resolved_inputs", lambda stack: layer_requirements.layer_inputs(stack))
    resolved: list[str] = []
    monkeypatch.setattr(lock_update, "_update_machine", lambda stack, inputs, machine, *args: (resolved.append(machine),
                                                                                        (None, []))[1])
    with pytest.raises(InputError, match=r"^no aarch64 locks resolved: \[platform-torch\]"):
        lock_update.update_locks(debian)
    assert resolved == ["x86_64"]


def test_a_shared_tag_holds_every_platforms_content(stacks: dict[str, Stack], monkeypatch: pytest.MonkeyPatch) -> None:
    mine = tag_content.content(stacks["cuda"], "base")
    assert mine is not None and mine["platforms"] == "linux/amd64, linux/arm64" and "torch (base, aarch64)" in mine
    fewer = variant(stacks["cuda"], platforms=("linux/amd64",))
    assert tag_content.content(fewer, "base") != mine
