"""Which math a run computes in, and every tolerance built on it, each with the reason for its value.

A run asks for a dtype (bf16 on GPUs, fp32 for the CPU runs and fp32 checks); the math its GEMMs really
use can differ: on NVIDIA GPUs cuBLAS, cuDNN and Transformer Engine run fp32 matrix products as TF32
(10-bit mantissa) unless told not to. Measured on one H200: the bridge check in fp32 compared Megatron's
logits with transformers' at 4.6e-4 / 5.4e-4 of the largest logit — TF32's roundoff, not a defect — and
at ~5e-7 with ``NVIDIA_TF32_OVERRIDE=0``. So ``settle`` decides the math before torch loads: an fp32 run on
a GPU turns TF32 off (then the fp32 tolerance holds), unless TF32 is allowed, and then the TF32 tolerance
is what applies. Pure Python until ``apply_to_torch``: host tests and dry runs quote the same numbers.
"""

from __future__ import annotations

import math as _math
import os
from dataclasses import dataclass
from typing import Any

UNIT_ROUNDOFF = {"bf16": 2.0**-8, "tf32": 2.0**-11, "fp32": 2.0**-24}
"""Half an ulp at 1.0: bf16 keeps 8 significant bits, TF32 11, fp32 24."""

TF32_OFF = {"NVIDIA_TF32_OVERRIDE": "0"}
"""Read by cuBLAS, cuBLASLt and cuDNN when they load: no TF32 in any GEMM or convolution of the process."""


@dataclass(frozen=True)
class Math:
    """The dtype a run asked for, the math its GEMMs use, and how that was arranged."""

    dtype: str
    math: str
    how: str

    @property
    def u(self) -> float:
        return UNIT_ROUNDOFF[self.math]

    def to_dict(self) -> dict[str, Any]:
        return {"dtype": self.dtype, "math": self.math, "unit_roundoff": self.u, "how": self.how}


def settle(dtype: str, device: str, allow_tf32: bool = False) -> Math:
    """Decide the math of a run on ``device`` ('cpu' or 'cuda'); call before torch is imported, because an
    fp32 run on a GPU turns TF32 off through the environment the CUDA libraries read when they load."""
    if dtype not in ("bf16", "fp32"):
        raise ValueError(f"unknown dtype {dtype!r}: use bf16 or fp32")
    if dtype == "bf16":
        return Math("bf16", "bf16", "bf16 compute, fp32 accumulation and master weights")
    if device == "cpu":
        return Math("fp32", "fp32", "fp32 on the CPU (no TF32 there)")
    if allow_tf32:
        return Math("fp32", "tf32", "fp32 tensors, GEMMs as TF32 (the CUDA libraries' default; --allow-tf32)")
    os.environ.update(TF32_OFF)
    return Math("fp32", "fp32", "fp32 on the GPU with TF32 off (NVIDIA_TF32_OVERRIDE=0; torch allow_tf32=False)")


def apply_to_torch(m: Math) -> None:
    """torch's own TF32 switches, to agree with ``settle`` (after torch is imported)."""
    import torch

    tf32 = m.math == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32


@dataclass(frozen=True)
class Tolerance:
    """Named relative limits for one program's checks under one math (``tol.loss_rtol``), and why."""

    math: str
    limits: dict[str, float]
    why: str

    def __getattr__(self, name: str) -> float:
        limits = self.__dict__.get("limits") or {}
        if name in limits:
            return limits[name]
        raise AttributeError(name)

    def to_dict(self) -> dict[str, Any]:
        return {"math": self.math, **self.limits, "why": self.why}


def parity(m: Math) -> Tolerance:
    """The smoke's tolerances: step-0 loss and grad norm of every layout against the dp-only run.

    Layouts differ only in the order of floating-point sums: a row-parallel linear adds tp partial
    products (each rounded to the compute dtype) instead of one; a pipeline hands activations over
    unchanged; expert parallelism moves tokens without arithmetic; data parallelism splits the
    per-token loss sum. Each reordering moves a value by about one unit roundoff u, independently per
    element, so the step-0 loss (a mean over every token of the global batch) and the global grad
    norm (a root of a sum of squares over every weight) move by far less than u. We allow u on the
    loss and 2u on the grad norm (bf16: 0.39 % and 0.78 %). Measured on CPU in bf16 (gloo, 2 ranks),
    tp2 moved the loss by 3.0e-4 and the grad norm by 8.3e-5; pp2 and ep2 by < 3e-6. The faults this
    check exists for move them more: tp shards without megatron's split attributes moved the loss
    1.2e-2 and the grad norm 0.21; a pipeline that swapped activations moved the loss 7.2e-3 and the
    grad norm 3.6x. fp32's u (6e-8) is below what GEMMs of different shapes reproduce, so fp32 uses
    floors of 1e-5 and 1e-4 (measured fp32 deltas: <= 1.0e-7). Ranks must agree to 1e-6 relative:
    they hold the same reduced values, so any spread means a rank computed something else. The loss
    must drop by 5 % over the run: every step trains on the same fixed batch, which a working model
    memorises (measured: 8.9 -> 0.1 in 10 steps on one H200).
    """
    loss, grad = max(m.u, 1e-5), max(2 * m.u, 1e-4)
    why = (f"{m.math}: unit roundoff u={m.u:.3g}; layouts differ only in summation order, so step-0 loss "
           f"must match the dp-only run within {loss:.3g} relative and grad norm within {grad:.3g}")
    return Tolerance(m.math, {"loss_rtol": loss, "grad_norm_rtol": grad, "agree_rtol": 1e-6, "min_loss_drop": 0.05},
                     why)


def bridge(m: Math) -> Tolerance:
    """How far Megatron's logits may lie from transformers' on the same weights and tokens.

    The measure is max|Δlogit| / max|logit| over every position and vocabulary entry. The two
    implementations compute the same function; they differ in summation order (fused q/k/v and
    gate/up GEMMs, attention kernels, MoE token permutation) and, in bf16, in where intermediate
    results are rounded to bf16 (TE's fused norm+GEMM rounds once; transformers' RMSNorm casts to
    bf16 before the weight multiply). fp32: unit roundoff u = 6e-8, two layers; measured ≤ 6e-7
    on CPU and ≈ 5e-7 on an H200 with TF32 off, so 1e-4 leaves a 150× margin. bf16 and TF32: the
    logits carry u-relative errors from every GEMM on both sides; measured ≤ 1.1e-2 in bf16 on CPU
    (1.3-1.5 ulps of the largest logit) and 4.6e-4 / 5.4e-4 with TF32 on an H200, so 8u (bf16 3.1e-2,
    TF32 3.9e-3) leaves a 3-7× margin. What the check is for moves it much more: planted faults (k/v
    swapped, norms swapped) gave 0.19-0.92 and real bridge defects 0.26-0.45, in fp32 and bf16 alike.
    The loss (Megatron's training forward vs the cross-entropy of transformers' logits) is a mean
    over every token: 1e-5 in fp32 (measured ≤ 1.2e-7), u otherwise (bf16 measured ≤ 4.3e-4).
    """
    if m.math == "fp32":
        logits, loss = 1e-4, 1e-5
        why = ("fp32: max|Δlogit|/max|logit| ≤ 1e-4 (unit roundoff 6e-8; only summation order differs; measured "
               "≤ 6e-7); mean loss within 1e-5 relative")
    else:
        logits, loss = 8 * m.u, m.u
        why = (f"{m.math}: max|Δlogit|/max|logit| ≤ 8u = {8 * m.u:.3g} (u = {m.u:.3g}; both sides round every "
               f"GEMM at different points); mean loss within u = {m.u:.3g}")
    return Tolerance(m.math, {"logits_rtol": logits, "loss_rtol": loss}, why)


ATTENTION_RATIO = 2.0
"""How many times the error of a plain bf16 PyTorch attention a backend may make (flash-attention's tests: rtol=2)."""
ATTENTION_FLOOR_ULPS = 2.0
"""The floor, in bf16 ulps (2**-7) of the largest reference value (flash-attention's sm90 checks: 2·eps·|ref|)."""


def attention_limit(bf16_error: float, reference_max: float) -> float:
    """The largest |backend − reference| one tensor (output, dq, dk or dv) of an attention backend may show: see
    ``attention``. inf never: a NaN in either input makes the limit NaN, which no error passes."""
    return ATTENTION_RATIO * bf16_error + ATTENTION_FLOOR_ULPS * 2 * UNIT_ROUNDOFF["bf16"] * reference_max


def attention() -> Tolerance:
    """The attention check's tolerance: a backend (FlashAttention, cuDNN fused, TE unfused, megatron-core's own)
    computes bf16 attention, forward and backward, on bf16 inputs; the reference computes the same attention on
    the same inputs in fp32 (TF32 off). A plain bf16 PyTorch attention on those inputs (scaled q·kᵀ, causal mask,
    softmax and p·v, each rounded to bf16, and its autograd backward) makes an error against that reference which
    is what bf16 itself costs on this case. Each of out, dq, dk and dv may be off by at most twice that error plus
    a floor of 2 bf16 ulps of the tensor's largest reference value: flash-attention's own tests judge its kernels
    so (``diff <= 2 * diff_pt + atol``, atol two roundings of the reference to bf16). Measured scale: a kernel
    whose output had nothing to do with attention (FlashAttention 4 under TE on an H200, catalogue.flash_attention
    MEASURED) was off by 3.2 to 4.3. Measured on CPU (bf16, the CPU cases): megatron-core's own attention and
    torch's SDPA were off by 7e-3 to 4.3e-2 against limits of 6.3e-2 to 1.7e-1; planted faults failed every case
    they touched: the causal mask dropped by 2.1 to 6.8, the output perturbed by 5 % of its largest value by 0.57
    to 0.95 (its gradients, untouched, passed)."""
    why = (f"bf16 attention vs an fp32 reference on the same inputs: each of out, dq, dk, dv within "
           f"{ATTENTION_RATIO:g} × the error of a plain bf16 PyTorch attention + {ATTENTION_FLOOR_ULPS:g} bf16 ulps "
           "of the tensor's largest reference value (flash-attention's own rule)")
    return Tolerance("bf16", {"ratio": ATTENTION_RATIO, "floor_ulps": ATTENTION_FLOOR_ULPS}, why)


def verl_logprobs(m: Math) -> Tolerance:
    """How far two computations of the same per-token log-probabilities may lie apart (the verl step program:
    verl's Megatron engine under attention_backend flash and fused, each against transformers in fp32).

    The measure is max|Δ log p| over the response tokens, divided by the reference's max|logit| over the
    positions that predict them. log p = z_t − logsumexp(z), so |Δ log p| ≤ |Δz_t| + max_j |Δz_j| ≤ 2 max|Δz|:
    twice the logit bound of the bridge check (8u of the largest logit, for two bf16 implementations of the
    same model) gives 16u (bf16: 0.0625). Measured on CPU with the program's own tiny Qwen2 and engine batch (seed
    1234, 87 response tokens, max|logit| 1.32): transformers in bf16 against fp32 moved log p by at most 0.0060
    (0.0045 of max|logit|, 1.2u); the fault an attention kernel makes when it ignores the causal mask moved it by
    0.78 (0.59 of max|logit|, 9.5x the limit). fp32 (u = 6e-8, no TF32) keeps the bridge's floor of 1e-4 per
    logit, doubled: 2e-4. The update's loss and grad norm under the two backends differ only through the attention
    kernel's rounding, as the smoke's layouts differ through summation order: the smoke's parity limits (u and 2u)
    apply.
    """
    per_logit = 1e-4 if m.math == "fp32" else 8 * m.u
    limit = 2 * per_logit
    step = parity(m)
    why = (f"{m.math}: max|Δ log p| ≤ {limit:.3g} × max|logit| (log p moves by at most twice the largest logit "
           f"error, {per_logit:.3g} of max|logit| between two {m.math} computations); the update's loss within "
           f"{step.loss_rtol:.3g} and grad norm within {step.grad_norm_rtol:.3g} relative between backends")
    return Tolerance(m.math, {"logprob_rtol": limit, "loss_rtol": step.loss_rtol,
                              "grad_norm_rtol": step.grad_norm_rtol}, why)


UNIT_ROUNDOFF_FP16 = 2.0**-11
"""fp16 keeps 11 significant bits (the gradient-accumulation check's fp16 main_grad)."""


def wgrad_accumulation_bound(depth: int, out: str) -> tuple[float, float]:
    """The gradient-accumulation check's limit, as (gamma, u_out): an element of main_grad after
    ``main_grad += grad_output^T @ input`` may differ from the exact sum (fp64, on the same inputs) by at most
    gamma · (|grad_output|^T |input|) + 2 · u_out · (|main_grad before| + |grad_output^T input|).

    Why: bf16 and fp16 products are exact in fp32 (8 + 8 and 11 + 11 significant bits fit in 24), so a GEMM that
    accumulates in fp32 (apex's cuBLAS call, Transformer Engine's cuBLASLt call, torch's fp32 product) errs only in
    its sums: a sum of ``depth`` terms in any order, split-K included, is within gamma = depth·u/(1 − depth·u) of
    Σ|terms| (Higham, Accuracy and Stability of Numerical Algorithms, §3.1; u = 2**-24). The result then rounds
    once to main_grad's dtype and once more in the add (u_out each: fp32 2**-24, bf16 2**-8, fp16 2**-11). The
    faults it exists for are far outside it: a GEMM that overwrites main_grad instead of adding moves an element by
    the old main_grad (O(1) against a limit of about 1e-4 of the gradient's scale), one that rounds its products
    to bf16 before summing by about 2**-8 of each."""
    u = UNIT_ROUNDOFF["fp32"]
    gamma = depth * u / (1 - depth * u)
    return gamma, {"fp32": u, "bf16": UNIT_ROUNDOFF["bf16"], "fp16": UNIT_ROUNDOFF_FP16}[out]


def guarded_ratio(num: float, den: float) -> float:
    """num / den for comparisons against a tolerance: inf when either is not finite (a NaN never
    passes), 0 for 0/0, inf for x/0."""
    if not (_math.isfinite(num) and _math.isfinite(den)):
        return _math.inf
    if den == 0.0:
        return 0.0 if num == 0.0 else _math.inf
    return num / den


def rel_delta(value: float, ref: float) -> float:
    """|value - ref| / |ref|; inf when either is not finite, so a NaN never passes."""
    if not (_math.isfinite(value) and _math.isfinite(ref)):
        return _math.inf
    return guarded_ratio(abs(value - ref), abs(ref))


def spread(values: list[float]) -> float:
    """Largest relative distance of any value from the first one (how much ranks disagree)."""
    if not values:
        return 0.0
    return max(rel_delta(v, values[0]) for v in values)
