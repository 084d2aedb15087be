"""The attention check's tensors: inputs, the fp32 reference, the plain bf16 PyTorch attention, and each backend's
forward and backward on the same bf16 inputs.

Imported only when the check runs (it imports torch). TE's backends run through TE's own DotProductAttention —
the layer megatron-core's TEDotProductAttention wraps, with the qkv_format and mask type megatron-core passes
(``causal``; ``padding_causal`` with cu_seqlens for thd) — under the NVTE variables megatron-core sets for each
attention_backend. TE keeps its last choice in module state and chooses again only when the inputs change, so each
run clears it first; its debug log (logger ``DotProductAttention``) is captured for the reason a backend is not
available. megatron-core's own attention needs its parallel state (one rank); FlashAttention 4 is called through
flash_attn.cute.interface.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from collections.abc import Callable, Iterator
from typing import Any

import torch

from mcore_images.smoke.attention import table
from mcore_images.smoke.attention.cases import Backend, Case
from mcore_images.smoke.kit import seeds
from mcore_images.smoke.kit import transformer_engine as te_kit

BF16 = torch.bfloat16
FAULTS = ("noncausal", "perturb")
"""Planted faults (the check must fail them): the backend drops the causal mask; its output is perturbed by 5 % of
its largest value."""


class Unavailable(Exception):
    """The backend cannot run here (TE selects none for these variables, nothing installed): not a failure."""


def inputs(case: Case, device: torch.device, seed: int) -> dict[str, torch.Tensor]:
    """q, k, v and the output gradient, bf16, in the case's layout (drawn on the CPU: the same numbers everywhere)."""
    gen = torch.Generator().manual_seed(seed)
    if case.layout == "thd":
        lead: tuple[int, ...] = (case.cu_seqlens[-1],)
    elif case.layout == "sbhd":
        lead = (case.max_seqlen, case.batch)
    else:
        lead = (case.batch, case.max_seqlen)

    def draw(heads: int) -> torch.Tensor:
        return torch.randn(*lead, heads, case.head_dim, generator=gen).to(device=device, dtype=BF16)

    return {"q": draw(case.heads), "k": draw(case.groups), "v": draw(case.groups), "dout": draw(case.heads)}


def _sequences(x: torch.Tensor, case: Case) -> list[torch.Tensor]:
    """The case's tensor as [batch, heads, seq, dim] blocks: one block, or one per packed sequence (thd)."""
    if case.layout == "sbhd":
        return [x.permute(1, 2, 0, 3)]
    if case.layout == "bshd":
        return [x.permute(0, 2, 1, 3)]
    cu = case.cu_seqlens
    return [x[cu[i]:cu[i + 1]].permute(1, 0, 2).unsqueeze(0) for i in range(len(case.seqlens))]


def _back(blocks: list[torch.Tensor], case: Case) -> torch.Tensor:
    if case.layout == "sbhd":
        return blocks[0].permute(2, 0, 1, 3)
    if case.layout == "bshd":
        return blocks[0].permute(0, 2, 1, 3)
    return torch.cat([b.squeeze(0).permute(1, 0, 2) for b in blocks])


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, case: Case, causal: bool = True) -> torch.Tensor:
    """Scaled dot-product attention written out in the tensors' own dtype (each product, the softmax and p·v rounded
    to it): q scaled first, key/value heads repeated for GQA, the causal mask on every (packed) sequence."""
    scale = 1.0 / math.sqrt(case.head_dim)
    blocks = []
    for qs, ks, vs in zip(_sequences(q, case), _sequences(k, case), _sequences(v, case), strict=True):
        repeat = case.heads // case.groups
        ks, vs = ks.repeat_interleave(repeat, dim=1), vs.repeat_interleave(repeat, dim=1)
        scores = (qs * scale) @ ks.transpose(-1, -2)
        if causal:
            n = scores.shape[-1]
            future = torch.ones(n, n, dtype=torch.bool, device=scores.device).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
        blocks.append(torch.softmax(scores, dim=-1) @ vs)
    return _back(blocks, case)


Tensors = dict[str, torch.Tensor]


def _fwd_bwd(run: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor], data: dict[str, torch.Tensor],
             dtype: torch.dtype, fault: str | None = None) -> Tensors:
    """out, dq, dk, dv of ``run`` on leaf copies of the inputs in ``dtype``, as fp32 tensors in the case's layout."""
    q, k, v = (data[n].detach().to(dtype).requires_grad_() for n in ("q", "k", "v"))
    out = run(q, k, v).reshape(data["dout"].shape)
    if fault == "perturb":
        seed = seeds.data_seed("attention-fault", seeds.DEFAULT_SEED)
        noise = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed)).to(out.device, out.dtype)
        out = out + 0.05 * out.detach().abs().max() * noise
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), data["dout"].to(dtype))
    return {"out": out.detach().float(), "dq": dq.float(), "dk": dk.float(), "dv": dv.float()}


def reference(case: Case, data: dict[str, torch.Tensor]) -> tuple[Tensors, Tensors]:
    """The fp32 reference and the plain bf16 PyTorch attention on the same inputs."""
    return (_fwd_bwd(lambda q, k, v: attend(q, k, v, case), data, torch.float32),
            _fwd_bwd(lambda q, k, v: attend(q, k, v, case), data, BF16))


def errors(got: Tensors, ref: Tensors, bf16: Tensors) -> dict[str, tuple[float, float, float]]:
    """Per tensor: (max |got − ref|, max |bf16 − ref|, max |ref|)."""
    return {name: (float((got[name] - ref[name]).abs().max()), float((bf16[name] - ref[name]).abs().max()),
                   float(ref[name].abs().max())) for name in table.TENSORS}


@contextlib.contextmanager
def nvte(variables: dict[str, str] | None) -> Iterator[None]:
    """The NVTE variables megatron-core would set, for the duration of one run."""
    saved = {name: os.environ.get(name) for name in variables or {}}
    os.environ.update(variables or {})
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class TeLog(logging.Handler):
    """Collects TE's attention debug lines ("Disabling FlashAttention 4 for …", "Selected backend = …")."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def reasons(self) -> str:
        found = list(dict.fromkeys(line for line in self.lines if line.startswith("Disabling")))
        return "; ".join(found[:8]) or "TE logged no reason"


def te_log() -> TeLog:
    """Capture TE's backend selection log (its level follows NVTE_DEBUG, read at import: raised here)."""
    from transformer_engine.pytorch.attention.dot_product_attention import utils as dpa_utils

    handler = TeLog()
    logger = logging.getLogger("DotProductAttention")
    logger.addHandler(handler)
    logger.propagate = False
    if hasattr(dpa_utils, "AttentionLogging"):
        dpa_utils.AttentionLogging._log_level = logging.DEBUG
    return handler


def te_selected() -> str:
    """What TE's DotProductAttention chose on its last call, as the attention table names it."""
    choice = te_kit.attention_choice()
    if choice is None:
        return "none"
    kind, detail = choice
    return {"flash": f"FlashAttention {detail}", "fused": f"cuDNN fused ({detail})", "unfused": "TE unfused"}[kind]


def run_te(backend: Backend, case: Case, data: dict[str, torch.Tensor], log: TeLog,
           fault: str | None) -> tuple[Tensors, str]:
    """TE's DotProductAttention under the backend's NVTE variables: (tensors, the backend TE selected)."""
    import transformer_engine.pytorch as te
    from transformer_engine.pytorch.attention.dot_product_attention import _attention_backends

    causal = fault != "noncausal"
    thd = case.layout == "thd"
    mask = ("padding_causal" if causal else "padding") if thd else ("causal" if causal else "no_mask")
    extra: dict[str, Any] = {}
    if thd:
        cu = torch.tensor(case.cu_seqlens, dtype=torch.int32, device=data["q"].device)
        extra = {"cu_seqlens_q": cu, "cu_seqlens_kv": cu, "max_seqlen_q": case.max_seqlen,
                 "max_seqlen_kv": case.max_seqlen}
    with nvte(backend.variables):
        _attention_backends["attention_params"] = None  # choose again under these variables
        layer = te.DotProductAttention(case.heads, case.head_dim, num_gqa_groups=case.groups, attention_dropout=0.0,
                                       qkv_format=case.layout, attn_mask_type=mask)
        log.lines.clear()
        try:
            tensors = _fwd_bwd(lambda q, k, v: layer(q, k, v, **extra), data, BF16, fault)
        except ValueError as exc:
            if "No dot product attention backend" not in str(exc):
                raise
            raise Unavailable(f"TE selects no backend: {log.reasons()}") from None
    return tensors, te_selected()


def run_local(case: Case, data: dict[str, torch.Tensor], fault: str | None) -> tuple[Tensors, str]:
    """megatron-core's own DotProductAttention (attention_backend=local), bf16 with its defaults."""
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from megatron.core.transformer.enums import AttnMaskType
    from megatron.core.transformer.transformer_config import TransformerConfig

    config = TransformerConfig(num_layers=1, hidden_size=case.heads * case.head_dim, num_attention_heads=case.heads,
                               num_query_groups=case.groups, kv_channels=case.head_dim, bf16=True,
                               params_dtype=BF16, attention_dropout=0.0, hidden_dropout=0.0)
    mask = AttnMaskType.causal if fault != "noncausal" else AttnMaskType.no_mask
    layer = DotProductAttention(config, layer_number=1, attn_mask_type=mask, attention_type="self")
    return _fwd_bwd(lambda q, k, v: layer(q, k, v, attention_mask=None), data, BF16, fault), \
        "megatron-core DotProductAttention"


def run_sdpa(case: Case, data: dict[str, torch.Tensor], fault: str | None) -> tuple[Tensors, str]:
    """torch.nn.functional.scaled_dot_product_attention in bf16, on each (packed) sequence, GQA by enable_gqa."""
    causal = fault != "noncausal"

    def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        blocks = [torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, is_causal=causal,
                                                                   enable_gqa=case.heads != case.groups)
                  for qs, ks, vs in zip(_sequences(q, case), _sequences(k, case), _sequences(v, case), strict=True)]
        return _back(blocks, case)

    return _fwd_bwd(run, data, BF16, fault), f"torch {torch.__version__} SDPA"


def run_fa4(case: Case, data: dict[str, torch.Tensor], fault: str | None) -> tuple[Tensors, str]:
    """FlashAttention 4 called directly: flash_attn_func (bshd; sbhd transposed to it) or flash_attn_varlen_func."""
    try:
        from flash_attn.cute.interface import flash_attn_func, flash_attn_varlen_func
    except Exception as exc:  # not installed, or its CuTe DSL does not load: recorded, not failed
        raise Unavailable(f"flash_attn.cute.interface does not import: {exc}".splitlines()[0][:300]) from None
    causal = fault != "noncausal"

    def first(result: Any) -> torch.Tensor:
        return result[0] if isinstance(result, tuple) else result

    def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if case.layout == "thd":
            cu = torch.tensor(case.cu_seqlens, dtype=torch.int32, device=q.device)
            return first(flash_attn_varlen_func(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu,
                                                max_seqlen_q=case.max_seqlen, max_seqlen_k=case.max_seqlen,
                                                causal=causal))
        if case.layout == "sbhd":
            q, k, v = (t.transpose(0, 1).contiguous() for t in (q, k, v))
            return first(flash_attn_func(q, k, v, causal=causal)).transpose(0, 1)
        return first(flash_attn_func(q, k, v, causal=causal))

    from importlib.metadata import version

    return _fwd_bwd(run, data, BF16, fault), f"flash-attn-4 {version('flash-attn-4')}"
