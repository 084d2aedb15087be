"""The bake definition, read by bake itself, agrees with env/stacks.json and the Python tag scheme."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from mcore_images.catalogue import components, gpu_archs, platforms, tags, wgrad_fusion
from mcore_images.catalogue.images import label
from mcore_images.catalogue.stacks import Stack, groups
from mcore_images.image_build import bake_file, debian_base
from mcore_images.resolve import lock_files, plan
from tests.support.host import need


@pytest.fixture(autouse=True)
def _buildx() -> None:
    need("docker")  # bake's own HCL evaluation


@pytest.fixture(scope="module")
def printed(root: Path) -> dict:
    """Plain `docker buildx bake --print all` in the checkout: bake finds docker-bake.hcl + .json itself."""
    out = subprocess.run(["docker", "buildx", "bake", "--print", "all"], cwd=root, capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout)


def test_every_layer_of_every_stack_is_a_target(printed: dict, stacks: dict[str, Stack]) -> None:
    expected = {tags.target(layer, s) for s in stacks.values() for layer in s.built_layers}
    assert set(printed["target"]) == expected


def test_tags_match_python_scheme(printed: dict, stacks: dict[str, Stack]) -> None:
    for s in stacks.values():
        for layer in s.built_layers:
            assert printed["target"][tags.target(layer, s)]["tags"] == tags.tags(layer, s)


def test_args_and_labels_carry_the_pins(printed: dict, stacks: dict[str, Stack], root: Path) -> None:
    settings = bake_file.SETTINGS
    for s in stacks.values():
        for layer in s.built_layers:  # every component's pin as its catalogue build_arg, and the settings: no other
            args = printed["target"][tags.target(layer, s)]["args"]
            assert {k: v for k, v in args.items() if k not in settings} == {
                c.build_arg: s.pins[c.key] for c in components.CATALOGUE if c.build_arg}, (s.name, layer)
        target = printed["target"][f"runtime-{s.name}"]
        assert target["args"]["TORCH_VERSION"] == s.torch
        assert target["args"]["MCORE_VERSION"] == s.mcore
        assert target["args"]["BASE_IMAGE"] == s.base_ref
        labels = target["labels"]
        assert labels["io.mcore-images.mcore"] == s.mcore
        assert labels["io.mcore-images.mbridge"] == s.mbridge
        assert labels["io.mcore-images.te"] == s.te
        assert "io.mcore-images.verl" not in labels
        base_labels = printed["target"][f"base-{s.layer_stack('base')}"]["labels"]
        assert "io.mcore-images.mcore" not in base_labels


def test_kernels_and_up_label_the_gpu_architectures_from_the_one_table(printed: dict,
                                                                       stacks: dict[str, Stack]) -> None:
    """io.mcore-images.cuda-archs is the stack's cuda_archs and io.mcore-images.gpus what gpu_archs.serves() says
    they are; the base layer carries neither."""
    for s in stacks.values():
        for layer in s.built_layers:
            labels = printed["target"][tags.target(layer, s)]["labels"]
            if layer == "base":
                assert label(gpu_archs.LABEL) not in labels and label(gpu_archs.GPUS_LABEL) not in labels
                continue
            assert labels[label(gpu_archs.LABEL)] == s.cuda_archs, (s.name, layer)
            assert labels[label(gpu_archs.GPUS_LABEL)] == gpu_archs.serves(s.cuda_archs), (s.name, layer)


def test_kernels_and_up_name_the_gradient_accumulation_fusion_provider(printed: dict,
                                                                       stacks: dict[str, Stack]) -> None:
    """io.mcore-images.wgrad-fusion is apex where the stack has apex and this project's module where it has none
    (catalogue.wgrad_fusion.expected_provider); the base layer carries no such label."""
    for s in stacks.values():
        for layer in s.built_layers:
            labels = printed["target"][tags.target(layer, s)]["labels"]
            want = None if layer == "base" else wgrad_fusion.expected_provider(s)
            assert labels.get(wgrad_fusion.LABEL) == want, (s.name, layer)


def test_layers_chain_through_target_contexts(printed: dict, stacks: dict[str, Stack]) -> None:
    for s in stacks.values():
        below = s.layer_stack("kernels")  # the stack's own, or the one it takes base and kernels from
        assert printed["target"][f"kernels-{below}"]["contexts"]["base"] == f"target:base-{below}"
        assert printed["target"][f"runtime-{s.name}"]["contexts"]["kernels"] == f"target:kernels-{below}"
        assert printed["target"][f"runtime-{s.name}"]["args"]["LAYERS_STACK"] == below


def test_groups_follow_env(root: Path, stacks: dict[str, Stack]) -> None:
    by_group = groups(stacks)
    assert set(by_group) <= {"default", "ci", "nightly", "release", "all"}, "a stack names a group bake lacks"
    for group in ("default", "ci", "nightly", "release"):
        out = subprocess.run(["docker", "buildx", "bake", "--print", group], cwd=root, capture_output=True,
                             text=True, check=True)
        built = {name.split("-", 1)[1] for name in json.loads(out.stdout)["group"][group]["targets"]}
        assert built == set(by_group.get(group, [])), group


@pytest.mark.parametrize("group", ["ci", "nightly"])
def test_certified_groups_build_each_stacks_top_layer(root: Path, stacks: dict[str, Stack], group: str) -> None:
    """What release-local certifies is the top layer (the app image where a stack has one)."""
    out = subprocess.run(["docker", "buildx", "bake", "--print", group], cwd=root, capture_output=True, text=True,
                         check=True)
    assert json.loads(out.stdout)["group"][group]["targets"] == [
        tags.target(stacks[name].built_layers[-1], stacks[name]) for name in groups(stacks)[group]]
    assert plan.run(None, group, "top")[0].split() == json.loads(out.stdout)["group"][group]["targets"]  # make's view


def test_plain_print_is_the_default_group(root: Path, stacks: dict[str, Stack]) -> None:
    out = subprocess.run(["docker", "buildx", "bake", "--print"], cwd=root, capture_output=True, text=True,
                         check=True)
    assert json.loads(out.stdout)["group"]["default"]["targets"] == [
        tags.target(stacks[name].built_layers[-1], stacks[name]) for name in groups(stacks)["default"]]


def test_variables_reach_args(root: Path, tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("not a real bundle\n")
    env = {**os.environ, "MAX_JOBS": "3", "REGISTRY": "ghcr.io/acme", "CA_BUNDLE": str(ca)}
    out = subprocess.run(["docker", "buildx", "bake", "--print", "runtime-debian"], cwd=root, capture_output=True,
                         text=True, check=True, env=env)
    target = json.loads(out.stdout)["target"]["runtime-debian"]
    assert target["tags"][0].startswith("ghcr.io/acme/mcore-images:runtime-")
    # An explicit job count reaches the compile steps as a secret (outside their cache key), never as an arg.
    # The job planner's files come as secrets too (test_dockerfile.py holds those); the variables add these two.
    assert target["secret"][-2:] == [f"id=ca_bundle,src={ca}", "id=max_jobs,env=MAX_JOBS"]
    assert "MAX_JOBS" not in target["args"]


def test_builds_carry_no_provenance_that_would_change_the_digest(printed: dict) -> None:
    """A provenance attestation records the build's start time and a random ID: a rebuilt commit would get
    another digest (`mcore-images reproduce`). Every target turns it off; the release workflow asks for it."""
    for name, target in printed["target"].items():
        assert target.get("attest") == ["type=provenance,disabled=true"], name


def test_targets_build_their_stacks_platforms(printed: dict, stacks: dict[str, Stack]) -> None:
    """A multi-platform stack's targets name its platforms; a stack of the default platform alone names none, so
    its targets print (and build) with no platforms: BuildKit builds them for the machine it runs on."""
    for s in stacks.values():
        for layer in s.built_layers:
            target = printed["target"][tags.target(layer, s)]
            if s.platforms == (platforms.DEFAULT.name,):
                assert "platforms" not in target, (s.name, layer)
            else:
                assert target["platforms"] == list(s.platforms), (s.name, layer)


def test_another_platform_gets_its_own_locks_and_debian_base(printed: dict, stacks: dict[str, Stack]) -> None:
    """BuildKit takes NAME::os/arch over NAME when it builds that platform: the arm64 build mounts the same
    <stack>/<layer>.txt from env/locks/aarch64, and the debian flavor's FROM is the arm64 base `mcore-images base
    --platform linux/arm64` makes; the default platform's contexts are the ones every target had."""
    arm64 = platforms.BY_NAME["linux/arm64"]
    for s in stacks.values():
        for layer in s.built_layers:
            contexts = printed["target"][tags.target(layer, s)]["contexts"]
            assert contexts["locks"] == "env/locks"
            extra = {k: v for k, v in contexts.items() if "::" in k}
            if arm64.name not in s.platforms:
                assert extra == {}, (s.name, layer)
                continue
            expected = {f"locks::{arm64.name}": f"env/locks/{arm64.machine}"}
            if s.flavor == "debian":
                expected[f"{s.base_image}::{arm64.name}"] = f"docker-image://{debian_base.local_tag(s, arm64)}"
            assert extra == expected, (s.name, layer)


def test_the_arm64_locks_tree_mirrors_the_default_one(root: Path, stacks: dict[str, Stack]) -> None:
    """The Dockerfile mounts <stack>/<layer>.txt from whichever tree BuildKit picks: each stack's arm64 locks are at
    the same relative paths under env/locks/aarch64."""
    for s in stacks.values():
        if "linux/arm64" not in s.platforms:
            continue
        for name in lock_files.own_layers(s):
            default = lock_files.lock_path(s, name, root).relative_to(lock_files.locks_root(root))
            arm = lock_files.lock_path(s, name, root, "aarch64").relative_to(lock_files.locks_root(root, "aarch64"))
            assert default == arm and (lock_files.locks_root(root, "aarch64") / arm).is_file(), (s.name, name)


def test_bake_prints_the_generated_definition_with_its_variables_set(root: Path, stacks: dict[str, Stack]) -> None:
    """What bake resolves for every target is docker-bake.json as bake_file.py computes it, with the variables a
    build sets (registry, repository, commit, locks) put in by bake: nothing of a target is computed in HCL."""
    env = {**os.environ, "REGISTRY": "ghcr.io/acme", "IMAGE_REPO": "img", "GIT_SHA": "abc123", "LOCKS": "/l"}
    out = subprocess.run(["docker", "buildx", "bake", "--print", "all"], cwd=root, env=env, capture_output=True,
                         text=True, check=True)
    printed = json.loads(out.stdout)["target"]
    expected = bake_file.definition(stacks.values())["target"]
    assert set(printed) == set(expected)
    for name, target in expected.items():
        want = {**target, "tags": [t.replace('${image("', "ghcr.io/acme/img:").replace('")}', "")
                                   for t in target["tags"]],
                "labels": {**target["labels"], "org.opencontainers.image.revision": "abc123"},
                "contexts": {k.replace("$${", "${"): v.replace("${LOCKS}", "/l").replace("$${", "${")
                             for k, v in target["contexts"].items()}}
        want.pop("inherits")
        got = {k: v for k, v in printed[name].items() if k in want}
        assert got == want, name


def test_bake_reads_a_literal_dollar_brace_as_written(tmp_path: Path, root: Path, stacks: dict[str, Stack]) -> None:
    """A stack's text is not a bake template: ``${…}`` in a description reaches the label as written."""
    stack = next(iter(stacks.values())).replace(description="costs ${PRICE} and %{x}")
    (tmp_path / "docker-bake.json").write_text(bake_file.render([stack]))
    out = subprocess.run(["docker", "buildx", "bake", "-f", "docker-bake.hcl", "-f", str(tmp_path / "docker-bake.json"),
                          "--print", tags.target("runtime", stack)], cwd=root, capture_output=True, text=True,
                         check=True)
    labels = json.loads(out.stdout)["target"][tags.target("runtime", stack)]["labels"]
    assert labels["org.opencontainers.image.description"] == "costs ${PRICE} and %{x}"


def test_docker_bake_hcl_computes_nothing_of_a_target(root: Path) -> None:
    """docker-bake.hcl holds variables, the common target and the image name; every target is generated."""
    text = (root / "docker-bake.hcl").read_text()
    assert re.findall(r'^function "(\w+)"', text, re.M) == ["image"]
    assert re.findall(r'^target "([\w-]+)"', text, re.M) == ["_common"]
    assert not re.search(r"^(group|matrix)\b", text, re.M)
