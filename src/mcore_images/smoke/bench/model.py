"""Bench reference configs, the model-FLOPs formula and the GPUs' peak rates. Pure Python (no torch).

Model FLOPs of one training step (forward + backward, no activation recomputation counted):

    FLOPs = 6·N·T + 12·L·h·s·T + 6·h·V·T

- T: tokens in the step (micro-batch × micro-batches × seq × data-parallel ranks);
- N: parameters of the transformer layers' matrix multiplies that each token passes through:
  attention q, k, v and output projections (h·(h + 2·kv) + h·h, kv = key/value width), the MLP
  (SwiGLU: 3·h·ffn; plain: 2·h·ffn) or, for MoE, top-k experts' MLPs plus the router (h·E).
  Not counted in N: embeddings (a lookup, no multiply), norms and biases (element-wise), the output
  layer (its own term, below), inactive experts;
- 12·L·h·s·T: attention scores Q·Kᵀ and their product with V, 2·2·s·h per token per layer forward,
  times 3 for forward + backward. **Causal halving is not applied**: every s×s score is counted, as in
  PaLM (Chowdhery et al. 2022, appendix B: 6N + 12·L·H·Q·T per token) and Megatron-LM's papers.
  Causal kernels (TE's fused attention) skip the masked half, so they do less work than this term
  says; ``attention_share`` in the results tells how much of the total this term is;
- 6·h·V·T: the output layer (logits), forward + backward.

MFU = achieved model FLOP/s per GPU ÷ the GPU's dense bf16 peak (table below, vendor datasheets).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from mcore_images.smoke.bench import memory
from mcore_images.smoke.kit.model_size import ModelSize


@dataclass(frozen=True)
class BenchConfig:
    """One reference model (its sizes) and the batch it trains on (per data-parallel rank)."""

    name: str
    size: ModelSize
    micro_batch: int
    micro_batches: int
    family: str = ""  # the published model this shape is taken from, for the record

    def tokens_per_step(self, dp: int = 1) -> int:
        return self.micro_batch * self.micro_batches * self.size.seq * dp

    def flops_terms(self, dp: int = 1) -> dict[str, float]:
        """The formula's three terms for one step on ``dp`` data-parallel ranks."""
        t = self.tokens_per_step(dp)
        size = self.size
        return {
            "dense": 6.0 * size.active_params() * t,
            "attention": 12.0 * size.layers * size.hidden * size.seq * t,
            "logits": 6.0 * size.hidden * size.vocab * t,
        }

    def flops_per_step(self, dp: int = 1) -> float:
        return sum(self.flops_terms(dp).values())

    def predicted_peak_gib(self, *, fp8: bool = False) -> float:
        """Peak memory of one GPU training this config alone (memory.py's formula), in GiB."""
        return memory.peak_bytes(self.size, self.micro_batch, fp8=fp8) / memory.GIB

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, **asdict(self.size), "micro_batch": self.micro_batch,
                "micro_batches": self.micro_batches, "family": self.family,
                "active_params": self.size.active_params(), "total_params": self.size.total_params(),
                "tokens_per_step_per_dp_rank": self.tokens_per_step()}


LLAMA3_8B = ModelSize(layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=128256, seq=8192)
"""Llama-3-8B's shape (Meta's config.json: hidden 4096, 32 heads in 8 key/value groups, SwiGLU 14336, vocabulary
128256, context 8192; untied embedding and output layer)."""
DENSE_8B_MICRO_BATCH = 1
"""One sequence of 8192 tokens per micro-batch: GEMMs of 8192 × 4096 rows are large enough to keep the GPU busy
(dense-1b needed 4 × 4096 tokens for that at hidden 2048), and every sequence more costs activations a layer."""


CONFIGS: dict[str, BenchConfig] = {
    # ~1B GPT (0.96 B parameters with untied embedding and output layer; 0.82 B in N).
    "dense-1b": BenchConfig("dense-1b", ModelSize(layers=16, hidden=2048, heads=16, ffn=5632, vocab=32768, seq=4096),
                            micro_batch=2, micro_batches=4, family="a 1B Llama-style GPT (SwiGLU, RoPE, RMSNorm)"),
    # OLMoE-1B-7B's layer (hidden 2048, 16 heads, 64 experts, top-8, expert ffn 1024, vocab 50304), 4 of its 16
    # layers: the smallest MoE whose expert GEMMs are a real model's (1024 tokens per expert per micro-batch).
    # One micro-batch of 8 sequences (the same 32768 tokens per step as dense-1b): an MoE layer's step is bound
    # by the host (router, permutation, per-expert splits, one launch each) per micro-batch, so 4 micro-batches
    # of 2 left the H200 idle 68-73 % of the step (docs/bench.md).
    "moe-olmoe-4l": BenchConfig("moe-olmoe-4l", ModelSize(layers=4, hidden=2048, heads=16, ffn=1024, vocab=50304,
                                                          seq=4096, experts=64, topk=8, moe_ffn=1024),
                                micro_batch=8, micro_batches=1, family="OLMoE-1B-7B (allenai), 4 of 16 layers"),
    # Small MoE: 8 experts, top-2 (0.17 B active in N, 0.65 B total): kept to compare with earlier results.
    "moe-small": BenchConfig("moe-small", ModelSize(layers=8, hidden=1024, heads=16, ffn=2816, vocab=32768, seq=4096,
                                                    experts=8, topk=2, moe_ffn=2816), micro_batch=8, micro_batches=1),
    # Llama-3-8B's layer, as many layers as fit one H200 with the optimizer and FP8's weight copies (memory.py: the
    # formula, the 10 % kept free), 4 micro-batches of one 8192-token sequence: the same 32768 tokens a step as the
    # others.
    "dense-8b": BenchConfig("dense-8b", dataclasses.replace(LLAMA3_8B, layers=memory.layers_that_fit(
        LLAMA3_8B, DENSE_8B_MICRO_BATCH)), micro_batch=DENSE_8B_MICRO_BATCH, micro_batches=4,
        family="Llama-3-8B (Meta): its layer shape, the layers one H200 holds"),
    # Seconds-long shapes for CPU runs of the bench code (tests), not for numbers; tiny-gqa has the 8B's four query
    # heads per key/value group.
    "tiny": BenchConfig("tiny", ModelSize(layers=2, hidden=64, heads=4, ffn=128, vocab=256, seq=32),
                        micro_batch=2, micro_batches=2),
    "tiny-gqa": BenchConfig("tiny-gqa", ModelSize(layers=2, hidden=64, heads=8, kv_heads=2, ffn=224, vocab=256, seq=32),
                            micro_batch=2, micro_batches=2),
    "tiny-moe": BenchConfig("tiny-moe", ModelSize(layers=2, hidden=64, heads=4, ffn=128, vocab=256, seq=32, experts=4,
                                                  topk=2, moe_ffn=64), micro_batch=2, micro_batches=2),
}
DEFAULT_CONFIGS = ("dense-1b", "moe-olmoe-4l")


@dataclass(frozen=True)
class Variant:
    """A named set of TransformerConfig settings the bench trains with, and why it exists."""

    name: str
    settings: dict[str, object]
    why: str
    ce_fusion: bool = False
    dispatcher: str | None = None  # the MoE token dispatcher its settings need (--dispatcher), if any
    grouped_gemm: bool = False  # MoE experts in one grouped GEMM (TE's GroupedLinear; the TE spec's MoE rows all do)


# What Megatron-LM's training scripts turn on by default (megatron/training/arguments.py: --no-bias-swiglu-fusion,
# --no-bias-dropout-fusion, --no-masked-softmax-fusion, --no-rope-fusion, --no-persist-layer-norm and
# --no-gradient-accumulation-fusion are the switches to turn them off), and RMSNorm as Llama-style models use.
FUSIONS: dict[str, object] = {
    "normalization": "RMSNorm", "bias_activation_fusion": True, "bias_dropout_fusion": True,
    "masked_softmax_fusion": True, "apply_rope_fusion": True, "persist_layer_norm": True,
    # MoE: Transformer Engine's fused token permutation and router (--moe-permute-fusion, --moe-router-fusion)
    "moe_permute_fusion": True, "moe_router_fusion": True,
}
# Megatron-LM's --moe-expert-capacity-factor 1.0 --moe-pad-expert-input-to-capacity: every expert takes exactly its
# share of the tokens (the excess dropped, a shortfall padded), so the per-expert split sizes are known on the host
# without copying token counts from the GPU: the step stops waiting on that device-to-host sync. megatron-core
# pads only in the alltoall (and flex) dispatcher. The FLOPs are the dropless model's: the same tokens per expert.
DROP_PAD: dict[str, object] = {"moe_expert_capacity_factor": 1.0, "moe_pad_expert_input_to_capacity": True}
TE_MOE_KERNELS = ("moe_permute_fusion", "moe_router_fusion")
MOE_ONLY = (*TE_MOE_KERNELS, *DROP_PAD)
VARIANTS: dict[str, Variant] = {v.name: v for v in (
    Variant("defaults", {}, "megatron-core's TransformerConfig defaults: LayerNorm, every fusion off"),
    Variant("fusions", FUSIONS, "Megatron-LM's default fusions and RMSNorm, no gradient-accumulation fusion"),
    Variant("production", {**FUSIONS, "gradient_accumulation_fusion": True},
            "how Megatron-LM trains by default: the fusions, RMSNorm, gradient-accumulation fusion"),
    Variant("production+ce", {**FUSIONS, "gradient_accumulation_fusion": True}, "production plus the fused "
            "cross-entropy (an option in Megatron-LM, --cross-entropy-loss-fusion)", ce_fusion=True),
    Variant("fusions+drop-pad", {**FUSIONS, **DROP_PAD}, "MoE: the fusions, experts at capacity factor 1.0 padded to "
            "capacity (no device-to-host sync per layer; tokens over capacity dropped); needs --dispatcher alltoall",
            dispatcher="alltoall"),
    Variant("dropless", FUSIONS, "MoE as Megatron-LM trains it without a capacity: every token reaches its top-k "
            "experts, in one grouped GEMM (TE's GroupedLinear), with TE's fused permutation and router, through the "
            "alltoall dispatcher; needs --dispatcher alltoall", dispatcher="alltoall", grouped_gemm=True),
)}
DEFAULT_VARIANTS = ("production",)


def resolve_variant(variant: Variant, *, moe: bool, te: bool, cpu: bool, wgrad_fusion: bool
                    ) -> tuple[dict[str, object], list[str]]:
    """The variant's settings this model and environment can run, and each one dropped with its reason (the
    result records them: a number is never reported under a name it did not run with). ``wgrad_fusion``: a
    ``fused_weight_gradient_mlp_cuda`` that runs on this run's device imports here (train.gradient_accumulation_fusion
    decides it)."""
    settings = {k: v for k, v in variant.settings.items() if moe or k not in MOE_ONLY}
    dropped = []
    if not te:
        for key in TE_MOE_KERNELS:
            if settings.pop(key, False):
                dropped.append(f"{key} (Transformer Engine's kernel)")
    if moe and variant.grouped_gemm and not te:
        dropped.append("moe_grouped_gemm (Transformer Engine's GroupedLinear; the local spec's needs the grouped_gemm "
                       "package)")
    if variant.ce_fusion:
        settings.update(cross_entropy_loss_fusion=True, cross_entropy_fusion_impl="te" if te else "native")
    if cpu:
        for key in ("apply_rope_fusion", "persist_layer_norm"):
            if settings.pop(key, False):
                dropped.append(f"{key} (CUDA kernels only)")
    if not wgrad_fusion and settings.pop("gradient_accumulation_fusion", False):
        # TE's linears fuse it themselves, but GPTModel's output layer is megatron's own ColumnParallelLinear,
        # which refuses the setting without the module
        dropped.append("gradient_accumulation_fusion (the output layer needs fused_weight_gradient_mlp_cuda, which "
                       "does not import here or does not run on this device)")
    if not te:
        if settings.pop("apply_rope_fusion", False):
            dropped.append("apply_rope_fusion (Transformer Engine's fused RoPE)")
        if settings.pop("persist_layer_norm", False):
            dropped.append("persist_layer_norm (apex's persistent LayerNorm; the local spec's torch norm refuses it)")
    return settings, dropped


GRAPH_IMPLS: dict[str, str] = {"local": "local", "te": "transformer_engine"}
"""``--cuda-graphs`` names → megatron-core's ``cuda_graph_impl``: its own capture (``CudaGraphManager``: each layer
recorded in the first step, captured at its end by the schedule) or Transformer Engine's ``make_graphed_callables``
(``TECudaGraphHelper``, which the training loop calls after its warm-up steps, as Megatron-LM's does)."""
GRAPHED_MOE_SCOPE = ["attn"]
"""What is captured of an MoE layer: its attention. A dropless expert part moves a different number of tokens every
step, which a graph cannot replay (megatron-core refuses an ``moe`` scope without drop-and-pad); dense layers are
captured whole (megatron-core's default scope)."""
GRAPH_LOSS_RTOL = 0.01
"""A graphed row's training loss over the timed steps must stay within 1 % (relative, mean over the steps) of the
eager row's from the same weights and batches. A graph replays the kernels the eager step ran, on the same inputs,
so only a different choice of GEMM algorithm at capture separates them (nothing measured yet); a graph that replays
stale inputs trains on the wrong batches, and bf16's loss falls about 2 % a step early on (37 % over 20 steps on
dense-1b), so one stale step moves the mean by more than this. A fifth of FP8's limit (``FP8_LOSS_RTOL``)."""
ATTENTION_BACKENDS = ("auto", "fused", "unfused", "flash")
"""``--attention-backend``: megatron-core's ``attention_backend`` for the TE rows (it sets TE's NVTE variables from
it: catalogue/flash_attention.py MEGATRON_SETS). ``auto`` lets TE choose; ``local`` is the local spec."""


def graph_settings(impl: str, *, moe: bool, te: bool) -> dict[str, object]:
    """TransformerConfig settings of a graphed row (Megatron-LM turns TE's RNG tracker on for graphs of TE layers)."""
    settings: dict[str, object] = {"cuda_graph_impl": GRAPH_IMPLS[impl], "use_te_rng_tracker": te}
    if moe:
        settings["cuda_graph_scope"] = list(GRAPHED_MOE_SCOPE)
    return settings


def row_variant(variant: str, graphs: str | None = None, attention: str = "auto") -> str:
    """The variant a row is recorded and gated under: the settings' name, then the graph capture and the attention
    backend where they are not the default (``production+ce+graphs-te``, ``fusions+attn-unfused``)."""
    name = variant + (f"+graphs-{graphs}" if graphs else "")
    return name + (f"+attn-{attention}" if attention != "auto" else "")


@dataclass(frozen=True)
class Precision:
    """The compute format of the GEMMs: bf16, or FP8 through Transformer Engine with one scaling recipe."""

    name: str
    settings: dict[str, object]
    why: str

    @property
    def fp8(self) -> bool:
        return bool(self.settings)


PRECISIONS: dict[str, Precision] = {p.name: p for p in (
    Precision("bf16", {}, "bf16 GEMMs, fp32 master weights and reductions"),
    Precision("fp32", {}, "fp32 throughout: CPU runs of the bench code (tests), no numbers"),
    # Delayed scaling: amax history of 1024 steps, scale from its maximum (NeMo's and Megatron-LM's FP8 recipes).
    Precision("fp8-delayed", {"fp8": "hybrid", "fp8_recipe": "delayed", "fp8_amax_history_len": 1024,
                              "fp8_amax_compute_algo": "max"},
              "FP8 (E4M3 forward, E5M2 backward), delayed per-tensor scaling"),
    Precision("fp8-tensorwise", {"fp8": "hybrid", "fp8_recipe": "tensorwise"},
              "FP8 (E4M3 forward, E5M2 backward), current per-tensor scaling"),
)}
FP8_LOSS_RTOL = 0.05
"""FP8's training loss over the timed steps must stay within 5 % (relative, mean over the steps) of bf16's from
the same initialisation and batches. Measured on one H200 (dense-1b, 3 + 20 steps, the loss falling 9.9 → 6.2):
FP8 followed bf16's curve 1.8 % (delayed) and 0.95 % (tensorwise) higher, about half a step behind, as FP8's
rounding slows learning a little. 5 % is a lag of about two steps there; a broken recipe (an overflowed amax, a
stale scale) stalls or diverges, and bf16's loss fell 37 % over those 20 steps."""


PEAK_BF16_TFLOPS: tuple[tuple[str, float, str], ...] = (
    # (pattern matched against torch.cuda.get_device_name(), dense bf16 TFLOP/s, source). First match wins,
    # so the specific variants come before the family. Datasheets quote "with sparsity" figures
    # twice as high; these are the dense ones.
    (r"H100.*PCIe", 756.0, "NVIDIA H100 datasheet, H100 PCIe: 1513 TFLOPS bf16 with sparsity"),
    (r"H100.*NVL", 835.0, "NVIDIA H100 datasheet, H100 NVL: 1671 TFLOPS bf16 with sparsity"),
    (r"H200.*NVL", 835.0, "NVIDIA H200 datasheet, H200 NVL: 1671 TFLOPS bf16 with sparsity"),
    (r"H100|H800", 989.0, "NVIDIA H100 datasheet, H100 SXM: 1979 TFLOPS bf16 with sparsity"),
    (r"H200|GH200", 989.0, "NVIDIA H200 datasheet, H200 SXM: 1979 TFLOPS bf16 with sparsity"),
    (r"A100|A800", 312.0, "NVIDIA A100 datasheet: 312 TFLOPS bf16 dense (624 with sparsity)"),
    (r"GB200", 2500.0, "NVIDIA GB200 NVL72 datasheet: 5 PFLOPS fp16/bf16 per GPU with sparsity"),
    (r"B200", 2250.0, "NVIDIA HGX B200 datasheet: 4.5 PFLOPS fp16/bf16 per GPU with sparsity"),
)


def peak_tflops(gpu_name: str) -> tuple[float | None, str]:
    """(dense bf16 peak TFLOP/s, source) for a GPU name; (None, why) for GPUs not in the table."""
    for pattern, peak, source in PEAK_BF16_TFLOPS:
        if re.search(pattern, gpu_name, re.IGNORECASE):
            return peak, source
    return None, f"no dense bf16 peak known for {gpu_name!r}: MFU not computed (add it to PEAK_BF16_TFLOPS)"


def throughput(cfg: BenchConfig, step_s: float, world: int, dp: int, peak: float | None) -> dict[str, float | None]:
    """tokens/s, TFLOP/s per GPU and MFU for one step time (seconds) over ``world`` GPUs."""
    flops = cfg.flops_per_step(dp)
    terms = cfg.flops_terms(dp)
    tflops = flops / step_s / world / 1e12
    return {
        "tokens_per_s": cfg.tokens_per_step(dp) / step_s,
        "tflops_per_gpu": tflops,
        "mfu": tflops / peak if peak else None,
        "flops_per_step": flops,
        "attention_share": terms["attention"] / flops,
    }


def median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def mean_relative_difference(loss: list[float], reference: list[float]) -> float:
    """Σ|loss − reference| / Σ|reference| over the steps both have."""
    pairs = list(zip(loss, reference, strict=False))
    return sum(abs(a - b) for a, b in pairs) / max(sum(abs(b) for _, b in pairs), 1e-30)


def compare_graphs(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each graphed row gets ``vs_eager``: its speed-up in tokens/s over the eager row of the same config, spec,
    variant and precision, and its loss against that row's (limit GRAPH_LOSS_RTOL); None where that row failed."""
    return _compared(
        results, "vs_eager", GRAPH_LOSS_RTOL,
        applies=lambda rec: bool(rec.get("cuda_graphs")),
        is_base=lambda r, rec: (not r.get("cuda_graphs") and r.get("base_variant") == rec.get("base_variant")
                                and all(r.get(k) == rec.get(k)
                                        for k in ("config", "spec", "precision", "attention_asked"))),
        extra=lambda eager: {"eager_step_ms": eager["step_ms_median"]})


def compare_precisions(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each FP8 row gets ``vs_bf16``: its speed-up in tokens/s over the bf16 row of the same config, spec and
    variant, and its loss over the timed steps against that row's (mean relative difference, limit
    FP8_LOSS_RTOL). Both rows start from the same weights and batches, so the loss is comparable step by step."""
    return _compared(
        results, "vs_bf16", FP8_LOSS_RTOL,
        applies=lambda rec: PRECISIONS.get(rec.get("precision", ""), PRECISIONS["bf16"]).fp8,
        is_base=lambda r, rec: (r.get("precision") == "bf16"
                                and all(r.get(k) == rec.get(k) for k in ("config", "spec", "variant"))),
        extra=lambda bf16: {"bf16_loss_last": bf16["loss_last"]})


def _compared(results: list[dict[str, Any]], key: str, rtol: float, *, applies: Callable[[dict[str, Any]], bool],
              is_base: Callable[[dict[str, Any], dict[str, Any]], bool],
              extra: Callable[[dict[str, Any]], dict[str, Any]]) -> list[dict[str, Any]]:
    """``results`` with ``key`` on each passed row ``applies`` picks: its speed-up and loss against the first passed
    row ``is_base`` pairs it with (None where there is none), and ``extra`` facts of that row. The one way every
    variant is weighed against its plain twin."""
    out = []
    for rec in results:
        if not applies(rec) or rec.get("status") != "ok":
            out.append(rec)
            continue
        base = next((r for r in results if r.get("status") == "ok" and is_base(r, rec)), None)
        if base is None:
            out.append({**rec, key: None})
            continue
        loss_rel = mean_relative_difference(rec["loss"], base["loss"])
        out.append({**rec, key: {
            "speedup": rec["tokens_per_s"] / base["tokens_per_s"], "loss_rel": loss_rel, "loss_rtol": rtol,
            "loss_ok": loss_rel <= rtol, **extra(base),
        }})
    return out
