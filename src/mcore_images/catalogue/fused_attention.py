"""TE's cuDNN fused attention as measured on GPUs: which TE release, with which cuDNN, ran it right.

megatron-core's default ``attention_backend`` (auto) lets TE select its cuDNN fused attention wherever a shape allows,
and so does ``fused`` (what the images tell verl users to set while no FlashAttention is right under TE). TE's core
library calls cuDNN's graph API through the cuDNN frontend it was built with, so whether that attention runs depends
on the pair of TE release and cuDNN release, not on either alone: TE 2.17.1's raised at its first forward with cuDNN
9.19.0 on sm_90 where TE 2.20.2's ran right on the same machine and cuDNN. The rule ``te-fused-attention`` refuses a
stack whose pair was measured failing on a GPU it serves; the note ``te-fused-attention-unmeasured`` names a pair no
measurement speaks for, with the command that measures it. Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

RIGHT, RAISES, WRONG = "right", "raises", "wrong"
"""A measurement's verdict: every case within the attention check's tolerance; an error at the first forward; an
output outside the tolerance."""

MEASURE_COMMAND = "docs/verl-step.md, 'On a GPU' (the replica's smoke runs the attention check)"
"""How the next measurement of a stack's pair is made."""
MEASURABLE_SM = 90
"""The architecture of the GPUs lent for measuring (H100, H200): a pair unmeasured there is noted; on the others a
stack serves, no measurement can be made yet and docs/stacks.md says so once."""


@dataclass(frozen=True)
class FusedMeasurement:
    """TE ``te``'s cuDNN fused attention with cuDNN ``cudnn`` on ``sm``, against the fp32 reference of the smoke's
    attention check (python -m mcore_images.smoke.attention: every case, forward and backward)."""

    te: str
    cudnn: str
    sm: int
    verdict: str
    date: str
    setting: str
    command: str
    evidence: str
    """The attention section the check wrote, in this repository."""
    detail: str


_H200 = ("one H200 (driver 580.159), host Python 3.12.3, torch 2.11.0+cu130 with its cuDNN 9.19.0 (nvidia-cudnn-cu13 "
         "9.19.0.56)")

MEASURED: tuple[FusedMeasurement, ...] = (
    FusedMeasurement(
        te="2.17.1", cudnn="9.19.0.56", sm=90, verdict=RAISES, date="2026-12-06", setting=_H200,
        command=".ci/image-env-replica.sh locks cuda DIR, stash, install, run DIR python -m mcore_images.smoke "
                "(the cuda stack at 50d7c45)",
        evidence="docs/measurements/2026-12-06-cuda-replica/attention.json",
        detail="fused and auto raised on every case at the first forward: fused_attn_f16_arbitrary_seqlen.cu:934, "
               "cuDNN Error setting CUDNN_ATTR_OPERATION_RESHAPE_MODE (CUDNN_STATUS_BAD_PARAM); unfused, "
               "megatron-core's own attention and SDPA passed",
    ),
    FusedMeasurement(
        te="2.20.2", cudnn="9.19.0.56", sm=90, verdict=RIGHT, date="2026-12-06", setting=_H200,
        command='PAIR_SET="te2.20-b36-c4.8.1 te2.20-b40-c4.8.1" bash .ci/gpu/attention-pairs.sh (at 50d7c45)',
        evidence="docs/measurements/2026-12-06-attention-pairs/te2.20-b36-c4.8.1.json",
        detail="fused and auto (which selected cuDNN's fused attention) passed every case",
    ),
    FusedMeasurement(
        te="2.18.0", cudnn="9.19.0.56", sm=90, verdict=RIGHT, date="2026-12-06",
        setting="one H100 80GB HBM3 (driver 580.159), host Python 3.12.3, torch 2.11.0+cu130 with its cuDNN 9.19.0 "
                "(nvidia-cudnn-cu13 9.19.0.56)",
        command='bash .ci/gpu/replica-stack.sh all build/replica-cuda "$OUT/b" smoke verl-step (the cuda stack at '
                "c3e5527)",
        evidence="docs/measurements/2026-12-06-cuda-replica-te2.18/attention.json",
        detail="fused and auto (which selected cuDNN's fused attention) passed every case; largest output error "
               "0.117 of its limit",
    ),
)
"""Every TE × cuDNN fused attention measurement on a GPU, oldest first."""


def measurement(te: str, cudnn: str, sm: int) -> FusedMeasurement | None:
    """The newest measurement of exactly this pair on ``sm`` (None: none speaks for it)."""
    found = [m for m in MEASURED if (m.te, m.cudnn, m.sm) == (te, cudnn, sm)]
    return found[-1] if found else None


def others(cudnn: str, sm: int) -> list[FusedMeasurement]:
    """Measurements of other TE releases with this cuDNN on ``sm``: what a note about an unmeasured pair cites."""
    return [m for m in MEASURED if m.cudnn == cudnn and m.sm == sm]
