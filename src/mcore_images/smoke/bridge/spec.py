"""The bridge check's pure parts: tiny Hugging Face configs, checkpoint layouts, verdicts.

Standard library only, so the host's unit tests (no torch) and ``python -m mcore_images.smoke.bridge --dry-run``
can use them. src/mcore_images/smoke/bridge/run.py does the torch work with what is defined here; the logit and
loss tolerances are the kit's (smoke.kit.numerics.bridge), for the math the run uses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from mcore_images import schemas
from mcore_images.smoke.kit import envinfo
from mcore_images.smoke.kit.numerics import Tolerance, guarded_ratio

SCHEMA = schemas.BRIDGE
BRIDGES = ("mbridge", "megatron-bridge", "verl-mbridge")
"""verl-mbridge is mbridge as verl's Megatron engine takes it (`verl.models.mcore.mbridge`, verl's patches
applied): the path of `actor_rollout_ref.actor.megatron.vanilla_mbridge=True`, where verl converts the HF
config and builds its models."""

# ---------------------------------------------------------------------------------------------
# Tiny models. Small enough for CPU in seconds, large enough that every mapping is exercised:
# grouped-query attention (kv heads < heads, so the per-group q/k/v interleave of the fused
# linear_qkv matters), several layers (layer-index mapping), top-2 of 4 experts (routing).

_COMMON: dict[str, Any] = {
    "vocab_size": 512,
    "hidden_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-6,
    "hidden_act": "silu",
    "attention_dropout": 0.0,
    "initializer_range": 0.02,
    "tie_word_embeddings": False,
    "use_cache": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
}


@dataclass(frozen=True)
class Arch:
    """One architecture the check knows how to write a checkpoint for."""

    name: str  # Hugging Face model_type
    hf_class: str  # config.json "architectures"
    moe: bool
    extra: dict[str, Any] = field(default_factory=dict)

    def config(self) -> dict[str, Any]:
        """config.json of the tiny model (without the dtype, which the run adds)."""
        return {"architectures": [self.hf_class], "model_type": self.name, **_COMMON, **self.extra}


ARCHITECTURES: dict[str, Arch] = {
    a.name: a
    for a in (
        Arch("qwen2", "Qwen2ForCausalLM", moe=False,
             extra={"intermediate_size": 256, "rope_theta": 10000.0, "use_sliding_window": False}),
        Arch("qwen3", "Qwen3ForCausalLM", moe=False,
             extra={"intermediate_size": 256, "rope_theta": 1000000.0, "head_dim": 32, "attention_bias": False,
                    "use_sliding_window": False}),
        Arch("mixtral", "MixtralForCausalLM", moe=True,
             # head_dim given: Hub Mixtral configs omit it, and the pinned mbridge cannot load them (docs/bridge.md)
             extra={"intermediate_size": 96, "rope_theta": 1000000.0, "num_local_experts": 4, "head_dim": 32,
                    "num_experts_per_tok": 2, "router_aux_loss_coef": 0.0, "output_router_logits": False,
                    "sliding_window": None, "router_jitter_noise": 0.0}),
        Arch("qwen2_moe", "Qwen2MoeForCausalLM", moe=True,
             extra={"intermediate_size": 256, "moe_intermediate_size": 64, "shared_expert_intermediate_size": 128,
                    "num_experts": 4, "num_experts_per_tok": 2, "norm_topk_prob": False, "decoder_sparse_step": 1,
                    "mlp_only_layers": [], "router_aux_loss_coef": 0.0, "output_router_logits": False,
                    "rope_theta": 1000000.0, "use_sliding_window": False, "qkv_bias": True}),
        Arch("qwen3_moe", "Qwen3MoeForCausalLM", moe=True,
             extra={"intermediate_size": 256, "moe_intermediate_size": 64, "num_experts": 4,
                    "num_experts_per_tok": 2, "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": [],
                    "router_aux_loss_coef": 0.0, "output_router_logits": False, "rope_theta": 1000000.0,
                    "head_dim": 32, "attention_bias": False, "use_sliding_window": False}),
    )
}

DEFAULT_ARCHS = ("qwen2", "qwen3_moe")
"""Dense and MoE checked by default. Qwen3-MoE is the MoE both bridges register, and the one mbridge converts
faithfully (docs/bridge.md: what mixtral and qwen2_moe showed under the pinned mbridge)."""


def parse_archs(text: str) -> tuple[str, ...]:
    """``qwen2,qwen3_moe`` → names; unknown names raise ValueError listing the known ones."""
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in ARCHITECTURES]
    if unknown or not names:
        raise ValueError(f"unknown architecture(s) {unknown or list(names)}: choose from {', '.join(ARCHITECTURES)} "
                         "(or pass --hf-config FILE for another config.json)")
    return names


# ---------------------------------------------------------------------------------------------
# Checkpoint layouts: tensor names and shapes as the Hugging Face Hub checkpoints of each family
# store them (what both bridges read), independent of how a transformers release lays out its
# modules in memory (transformers 5 fuses experts at load time).


def head_dim(cfg: dict[str, Any]) -> int:
    return int(cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"])


def _attention(cfg: dict[str, Any], prefix: str) -> dict[str, tuple[int, ...]]:
    h, hd = cfg["hidden_size"], head_dim(cfg)
    q, kv = cfg["num_attention_heads"] * hd, cfg.get("num_key_value_heads", cfg["num_attention_heads"]) * hd
    out = {
        f"{prefix}.q_proj.weight": (q, h),
        f"{prefix}.k_proj.weight": (kv, h),
        f"{prefix}.v_proj.weight": (kv, h),
        f"{prefix}.o_proj.weight": (h, q),
    }
    kind = cfg["model_type"]
    # Qwen2 always has q/k/v biases, Qwen2-MoE by qkv_bias; the others by attention_bias (o_proj too).
    qkv_bias = {"qwen2": True, "qwen2_moe": cfg.get("qkv_bias", True)}.get(kind, cfg.get("attention_bias", False))
    if qkv_bias:
        out.update({f"{prefix}.q_proj.bias": (q,), f"{prefix}.k_proj.bias": (kv,), f"{prefix}.v_proj.bias": (kv,)})
    if cfg.get("attention_bias", False) and kind not in ("qwen2", "qwen2_moe"):
        out[f"{prefix}.o_proj.bias"] = (h,)
    if kind in ("qwen3", "qwen3_moe"):
        out.update({f"{prefix}.q_norm.weight": (hd,), f"{prefix}.k_norm.weight": (hd,)})
    return out


def _gated_mlp(prefix: str, hidden: int, inner: int, names: tuple[str, str, str]) -> dict[str, tuple[int, ...]]:
    gate, up, down = names
    return {f"{prefix}.{gate}.weight": (inner, hidden), f"{prefix}.{up}.weight": (inner, hidden),
            f"{prefix}.{down}.weight": (hidden, inner)}


def _is_moe_layer(cfg: dict[str, Any], layer: int) -> bool:
    if cfg["model_type"] == "mixtral":
        return True
    step = cfg.get("decoder_sparse_step", 1)
    return layer not in cfg.get("mlp_only_layers", []) and step > 0 and (layer + 1) % step == 0


def checkpoint_shapes(cfg: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """Every tensor of a checkpoint of this config: Hub name → shape. KeyError for an unknown family."""
    kind = cfg["model_type"]
    if kind not in ARCHITECTURES:
        raise KeyError(kind)
    h, v = cfg["hidden_size"], cfg["vocab_size"]
    out: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,)}
    if not cfg.get("tie_word_embeddings", False):
        out["lm_head.weight"] = (v, h)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}"
        out[f"{p}.input_layernorm.weight"] = (h,)
        out[f"{p}.post_attention_layernorm.weight"] = (h,)
        out.update(_attention(cfg, f"{p}.self_attn"))
        glu = ("gate_proj", "up_proj", "down_proj")
        if kind == "mixtral":
            out[f"{p}.block_sparse_moe.gate.weight"] = (cfg["num_local_experts"], h)
            for e in range(cfg["num_local_experts"]):
                out.update(_gated_mlp(f"{p}.block_sparse_moe.experts.{e}", h, cfg["intermediate_size"],
                                      ("w1", "w3", "w2")))
        elif kind in ("qwen2_moe", "qwen3_moe") and _is_moe_layer(cfg, i):
            out[f"{p}.mlp.gate.weight"] = (cfg["num_experts"], h)
            for e in range(cfg["num_experts"]):
                out.update(_gated_mlp(f"{p}.mlp.experts.{e}", h, cfg["moe_intermediate_size"], glu))
            if kind == "qwen2_moe":
                out.update(_gated_mlp(f"{p}.mlp.shared_expert", h, cfg["shared_expert_intermediate_size"], glu))
                out[f"{p}.mlp.shared_expert_gate.weight"] = (1, h)
        else:
            out.update(_gated_mlp(f"{p}.mlp", h, cfg["intermediate_size"], glu))
    return out


def init_stats(name: str, shape: tuple[int, ...]) -> tuple[float, float]:
    """(mean, std) of a tensor's random values. Norm weights sit at 1 ± 0.1 and biases at ± 0.2 so that
    a norm or bias mapped to the wrong place changes the logits; matrices use 1/√fan_in so activations
    stay O(1) through the layers; the embedding is N(0, 1) and the output layer 2/√hidden (logits of
    std ≈ 2, so a few wrong ones move the maximum)."""
    if len(shape) == 1:
        return (1.0, 0.1) if name.endswith("norm.weight") else (0.0, 0.2)
    if "embed_tokens" in name:
        return 0.0, 1.0
    scale = 2.0 if name == "lm_head.weight" else 1.0
    return 0.0, scale / math.sqrt(shape[-1])


FAULTS: dict[str, tuple[str, str]] = {
    # A q/k/v packing fault: layer 0's k and v projections exchanged (same shape under GQA).
    "swap-kv": ("model.layers.0.self_attn.k_proj.weight", "model.layers.0.self_attn.v_proj.weight"),
    # A norm mapping fault: layer 0's two RMSNorm weights exchanged.
    "swap-norms": ("model.layers.0.input_layernorm.weight", "model.layers.0.post_attention_layernorm.weight"),
}
"""Planted faults (hidden --inject-fault): the bridge reads a checkpoint with these two tensors exchanged,
while transformers and the round-trip comparison use the true one. Each must fail the check."""


def logit_delta(max_abs_diff: float, ref_max_abs: float) -> float:
    """max|Δ| relative to the largest reference logit; inf for non-finite input, so NaN never passes."""
    return guarded_ratio(max_abs_diff, ref_max_abs)


# ---------------------------------------------------------------------------------------------
# Errors, one line each, naming the problem and the fix.


class Unsupported(Exception):
    """The bridge has no conversion for this architecture."""


def unsupported_message(arch: str, hf_class: str, bridge: str, version: str | None, supported: list[str]) -> str:
    listed = ", ".join(sorted(supported)) if supported else "none listed"
    return (f"config conversion failed: architecture {hf_class} (model_type '{arch}') is not supported by "
            f"{bridge} {version or '(unknown version)'}; check model architecture compatibility "
            f"(supported: {listed})")


def mcore_incompatible_message(bridge: str, version: str | None, mcore: str | None, error: str) -> str:
    return (f"{bridge} {version} cannot build models on megatron-core {mcore}: {error} "
            "(ModelType.encoder_and_decoder was removed in megatron-core 0.17; verl #6936); "
            "use a megatron-core older than 0.17 with this mbridge, or Megatron-Bridge")


def known_cause(error: str, bridge: str, version: str | None, packages: dict[str, str | None],
                config: dict[str, Any]) -> str | None:
    """The known incompatibility behind a bridge's exception, with its fix (None when not recognised)."""
    tf = packages.get("transformers") or ""
    tf_major = int(tf.split(".")[0]) if tf.split(".")[0].isdigit() else 0
    if "has no attribute 'rope_theta'" in error and tf_major >= 5:
        return (f"transformers {tf} keeps rope_theta inside config.rope_parameters, and {bridge} {version} reads "
                "config.rope_theta: pin transformers < 5 next to this bridge")
    if "'NoneType' and 'int'" in error and "head_dim" in config and config["head_dim"] is None:
        return (f"config.head_dim is null and {bridge} {version} uses it as given: set head_dim in config.json "
                "(hidden_size / num_attention_heads)")
    return None


HF_PACKAGES = ("transformers", "safetensors")
"""What the check reads and writes Hugging Face checkpoints with: its own needs, not image components."""


def packages() -> dict[str, str | None]:
    """Versions the report records: every component of the catalogue (as the certificate records them), and
    HF_PACKAGES."""
    return {**envinfo.packages(), **{name: envinfo.distribution_version(name) for name in HF_PACKAGES}}


def no_bridge_message() -> str:
    return ("neither mbridge nor Megatron-Bridge (megatron.bridge) imports here: nothing to check; install one "
            "(the image's io.mcore-images.mbridge / io.mcore-images.megatron-bridge labels say which it should carry)")


# ---------------------------------------------------------------------------------------------
# Results and verdict.


def new_result(arch: str, bridge: str, version: str | None, tol: Tolerance) -> dict[str, Any]:
    """One (architecture, bridge) record, filled as the stages complete."""
    return {
        "arch": arch,
        "moe": ARCHITECTURES[arch].moe if arch in ARCHITECTURES else None,
        "hf_class": ARCHITECTURES[arch].hf_class if arch in ARCHITECTURES else None,
        "bridge": bridge,
        "bridge_version": version,
        "status": "could-not-run",
        "passed": False,
        "reason": None,
        "stage": None,
        "roundtrip_exact": None,
        "roundtrip": None,
        "max_logit_diff": None,
        "logit_scale": None,
        "logit_rel_diff": None,
        "tolerance": tol.logits_rtol,
        "loss": None,
        "forward_backward": None,
        "seconds": None,
    }


def judge(result: dict[str, Any], tol: Tolerance) -> list[str]:
    """Every check of one finished record that failed (empty list: passed)."""
    problems = []
    if result["roundtrip_exact"] is not True:
        rt = result["roundtrip"] or {}
        problems.append(
            f"round trip not exact: {len(rt.get('mismatched', []))} tensor(s) differ, "
            f"{len(rt.get('missing', []))} missing from the export, {len(rt.get('extra', []))} extra"
        )
    delta = result["logit_rel_diff"]
    if delta is None or not delta <= tol.logits_rtol:
        problems.append(f"logits differ from transformers by {delta if delta is None else f'{delta:.3g}'} of the "
                        f"largest logit (tolerance {tol.logits_rtol:.3g})")
    fb = result["forward_backward"] or {}
    if not fb.get("ok"):
        problems.append(f"forward-backward: {fb.get('problem', 'did not run')}")
    loss = result["loss"] or {}
    if not loss.get("rel_diff", math.inf) <= tol.loss_rtol:
        problems.append(f"training loss {loss.get('megatron')} vs cross-entropy of transformers' logits "
                        f"{loss.get('transformers')}: {loss.get('rel_diff')} relative (tolerance {tol.loss_rtol:.3g})")
    return problems


def overall(results: list[dict[str, Any]], error: str | None = None) -> tuple[str, int]:
    """(status, exit code): 1 when any record failed, 2 when nothing failed but something could not run
    (or nothing ran at all), else 0."""
    if any(r["status"] == "failed" for r in results):
        return "failed", 1
    if error or not results or any(r["status"] == "could-not-run" for r in results):
        return "could-not-run", 2
    return "passed", 0


def new_report(command: list[str], device: str, dtype: str, tol: Tolerance) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "status": "could-not-run",
        "exit_code": 2,
        "error": None,
        "command": list(command),
        "device": device,
        "dtype": dtype,
        "packages": {},
        "tolerance": tol.to_dict(),
        "architectures": [],
        "seconds": None,
    }


def summary_lines(report: dict[str, Any]) -> list[str]:
    """One human line per record, for stderr and the certificate's Markdown."""
    lines = []
    for r in report["architectures"]:
        head = f"{r['arch']:<10} {r['bridge']} {r['bridge_version'] or ''}".rstrip()
        if r["status"] == "passed":
            lines.append(f"{head}: passed — round trip exact ({r['roundtrip']['tensors']} tensors), "
                         f"logits Δ {r['logit_rel_diff']:.2e} ≤ {r['tolerance']:.1e}, "
                         f"loss {r['loss']['megatron']:.4f}")
        else:
            lines.append(f"{head}: {r['status']} at {r['stage']}: {r['reason']}")
    return lines


def _fmt(value: Any, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)


def markdown(report: dict[str, Any]) -> list[str]:
    """The report as a Markdown section (the smoke certificate renders it under its run table)."""
    lines = ["", f"## Bridge check: {report.get('status', '?').upper()} (exit {report.get('exit_code', '?')})", ""]
    if report.get("error"):
        lines += [f"**Error:** {report['error']}", ""]
    pkgs = report.get("packages") or {}
    names = ("mbridge", "megatron-bridge", "megatron-core", "transformers")
    lines += [
        f"- {report.get('dtype', '?')} on {report.get('device', '?')}; "
        + ", ".join(f"{n} {pkgs.get(n) or '–'}" for n in names),
        f"- Tolerance: {(report.get('tolerance') or {}).get('why', '–')}",
        "",
        "| architecture | bridge | status | round trip | Δlogits / max logit (tol) | loss Megatron / HF |",
        "|---|---|---|---|---|---|",
    ]
    for r in report.get("architectures", []):
        rt = r.get("roundtrip") or {}
        trip = "–" if r.get("roundtrip_exact") is None else (
            f"exact ({rt.get('tensors')} tensors)" if r["roundtrip_exact"] else "NOT exact")
        status = r["status"] if not r.get("reason") else f"{r['status']}: {r['reason']}"
        loss = r.get("loss") or {}
        lines.append(
            f"| {r['arch']} | {r['bridge']} {r.get('bridge_version') or ''} | {status} | {trip} | "
            f"{_fmt(r.get('logit_rel_diff'), '.2e')} ({_fmt(r.get('tolerance'), '.1e')}) | "
            f"{_fmt(loss.get('megatron'), '.5g')} / {_fmt(loss.get('transformers'), '.5g')} |"
        )
    return lines
