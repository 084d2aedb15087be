"""verl's default attention setting, megatron-core's attention_backend=flash (NVTE_FLASH_ATTN=1 NVTE_FUSED_ATTN=0
NVTE_UNFUSED_ATTN=0), as the doctor's te.attention judges it from TE's own view of the installed FlashAttention: where
the stack pins one, it passes, and a negative image without FlashAttention 4 fails it (and the kernels layer's check
of TE's view); where the stack pins none (none is known right on its GPUs), it fails in one line naming
attention_backend=fused.

Which backend TE picks says nothing of what megatron-core's own (local) attention computes: its numerics are checked
too, on the CPU against torch's scaled_dot_product_attention, so a causal mask dropped from its source (or from a
pyc Python runs instead) fails here."""

from __future__ import annotations

import json
import shlex
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


CAUSAL_PROBE = r"""
import contextlib, os, torch, torch.distributed as dist
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29517", CUDA_VISIBLE_DEVICES="")
dist.init_process_group("gloo", rank=0, world_size=1)
from megatron.core import parallel_state, tensor_parallel
from megatron.core.transformer.dot_product_attention import DotProductAttention
from megatron.core.transformer.enums import AttnMaskType
from megatron.core.transformer.transformer_config import TransformerConfig
parallel_state.initialize_model_parallel(1, 1)
# On the CPU: megatron's buffers and default mask name the "cuda" device, and dropout (off) forks the CUDA RNG.
torch.cuda.current_device = lambda: "cpu"
ones = torch.ones
torch.ones = lambda *a, device=None, **k: ones(*a, **k)
tensor_parallel.get_cuda_rng_tracker().fork = lambda *a, **k: contextlib.nullcontext()
torch.manual_seed(0)
s, b, h, d = 8, 2, 2, 16
config = TransformerConfig(num_layers=1, hidden_size=h * d, num_attention_heads=h, use_cpu_initialization=True,
                           attention_dropout=0.0, hidden_dropout=0.0)
attention = DotProductAttention(config, 1, AttnMaskType.causal, "self").eval()
q, k, v = (torch.randn(s, b, h, d) for _ in range(3))
out = attention(q, k, v, attention_mask=None, attn_mask_type=AttnMaskType.causal)
ref = torch.nn.functional.scaled_dot_product_attention(*(t.permute(1, 2, 0, 3) for t in (q, k, v)), is_causal=True)
print((out - ref.permute(2, 0, 1, 3).reshape(s, b, h * d)).abs().max().item())
"""
"""Runs in the image: megatron-core's local DotProductAttention (causal, fp32, no dropout) on a tiny shape, and the
largest difference from torch's causal scaled_dot_product_attention."""
CAUSAL_TOLERANCE = 1e-5
"""Absolute, fp32: both sides compute the same softmax(QK^T/sqrt(d))V in a different order (seen: ~4e-7); a dropped
mask lets each position see later ones and moves outputs by O(0.1)."""


def test_megatron_core_local_attention_is_causal(host: Any) -> None:
    result = host.run(f"python -c {shlex.quote(CAUSAL_PROBE)}")
    assert result.rc == 0, result.stderr[-2000:]
    difference = float(result.stdout.strip().splitlines()[-1])
    assert difference < CAUSAL_TOLERANCE, f"megatron-core's causal attention differs from torch's by {difference}"


NO_CAUSAL_MASK = Negative(
    "no-causal-mask",
    "RUN f=$(python -c 'import megatron.core.fusions.fused_softmax as m; print(m.__file__)') && "
    "sed -i 's/mask = get_default_causal_mask(sq)/mask = None/' \"$f\" && "
    "! grep -q 'mask = get_default_causal_mask(sq)' \"$f\"\n")
"""megatron-core's fallback softmax without its default causal mask (the path the CPU probe takes)."""


@pytest.mark.negatives(NO_CAUSAL_MASK)
def test_negative_without_the_causal_mask_local_attention_fails(negative_images: negatives.NegativeImages) -> None:
    negatives.fails_only(negative_images.ref(NO_CAUSAL_MASK), "test_megatron_core_local_attention_is_causal",
                         test_megatron_core_local_attention_is_causal)
