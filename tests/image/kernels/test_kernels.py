"""Transformer Engine and apex as labelled; no builder toolchain; torch untouched since the base layer."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.image.shared_checks import hygiene, loader, versions
from tests.image.shared_checks import layers as layer_checks
from tests.image.utils import docker, layers, saved_layers

from mcore_images import components


@pytest.mark.parametrize("comp", components.of_layer("kernels"), ids=lambda c: c.label)
def test_version_label_matches_installed(comp: components.Component, labels: dict[str, str],
    facts: dict[str, Any]) -> None:
    problems = versions.version_problems(comp, labels, facts)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("comp", components.of_layer("kernels"), ids=lambda c: c.label)
def test_imports(comp: components.Component, labels: dict[str, str],
    facts: dict[str, Any]) -> None:
    """transformer_engine.pytorch and apex's fused modules import without a GPU, exactly where labelled."""
    problems = versions.import_problems(comp, labels, facts)
    assert not problems, "\n".join(problems)


def test_apex_commit(labels: dict[str, str], facts: dict[str, Any]) -> None:
    problems, cannot = versions.apex_commit_problems(labels, facts)
    assert not problems, "\n".join(problems)
    if cannot:
        pytest.skip(f"apex commit not comparable: {cannot}")


def test_no_builder_toolchain(image: docker.ImageInfo, facts: dict[str, Any], host: Any) -> None:
    """The builder stage's nvcc, cccl, ninja… reach the kernels layer only as the wheels they built."""
    stack = layers.stack_for(image)
    builder_only = hygiene.builder_only_packages(stack, machine=image.machine) if stack else set()
    problems = hygiene.toolchain_problems(facts, host.run, builder_only)
    assert not problems, "\n".join(problems)


def test_loader_finds_torch_cuda_libs(host: Any) -> None:
    """libnccl and libcudnn load from torch's own pip packages (a system cuDNN silently disables TE's
    fused attention): dlopen them by soname, as TE does, and read which file the loader mapped."""
    result = host.run("python -c %s", loader.LOADER_PROBE)
    assert result.rc == 0, result.stderr
    found = json.loads(result.stdout)
    if not found["pip_libs"]:
        pytest.skip("torch's CUDA libraries are not pip packages in this image (e.g. NGC's system CUDA)")
    problems = loader.loader_problems(found)
    assert not problems, "\n".join(problems)


def test_torch_only_in_one_layer(layer_scan: saved_layers.LayerScan) -> None:
    """No layer above the one that installed torch writes or deletes any of torch's files."""
    problems = layer_checks.torch_layer_problems(layer_scan)
    assert not problems, "\n".join(problems)


def test_torch_same_as_base_image(pytestconfig: pytest.Config, image: docker.ImageInfo, facts: dict[str, Any]) -> None:
    """The torch here is the base image's torch: same version and the same files (RECORD digest)."""
    base = layers.find_base_image(image, pytestconfig.getoption("--base-image"))
    if isinstance(base, str):
        pytest.skip(base)
    problems = layer_checks.base_torch_problems(base, facts)
    assert not problems, "\n".join(problems)
