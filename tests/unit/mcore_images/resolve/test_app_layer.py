"""The verl app layer, validated statically from env/ and bake (its ngc/cuda bases cannot be built here).

The app stage installs env/locks/<stack>/app.txt with --require-hashes --no-deps on top of the
runtime image. So the lock alone decides what changes: it must carry verl at the pin, nothing that
a lower layer owns (torch, Transformer Engine, the CUDA libraries, megatron-core, the bridges), and
no package at another version than the layers below installed (it was resolved against them).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mcore_images.catalogue import tags
from mcore_images.catalogue.stacks import Stack
from mcore_images.resolve import lock_files, plan, rules
from tests.support.host import need
from tests.unit.conftest import ROOT, variant, write_stacks

# What the layers under `app` own: an app lock pinning any of these could replace it (a torch swap).
LOWER_OWNED = re.compile(
    r"^(torch|triton|nvidia-(?!ml-py$).*|cuda-.*|transformer-engine.*|apex|flash-attn.*|megatron-core|megatron-bridge"
    r"|mbridge)$"
)
"""What base, kernels and runtime own: torch, its CUDA libraries (nvidia-ml-py, NVML's Python binding that vLLM
adds, is no CUDA library), TE, apex and megatron."""
# The chain the app image sits on. The builder stage is a side branch (its toolchain never reaches
# the runtime image), so its pins constrain nothing here.
CHAIN = ("base", "kernels", "runtime")


def app_pins(stack: Stack, root: Path) -> dict[str, str]:
    path = lock_files.lock_dir(stack, root) / "app.txt"
    return lock_files.pins(path.read_text()) if path.is_file() else {}


def chain_pins(stack: Stack, root: Path) -> dict[str, dict[str, str]]:
    """name -> {layer: version} over the layers under the app layer."""
    out: dict[str, dict[str, str]] = {}
    for layer in CHAIN:
        path = lock_files.lock_dir(stack, root) / f"{layer}.txt"
        if path.is_file():
            for name, version in lock_files.pins(path.read_text()).items():
                out.setdefault(name, {})[layer] = version
    return out


def verl_stacks(stacks: dict[str, Stack]) -> list[Stack]:
    return [s for s in stacks.values() if s.has("verl")]


def test_some_stack_carries_the_app_layer(stacks: dict[str, Stack]) -> None:
    assert verl_stacks(stacks), "no stack pins verl: the app layer would never be built"


def test_every_verl_stack_has_a_hashed_app_lock_with_verl_at_the_pin(root: Path, stacks: dict[str, Stack]) -> None:
    for stack in verl_stacks(stacks):
        path = lock_files.lock_dir(stack, root) / "app.txt"
        assert path.is_file(), f"{path} is missing: run `mcore-images lock --stack {stack.name}`"
        text = path.read_text()
        assert lock_files.pins(text).get("verl") == stack.verl, f"{path}: verl is not pinned at {stack.verl}"
        assert "--hash=sha256:" in text, f"{path} has no hashes: the app stage installs with --require-hashes"


def test_app_lock_cannot_swap_torch_kernels_or_megatron(root: Path, stacks: dict[str, Stack]) -> None:
    """No app lock pins what the layers below installed, or torch, TE, apex or megatron at all (an engine's
    own new CUDA Python bindings, cuda-python for SGLang's kernels, replace nothing)."""
    for stack in verl_stacks(stacks):
        below = chain_pins(stack, root)
        owned = sorted(f"{n}=={v}" for n, v in app_pins(stack, root).items()
                       if n in below or (LOWER_OWNED.match(n) and not n.startswith(("cuda-", "nvidia-"))))
        assert not owned, (f"env/locks/{stack.name}/app.txt pins {owned}: the app layer would replace what base, "
                           "kernels or runtime installed; re-resolve it against them (`mcore-images lock`)")


def test_app_lock_holds_verl_core_not_its_megatron_extra(root: Path, stacks: dict[str, Stack]) -> None:
    """verl[megatron] pins megatron-bridge==0.5.2 (not on PyPI) and names `apex` (the PyPI project of that
    name is unrelated to NVIDIA apex): the runtime layer provides megatron-core, the bridge, TE and apex."""
    for stack in verl_stacks(stacks):
        pins = app_pins(stack, root)
        assert "apex" not in pins and "megatron-bridge" not in pins, f"{stack.name}: {sorted(pins)}"


def test_app_lock_was_resolved_against_the_layers_below(root: Path, stacks: dict[str, Stack]) -> None:
    """No package in app.txt at another version than below, and none repeated (the lock leaves them out)."""
    for stack in verl_stacks(stacks):
        below = chain_pins(stack, root)
        app = app_pins(stack, root)
        conflicts = {n: (v, below[n]) for n, v in app.items() if n in below and set(below[n].values()) != {v}}
        assert not conflicts, f"env/locks/{stack.name}/app.txt re-pins packages of lower layers: {conflicts}"
        repeated = sorted(set(app) & set(below))
        assert not repeated, f"env/locks/{stack.name}/app.txt repeats packages the layers below install: {repeated}"


def test_stacks_without_verl_install_nothing_in_the_app_layer(root: Path, stacks: dict[str, Stack]) -> None:
    for stack in stacks.values():
        if not stack.has("verl"):
            assert "app" not in stack.layers
            assert app_pins(stack, root) == {}, f"{stack.name} pins no verl but its app lock installs packages"


def test_app_stacks_are_below_python_313(stacks: dict[str, Stack]) -> None:
    for stack in verl_stacks(stacks):
        assert not rules.at_least(stack.python, "3.13"), f"{stack.name}: verl needs Python < 3.13"
        assert not [v for v in rules.check(stack) if v.rule == "verl-python"]


# ---------------------------------------------------------------------------------------------
# The rules refuse the app layer on the debian stack (Python 3.13), with the clear message.


def test_rules_refuse_verl_on_python_313(debian: Stack) -> None:
    assert debian.python == "3.13" and not debian.has("verl")
    broken = [v for v in rules.check(variant(debian, verl="0.9.1")) if v.rule == "verl-python"]
    assert [str(v) for v in broken] == [
        "[verl-python] stack 'debian': the app layer (verl 0.9.1) needs Python < 3.13, stack has 3.13; "
        "fix: set verl='none' on this stack, or use a Python 3.12 stack for the app layer"]


def test_plan_refuses_the_app_layer_on_debian(tmp_path: Path, stacks: dict[str, Stack]) -> None:
    entries = json.loads((ROOT / "env" / "stacks.json").read_text())
    entries = entries["stacks"]
    for entry in entries:
        if entry["name"] == "debian":
            entry["verl"] = "0.9.1"
            entry["size_budget_gb"]["app"] = 12.0
    (tmp_path / "env").mkdir()
    write_stacks(tmp_path / "env" / "stacks.json", entries)
    env = {**os.environ, "MCORE_IMAGES_ROOT": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"),
                                          os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-m", "mcore_images", "plan", "--stack", "debian"], capture_output=True,
                         text=True, env=env, check=False, timeout=60)
    assert out.returncode == 1, out.stdout + out.stderr
    assert ("ERROR [verl-python] stack 'debian': the app layer (verl 0.9.1) needs Python < 3.13, stack has 3.13"
            in out.stdout + out.stderr)
    plans = plan.make_plan([variant(stacks["debian"], verl="0.9.1")])
    assert "app-debian" in plans[0].targets  # what would be built, and is refused


# ---------------------------------------------------------------------------------------------
# bake: the app targets, their args, contexts and labels.

@pytest.fixture
def buildx() -> None:
    need("docker")  # bake's own HCL evaluation


def bake_print(root: Path, *targets: str) -> dict:
    out = subprocess.run(["docker", "buildx", "bake", "--print", *targets], cwd=root, capture_output=True,
                         text=True, check=False)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.usefixtures("buildx")
def test_bake_app_targets_carry_the_pins(root: Path, stacks: dict[str, Stack]) -> None:
    app = verl_stacks(stacks)
    # bake also prints the targets the app targets build FROM (through their target: contexts).
    printed = bake_print(root, *(tags.target("app", s) for s in app))["target"]
    assert {t for t in printed if t.startswith("app-")} == {tags.target("app", s) for s in app}
    assert {tags.target("runtime", s) for s in app} <= set(printed)
    for stack in app:
        target = printed[tags.target("app", stack)]
        assert target["target"] == "app"
        assert target["contexts"]["runtime"] == f"target:runtime-{stack.name}"
        args = target["args"]
        assert (args["STACK"], args["VERL_VERSION"], args["TORCH_VERSION"], args["PYTHON_VERSION"]) == (
            stack.name, stack.verl, stack.torch, stack.python)
        labels = target["labels"]
        assert labels["io.mcore-images.layer"] == "app"
        assert labels["io.mcore-images.verl"] == stack.verl
        assert labels["io.mcore-images.torch"] == stack.torch
        assert labels["io.mcore-images.mcore"] == stack.mcore
        assert labels["io.mcore-images.megatron-bridge"] == stack.megatron_bridge
        assert target["tags"] == tags.tags("app", stack)


@pytest.mark.usefixtures("buildx")
def test_the_named_app_targets_print(root: Path, stacks: dict[str, Stack]) -> None:
    """`docker buildx bake --print app-cuda app-ngc`, as the release builds them."""
    if not {"cuda", "ngc"} <= {s.name for s in verl_stacks(stacks)}:
        pytest.skip("the cuda and ngc stacks no longer both carry verl")
    printed = bake_print(root, "app-cuda", "app-ngc")["target"]
    assert sorted(t for t in printed if t.startswith("app-")) == ["app-cuda", "app-ngc"]
    assert printed["app-ngc"]["args"]["BASE_IMAGE"] == stacks["ngc"].base_ref


@pytest.mark.usefixtures("buildx")
def test_no_app_target_without_verl(root: Path, stacks: dict[str, Stack]) -> None:
    printed = bake_print(root, "all")["target"]
    for stack in stacks.values():
        assert (tags.target("app", stack) in printed) == stack.has("verl"), stack.name
