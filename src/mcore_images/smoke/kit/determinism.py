"""Deterministic settings for the smoke's repeated dp baseline: the same run twice must give bitwise-equal
losses and grad norms (megatron-core's ``deterministic_mode``; Megatron-LM's ``--deterministic-mode``).

What each setting removes:
- ``NVTE_ALLOW_NONDETERMINISTIC_ALGO=0``: Transformer Engine's fused attention picks a backward without
  atomics (megatron-core refuses ``deterministic_mode`` with TE attention otherwise);
- ``CUBLAS_WORKSPACE_CONFIG=:4096:8``: cuBLAS's split-K reductions in a fixed order (read when its
  handle is created, so set before torch loads);
- ``NCCL_ALGO=Ring``: one reduction order for every all-reduce size (NVLS and tree orders differ);
- ``torch.use_deterministic_algorithms``: index_add, scatter and embedding backward without atomics
  (megatron's MoE unpermute relies on it); ``warn_only`` so an op without a deterministic kernel warns
  rather than ends the run — the bitwise comparison then shows what it cost.
Pure Python until ``apply_to_torch``.
"""

from __future__ import annotations

import os
from typing import Any

ENV = {"NVTE_ALLOW_NONDETERMINISTIC_ALGO": "0", "CUBLAS_WORKSPACE_CONFIG": ":4096:8", "NCCL_ALGO": "Ring"}
CONFIG = {"deterministic_mode": True}
"""TransformerConfig settings of a deterministic run."""


def settle(enabled: bool) -> dict[str, Any]:
    """Set the environment before torch, TE and NCCL load; returns what the certificate records."""
    if enabled:
        os.environ.update(ENV)
    return {"enabled": enabled, "env": {k: os.environ.get(k) for k in ENV} if enabled else {},
            "config": dict(CONFIG) if enabled else {}, "torch_deterministic_algorithms": enabled}


def apply_to_torch(enabled: bool) -> None:
    if enabled:
        import torch

        torch.use_deterministic_algorithms(True, warn_only=True)
