"""The tag scheme, written once: each component's in_tag (components.py) and the flavors' origins (tags.py)."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from mcore_images.catalogue import components, tags
from mcore_images.catalogue.components import Component, TagPart
from mcore_images.catalogue.stacks import Stack
from mcore_images.errors import InputError
from tests.unit.conftest import variant

APEX = "6424da3b4f0c2c3d5e0d8f3c1a2b3c4d5e6f7a8b"


@pytest.fixture
def verl(debian: Stack) -> Stack:
    """A debian stack with every tagged pin given here, so the expected tags below are exact."""
    return variant(debian, debian_suite="bookworm", python="3.11", cuda="12.8", torch="2.9.0", te="2.16.0", apex=APEX,
                   mcore="0.16.1", verl="0.8.0", vllm="0.12.0", sglang="none")


def test_every_layer_tag_byte_for_byte(verl: Stack) -> None:
    assert {layer: tags.layer_tag(layer, verl) for layer in components.LAYERS} == {
        "base": "base-torch2.9.0-cu12.8-py3.11-debian-bookworm",
        "kernels": "kernels-te2.16.0-apex6424da3b-torch2.9.0-cu12.8-py3.11-debian-bookworm",
        "runtime": "runtime-mcore0.16.1-te2.16.0-torch2.9.0-cu12.8-py3.11-debian-bookworm",
        "app": "app-verl0.8.0-vllm0.12.0-mcore0.16.1-te2.16.0-torch2.9.0-cu12.8-py3.11-debian-bookworm",
    }
    assert tags.layer_tag("kernels", variant(verl, apex="none")).startswith("kernels-te2.16.0-apexnone-torch")
    # an optional part the stack lacks is left out, not written as 'none'
    assert tags.layer_tag("app", variant(verl, vllm="none")).startswith("app-verl0.8.0-mcore0.16.1-")


def test_each_flavor_ends_its_tags_with_its_origin(verl: Stack) -> None:
    ngc = variant(verl, flavor="ngc", base_image="nvcr.io/nvidia/pytorch:26.06-py3", debian_suite="")
    cuda = variant(verl, flavor="cuda", base_image="nvidia/cuda:13.0.2-cudnn-devel-ubuntu24.04", debian_suite="")
    assert [tags.origin(s) for s in (ngc, cuda, verl)] == ["ngc26.06", "cuda13.0.2", "debian-bookworm"]
    assert set(tags.ORIGINS) == {"ngc", "cuda", "debian"}  # the schema's flavors


def test_a_base_without_its_release_is_one_line(verl: Stack) -> None:
    ngc = variant(verl, flavor="ngc", base_image="nvcr.io/nvidia/pytorch", debian_suite="")
    with pytest.raises(InputError, match=r"^stack 'debian': base_image 'nvcr.io/nvidia/pytorch' does not give the "
                       r"release its tags end with .*; write it like nvcr.io/nvidia/pytorch:YY.MM-py3$"):
        tags.layer_tag("base", ngc)


def test_a_new_part_stands_by_its_rank_in_the_layers_up_to_until(monkeypatch: pytest.MonkeyPatch,
                                                                   verl: Stack) -> None:
    """A component named in tags by its catalogue entry alone: from its layer up to ``until``, ordered by rank."""
    fa = Component("flash_attn", "flash-attn", "flash-attn", "kernels", "builder", build_arg="FLASH_ATTN_VERSION",
                   in_tag=TagPart("fa", 32, until="runtime"))
    monkeypatch.setattr(components, "CATALOGUE", (*components.CATALOGUE, fa))
    stack = dataclasses.replace(verl, pins={**verl.pins, "flash_attn": "2.8.3"})
    assert [c.key for c in tags.parts("kernels")] == ["te", "apex", "flash_attn", "torch", "cuda", "python"]
    assert tags.layer_tag("kernels", stack).startswith("kernels-te2.16.0-apex6424da3b-fa2.8.3-torch2.9.0-")
    assert tags.layer_tag("runtime", stack).startswith("runtime-mcore0.16.1-te2.16.0-fa2.8.3-torch2.9.0-")
    assert "fa2.8.3" not in tags.layer_tag("app", stack) and "fa2.8.3" not in tags.layer_tag("base", stack)


def test_the_lengths_the_tag_length_rule_reads_are_those_of_real_tags(verl: Stack) -> None:
    """The rule asks the scheme how long an immutable or candidate tag grows, rather than counting its format again."""
    content = tags.layer_tag("app", verl)
    created = dt.datetime(2026, 12, 5, tzinfo=dt.UTC)
    assert tags.immutable_length(content) == len(tags.immutable_tag(content, "sha256:" + "ab" * 32, created))
    target = tags.target("app", verl)
    assert tags.longest_candidate(target, False) == len(tags.candidate_tag(target, "f" * 40))
    assert tags.longest_candidate(target, True) == len(tags.candidate_tag(target, "f" * 40, arch="arm64"))
    assert tags.target("app", verl.name) == target == f"app-{verl.name}"
