"""Transformer Engine and apex as compiled (the commit, the GPU architectures, what TE sees); no builder toolchain;
torch untouched since the base layer. Their labels and imports: tests/image/test_versions.py."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.image.shared_checks import hygiene, loader, versions
from tests.image.shared_checks import layers as layer_checks
from tests.image.utils import docker, layers, saved_layers

from mcore_images.catalogue import components


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


TE_FLASH_VIEW = r'''
import json
import transformer_engine.pytorch  # noqa: F401  (importing it is what makes TE look for FlashAttention)
from transformer_engine.pytorch.attention.dot_product_attention.utils import FlashAttentionUtils as fa
print(json.dumps({"fa2": str(fa.version) if fa.is_installed else None,
                  "fa3": str(fa.fa3_version) if fa.v3_is_installed else None,
                  "fa4": str(fa.fa4_version) if getattr(fa, "v4_is_installed", False) else None}))
'''
"""What TE itself found when it looked for FlashAttention 2, 3 and 4 (its FlashAttentionUtils, set on import)."""


def test_te_sees_the_labelled_flash_attention(labels: dict[str, str], host: Any) -> None:
    """TE's own view of FlashAttention is the label's: the release TE will select under megatron-core's
    attention_backend=flash (verl's default), or none where the stack pins none. Without it TE has no backend
    for that setting and the first forward fails."""
    if labels.get(components.BY_KEY["te"].oci_label) in (None, "none"):
        pytest.skip("the image carries no Transformer Engine")
    pinned = labels.get(components.BY_KEY["flash_attn"].oci_label, "none")
    result = host.run("python -c %s", TE_FLASH_VIEW)
    assert result.rc == 0, (result.stdout + result.stderr)[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    expected = {"fa2": None, "fa3": None, "fa4": None if pinned == "none" else pinned}
    assert seen == expected, f"TE sees {seen}; the label says FlashAttention {pinned}"
