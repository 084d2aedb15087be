"""verl's default attention setting has a backend in the image: megatron-core's attention_backend=flash leaves TE
FlashAttention alone (NVTE_FLASH_ATTN=1 NVTE_FUSED_ATTN=0 NVTE_UNFUSED_ATTN=0), and the doctor's te.attention,
which reads TE's own view of the installed FlashAttention, passes. A negative image without FlashAttention 4 fails
it, and the kernels layer's check of TE's view with it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.image.test_negative import failures_on
from tests.image.utils import docker

from mcore_images.catalogue import components

DOCTOR = ("NVTE_FLASH_ATTN=1 NVTE_FUSED_ATTN=0 NVTE_UNFUSED_ATTN=0 "
          "python -m mcore_images doctor --only te.attention --json")
"""The variables megatron-core sets for attention_backend=flash, then the doctor's check."""


def _pinned(labels: dict[str, str]) -> str:
    return labels.get(components.BY_KEY["flash_attn"].oci_label, "none")


def test_the_doctor_finds_a_backend_for_attention_backend_flash(labels: dict[str, str], host: Any) -> None:
    if _pinned(labels) == "none":
        pytest.skip("the stack pins no FlashAttention: attention_backend=flash has no backend here (env/needs.json)")
    result = host.run(DOCTOR)
    finding = json.loads(result.stdout)["findings"][0]
    assert result.rc == 0 and finding["status"] == "ok", finding
    assert f"FlashAttention {_pinned(labels)}" in finding["finding"], finding


def test_negative_without_flash_attention_the_doctor_and_tes_view_fail(image: docker.ImageInfo,
                                                                     labels: dict[str, str]) -> None:
    if _pinned(labels) == "none":
        pytest.skip("the stack pins no FlashAttention")
    rc, failed, output = failures_on(image.ref, "RUN PIP_CONSTRAINT= python -m pip uninstall -q -y flash-attn-4\n",
                                     "no-flash-attention",
                                     "finds_a_backend_for_attention_backend_flash or te_sees_the_labelled")
    expected = {"test_the_doctor_finds_a_backend_for_attention_backend_flash",
                "test_te_sees_the_labelled_flash_attention"}
    assert rc == 1 and expected <= failed, f"exit {rc}, failed {sorted(failed)}:\n{output[-3000:]}"
