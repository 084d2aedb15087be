"""`mcore-images validate` (what `make validate` and CI run) refuses what `plan` and `build` refuse: a stack that
breaks a compatibility rule, even once its generated files and its locks follow it. Each case edits a copy of the
checkout (env/, the Dockerfile and every file with a generated region) named by MCORE_IMAGES_ROOT."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from mcore_images import cli
from mcore_images.image_build import regions
from tests.unit.conftest import ROOT


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copytree(ROOT / "env", tmp_path / "env")
    for name in sorted({region.path for region in regions.REGIONS} | {"Dockerfile"}):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    monkeypatch.setenv("MCORE_IMAGES_ROOT", str(tmp_path))
    monkeypatch.delenv("DEBIAN_MIRROR", raising=False)
    return tmp_path


def edit_stack(root: Path, name: str, change: Callable[[dict], None]) -> None:
    path = root / "env" / "stacks.json"
    doc = json.loads(path.read_text())
    change(next(s for s in doc["stacks"] if s["name"] == name))
    path.write_text(json.dumps(doc, indent=2) + "\n")


def refused_everywhere(stack: str, line: str, capsys: pytest.CaptureFixture) -> None:
    """validate (exit 1, the rule's line first and alone), plan (exit 1) and build (exit 2) all name ``line``."""
    assert cli.main(["validate"]) == 1
    assert capsys.readouterr().err.splitlines() == [f"error: {line}"]
    assert cli.main(["plan", "--stack", stack]) == 1
    assert f"ERROR {line}" in capsys.readouterr().out
    assert cli.main(["build", "--stack", stack, "--dry-run"]) == 2
    assert capsys.readouterr().err.splitlines() == [f"error: {line}"]


def test_a_stack_that_breaks_a_rule_fails_validate_once_its_files_and_locks_follow_it(
        checkout: Path, capsys: pytest.CaptureFixture) -> None:
    """Before: `make validate` exited 0 on a stack that broke [flash-attn-cutlass] once `update --no-locks` and
    `lock` had run (`lock` wrote flash-attn-4==4.0.0b11 into the kernels lock); plan and build refused it."""
    edit_stack(checkout, "debian-verl", lambda s: s.update(flash_attn="4.0.0b11"))
    assert cli.main(["update", "--no-locks"]) == 0
    kernels = checkout / "env" / "locks" / "debian-verl" / "kernels.txt"  # what `lock` wrote there
    kernels.write_text(kernels.read_text() + "flash-attn-4==4.0.0b11 \\\n    --hash=sha256:" + "0" * 64 + "\n")
    capsys.readouterr()
    refused_everywhere("debian-verl", "[flash-attn-cutlass] stack 'debian-verl': flash-attn-4 4.0.0b11 needs "
                       "nvidia-cutlass-dsl 4.4.2 or newer, below 4.6.0 (these releases use cute.core.ThrMma, which "
                       "nvidia-cutlass-dsl 4.6.0 removed); the stack has 4.8.1; fix: pin a flash-attn-4 and "
                       "nvidia-cutlass-dsl pair the table admits", capsys)


def test_a_substitute_for_a_package_the_stack_does_not_have_is_refused(checkout: Path,
                                                                      capsys: pytest.CaptureFixture) -> None:
    """Before: a substitutes entry naming a package the stack does not have passed plan, validate and build."""
    edit_stack(checkout, "ngc", lambda s: s["substitutes"].update(vllm="verl's vllm extra names another release"))
    assert cli.main(["update", "--no-locks"]) == 0
    capsys.readouterr()
    refused_everywhere("ngc", "[verl-requirements] stack 'ngc': substitutes names 'vllm', which stands in for "
                       "nothing: the stack carries no vLLM; fix: drop 'vllm' from the stack's substitutes, or name "
                       "the distribution the stack pins another release of", capsys)


def test_the_checkouts_own_stacks_keep_every_rule(capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["validate"]) == 0
    assert capsys.readouterr().out.startswith("every stack keeps the compatibility rules; generated files current")
