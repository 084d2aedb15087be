"""verl's default attention setting, megatron-core's attention_backend=flash (NVTE_FLASH_ATTN=1 NVTE_FUSED_ATTN=0
NVTE_UNFUSED_ATTN=0), as the doctor's te.attention judges it from TE's own view of the installed FlashAttention: where
the stack pins one, it passes, and a negative image without FlashAttention 4 fails it (and the kernels layer's check
of TE's view); where the stack pins none (none is known right on its GPUs), it fails in one line naming
attention_backend=fused."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.image.kernels import test_kernels
from tests.image.utils import negatives
from tests.image.utils.negatives import Negative

from mcore_images.catalogue import components

DOCTOR = ("NVTE_FLASH_ATTN=1 NVTE_FUSED_ATTN=0 NVTE_UNFUSED_ATTN=0 "
          "python -m mcore_images doctor --only te.attention --json")
"""The variables megatron-core sets for attention_backend=flash, then the doctor's check."""


def _pinned(labels: dict[str, str]) -> str:
    return labels.get(components.BY_KEY["flash_attn"].oci_label, "none")


def test_without_flash_attention_the_doctor_names_fused_for_attention_backend_flash(labels: dict[str, str],
                                                                                     host: Any) -> None:
    """A stack that ships no FlashAttention (none is known right on its GPUs: rule flash-attn-measured): under
    attention_backend=flash the doctor fails in one line that says the first forward has no backend and names
    attention_backend=fused (cuDNN). Its negative is test_the_doctor_finds_a_backend_for_attention_backend_flash,
    which fails here."""
    if _pinned(labels) != "none" or labels.get(components.BY_KEY["te"].oci_label) in (None, "none"):
        pytest.skip("the stack pins a FlashAttention (or has no TE)")
    result = host.run(DOCTOR)
    finding = json.loads(result.stdout)["findings"][0]
    assert result.rc == 1 and finding["status"] == "fail", finding
    assert "No dot product attention backend is available" in finding["finding"], finding
    assert "attention_backend=fused" in finding["finding"] and "attention_backend=fused" in finding["fix"], finding


def test_the_doctor_finds_a_backend_for_attention_backend_flash(labels: dict[str, str], host: Any) -> None:
    if _pinned(labels) == "none":
        pytest.skip("the stack pins no FlashAttention: attention_backend=flash has no backend here (rule "
                    "flash-attn-measured; the doctor names attention_backend=fused)")
    result = host.run(DOCTOR)
    finding = json.loads(result.stdout)["findings"][0]
    assert result.rc == 0 and finding["status"] == "ok", finding
    assert f"FlashAttention {_pinned(labels)}" in finding["finding"], finding


NO_FLASH_ATTENTION = Negative(
    "no-flash-attention", "RUN PIP_CONSTRAINT= python -m pip uninstall -q -y flash-attn-4\n",
    skip=lambda u: "the stack pins no FlashAttention" if _pinned(u.image.labels) == "none" else None)


@pytest.mark.negatives(NO_FLASH_ATTENTION)
def test_negative_without_flash_attention_the_doctor_and_tes_view_fail(
        negative_images: negatives.NegativeImages) -> None:
    rc, failed, output = negatives.failures(negative_images.ref(NO_FLASH_ATTENTION),
                                            test_the_doctor_finds_a_backend_for_attention_backend_flash,
                                            test_kernels.test_te_sees_the_labelled_flash_attention)
    expected = {"test_the_doctor_finds_a_backend_for_attention_backend_flash",
                "test_te_sees_the_labelled_flash_attention"}
    assert rc == 1 and expected <= failed, f"exit {rc}, failed {sorted(failed)}:\n{output[-3000:]}"
