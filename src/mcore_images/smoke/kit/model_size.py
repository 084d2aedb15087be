"""A GPT's sizes, written once: the smoke's small model (layouts.py), the bench's reference models (bench/model.py)
and the one builder (gpt_builder.py) all hold a ``ModelSize``. Pure Python (no torch).

The parameter counts are the bench's model-FLOPs terms (bench/model.py says the formula): the matrix multiplies a
token passes through (``active_params``), and every parameter for the record (``total_params``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class ModelSize:
    """Layers, widths, vocabulary and sequence length of one GPT; with ``experts``, its MoE layers' too."""

    layers: int
    hidden: int
    heads: int
    ffn: int
    vocab: int
    seq: int
    experts: int = 0  # 0: dense
    topk: int = 0
    moe_ffn: int = 0
    kv_heads: int | None = None  # None: multi-head attention (kv heads = heads)
    gated: bool = True  # SwiGLU

    @property
    def moe(self) -> bool:
        return self.experts > 0

    def dense(self) -> ModelSize:
        """The same model with dense MLPs in place of its MoE layers."""
        return dataclasses.replace(self, experts=0, topk=0, moe_ffn=0)

    @property
    def kv_width(self) -> int:
        return (self.kv_heads or self.heads) * (self.hidden // self.heads)

    def mlp_params(self, ffn: int) -> int:
        return (3 if self.gated else 2) * self.hidden * ffn

    def attention_params(self) -> int:
        h = self.hidden
        return h * (h + 2 * self.kv_width) + h * h

    def active_params_per_layer(self) -> int:
        """Matrix-multiply parameters one token passes through in one layer (N / layers)."""
        if self.moe:
            mlp = self.topk * self.mlp_params(self.moe_ffn) + self.hidden * self.experts
        else:
            mlp = self.mlp_params(self.ffn)
        return self.attention_params() + mlp

    def active_params(self) -> int:
        """N of the bench's formula."""
        return self.layers * self.active_params_per_layer()

    def total_params(self) -> int:
        """Every parameter, for the record: all experts, embeddings, output layer, norms (untied)."""
        h = self.hidden
        mlp = self.experts * self.mlp_params(self.moe_ffn) + h * self.experts if self.moe else self.mlp_params(self.ffn)
        per_layer = self.attention_params() + mlp + 2 * h  # two norms' weights
        return self.layers * per_layer + 2 * self.vocab * h + h  # embedding, output layer, final norm
