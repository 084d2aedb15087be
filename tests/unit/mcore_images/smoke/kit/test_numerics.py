"""The math a run uses and the tolerances built on it: stated, strict, and TF32 handled on purpose."""

from __future__ import annotations

import math
import os

import pytest

from mcore_images.smoke.kit import numerics
from mcore_images.smoke.kit.numerics import Math, bridge, parity, rel_delta, settle, spread, verl_logprobs


@pytest.fixture(autouse=True)
def _restore_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NVIDIA_TF32_OVERRIDE", raising=False)


def test_parity_tolerances_are_stated_and_strict() -> None:
    bf16 = parity(settle("bf16", "cuda"))
    fp32 = parity(settle("fp32", "cpu"))
    assert bf16.loss_rtol == 2.0**-8 and bf16.grad_norm_rtol == 2.0**-7
    assert fp32.loss_rtol == 1e-5 and fp32.grad_norm_rtol == 1e-4
    assert "summation order" in bf16.why
    assert bf16.to_dict()["math"] == "bf16" and bf16.to_dict()["loss_rtol"] == 2.0**-8


def test_verl_log_prob_tolerance_is_twice_the_bridges_logit_bound() -> None:
    """log p = z_t - logsumexp(z) moves by at most twice the largest logit error: 16u in bf16."""
    bf16 = verl_logprobs(settle("bf16", "cuda"))
    assert bf16.logprob_rtol == 2 * bridge(settle("bf16", "cuda")).logits_rtol == 16 * 2.0**-8
    assert bf16.loss_rtol == parity(settle("bf16", "cuda")).loss_rtol
    assert bf16.grad_norm_rtol == parity(settle("bf16", "cuda")).grad_norm_rtol
    assert verl_logprobs(settle("fp32", "cpu")).logprob_rtol == 2e-4
    assert "max|logit|" in bf16.why and bf16.to_dict()["logprob_rtol"] == 0.0625


def test_fp32_on_a_gpu_turns_tf32_off_before_torch_loads() -> None:
    m = settle("fp32", "cuda")
    assert m.math == "fp32" and os.environ["NVIDIA_TF32_OVERRIDE"] == "0"
    assert bridge(m).logits_rtol == 1e-4


def test_allowed_tf32_is_judged_with_tf32s_roundoff() -> None:
    m = settle("fp32", "cuda", allow_tf32=True)
    assert m.math == "tf32" and "NVIDIA_TF32_OVERRIDE" not in os.environ
    tol = bridge(m)
    # The H200's fp32 bridge check with TF32 measured 4.6e-4 and 5.4e-4: within TF32's bound, far above fp32's.
    assert tol.logits_rtol == pytest.approx(8 * 2.0**-11)
    assert tol.logits_rtol > 5.4e-4 and bridge(Math("fp32", "fp32", "")).logits_rtol < 5.4e-4
    assert parity(m).loss_rtol == 2.0**-11


def test_cpu_never_uses_tf32() -> None:
    assert settle("fp32", "cpu", allow_tf32=True).math == "fp32"


def test_unknown_dtype_is_refused() -> None:
    with pytest.raises(ValueError, match="bf16 or fp32"):
        settle("fp16", "cuda")


def test_ratios_never_let_a_nan_pass() -> None:
    assert rel_delta(math.nan, 1.0) == math.inf and rel_delta(1.0, 0.0) == math.inf
    assert numerics.guarded_ratio(0.0, 0.0) == 0.0
    assert spread([2.0, 2.0, 2.002]) == pytest.approx(1e-3)
