"""The verl step program's pure parts: the tiny model, tokenizer and data it makes, the overrides it hands verl's
trainer, the verdicts and the certificate section.

Standard library only, so the host's unit tests (no torch, no verl) and ``--dry-run`` use the same values the
GPU run uses. The torch, transformers and verl work is in assets.py, config.py, engine.py, engine_case.py and
grpo.py beside this file; the tolerance is the kit's (smoke.kit.numerics.verl_logprobs).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcore_images import schemas
from mcore_images.smoke.kit.numerics import Tolerance

SCHEMA = schemas.VERL_STEP
PARTS = ("engine", "grpo")
"""engine: verl's TrainingWorker and Megatron engine, log-probs and one update under each attention backend;
grpo: one GRPO step of verl's trainer (vLLM rollout + the Megatron actor on one GPU)."""
BACKENDS = ("flash", "fused")
"""megatron-core's attention_backend values the engine part runs: verl's default (flash) and cuDNN's (fused)."""
BRIDGES = ("megatron-bridge", "mbridge")
"""How verl's Megatron engine builds the model: Megatron-Bridge (verl 0.9's default, vanilla_mbridge=False) or
mbridge (vanilla_mbridge=True; verl 0.8's default). ``auto`` takes the first that imports."""
BRIDGE_MODULES = {"megatron-bridge": "megatron.bridge", "mbridge": "mbridge"}
VERL_FROM = (0, 9)
"""The oldest verl line whose APIs the program uses. verl 0.8 differs in what a run here meets: it pins
transformers < 5 (whose Qwen2 tokenizer class takes vocabulary files, not the vocabulary itself), its
attention_utils imports FlashAttention 2's padding helpers with no fallback (every Megatron engine batch goes
through them), its engine defaults to mbridge (vanilla_mbridge=True) and its trainer has no ``trainer.use_v1``."""


def verl_problem(version: str) -> str | None:
    """Why the installed verl cannot run the program (None when it can)."""
    parts = version.split(".")
    try:
        major, minor = int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return f"verl {version!r} is not a version this program reads (MAJOR.MINOR…)"
    if (major, minor) < VERL_FROM:
        return (f"verl {version}: the verl step uses verl {VERL_FROM[0]}.{VERL_FROM[1]}'s APIs (transformers 5, "
                "verl's torch fallback for FlashAttention 2's padding helpers); run it in an image with verl "
                f"{VERL_FROM[0]}.{VERL_FROM[1]} or newer")
    return None

# ---------------------------------------------------------------------------------------------
# The tiny model and tokenizer. Qwen2-like (what verl's examples train), small enough to build in seconds,
# shaped so every piece of the run takes its real path: grouped-query attention (2 kv heads for 4), head_dim 64
# (a size vLLM's and TE's attention kernels all take), untied embeddings, a vocabulary of 512 that the
# tokenizer fills exactly (every id vLLM samples decodes).

VOCAB_SIZE = 512
MODEL_CONFIG: dict[str, Any] = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "vocab_size": VOCAB_SIZE,
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 512,
    "rope_theta": 10000.0,
    "rms_norm_eps": 1e-6,
    "hidden_act": "silu",
    "initializer_range": 0.02,
    "tie_word_embeddings": False,
    "use_sliding_window": False,
    "attention_dropout": 0.0,
    "bos_token_id": None,
    "eos_token_id": 2,
    "pad_token_id": 0,
}
"""config.json of the tiny model (the dtype, bfloat16, is added where it is written)."""

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
"""Qwen2's: pad, start of turn, end of turn (the eos): ids 0 to 2."""
PAD, EOS = SPECIAL_TOKENS[0], SPECIAL_TOKENS[2]
WORDS = ("user", "assistant", "system", "say", "a", "number", "near", "n")
"""Words the tokenizer merges whole (the template's roles and the prompts' words), alone and after a space."""
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""ChatML, as Qwen2's tokenizers carry it: verl's dataset and agent loop apply it to every prompt."""
SPACE = "\u0120"
"""How byte-level BPE writes a space (byte 32) in its tokens: Ġ."""


def byte_alphabet() -> list[str]:
    """The 256 symbols byte-level BPE (GPT-2, Qwen2) writes bytes 0-255 as: printable Latin-1 bytes as
    themselves, the others as the code points from 256 up, in byte order."""
    printable = {*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)}
    symbols, shifted = [], 0
    for byte in range(256):
        if byte in printable:
            symbols.append(chr(byte))
        else:
            symbols.append(chr(256 + shifted))
            shifted += 1
    return symbols


def vocabulary() -> tuple[dict[str, int], list[tuple[str, str]]]:
    """The tokenizer's byte-level BPE, VOCAB_SIZE tokens: the specials (ids 0-2), the 256 bytes, the merges that
    spell WORDS (alone and after a space), then lowercase letter pairs until the vocabulary is full. Returns
    (token → id, merges in rank order)."""
    vocab: dict[str, int] = {}
    for token in (*SPECIAL_TOKENS, *byte_alphabet()):
        vocab.setdefault(token, len(vocab))
    merges: list[tuple[str, str]] = []

    def merge(left: str, right: str) -> None:
        if left + right not in vocab and len(vocab) < VOCAB_SIZE:
            merges.append((left, right))
            vocab[left + right] = len(vocab)

    for word in WORDS:
        for spelled in (word, SPACE + word):
            for end in range(2, len(spelled) + 1):
                merge(spelled[: end - 1], spelled[end - 1])
    letters = "abcdefghijklmnopqrstuvwxyz"
    for left in letters:
        for right in letters:
            merge(left, right)
    return vocab, merges


# ---------------------------------------------------------------------------------------------
# The data: verl's RL format, as its examples write it (examples/data_preprocess/gsm8k.py): a chat ``prompt``,
# the ``data_source`` the reward is chosen by, ``ability``, ``reward_model`` with the rule's ground truth, and
# ``extra_info`` with the split and index.

DATA_SOURCE = "mcore-images/verl-step"
SPLITS = {"train": 8, "test": 4}
TARGETS = 1000
"""The prompts ask for a number near nK, K below this (the reward scores the distance: reward.py)."""
"""Rows per split: the GRPO step uses one batch of the train split; verl's trainer also loads the test split."""
COLUMNS = ("data_source", "prompt", "ability", "reward_model", "extra_info")


def rows(split: str, count: int, seed: int) -> list[dict[str, Any]]:
    """``count`` prompts "say a number near nK", each with K as the rule's ground truth (seeded: the same every
    run)."""
    rng = random.Random(f"{seed}:{split}")
    out = []
    for index in range(count):
        target = f"n{rng.randrange(TARGETS)}"
        out.append({
            "data_source": DATA_SOURCE,
            "prompt": [{"role": "user", "content": f"say a number near {target}"}],
            "ability": "toy",
            "reward_model": {"style": "rule", "ground_truth": target},
            "extra_info": {"split": split, "index": index},
        })
    return out


# ---------------------------------------------------------------------------------------------
# Sizes.

MAX_PROMPT_LENGTH = 32
"""Tokens of a prompt after the chat template (the prompts have 12)."""
MAX_RESPONSE_LENGTH = 16
ENGINE_BATCH = {"sequences": 8, "prompt": 24, "response": 16}
"""The engine part's batch: random tokens, left-padded prompts, right-padded responses."""
ENGINE_TOKENS_PER_GPU = {"train": 512, "infer": 1024}
"""verl's dynamic batch sizes for the engine part (every sequence of the batch fits one micro-batch)."""
GRPO = {"prompts": 4, "n": 4, "mini_batch": 4, "micro_batch_per_gpu": 4, "gpu_memory_utilization": 0.4}
"""One GRPO step on one GPU: 4 prompts × 4 samples = 16 trajectories, one mini-batch, micro-batches of 4."""
GRPO_METRICS = ("actor/pg_loss", "actor/grad_norm", "critic/score/mean", "response_length/mean", "timing_s/step")
"""Step metrics verl's trainer logs that the GRPO part requires (present and finite)."""
EXPERIMENT = {"project": "mcore-images", "name": "verl-step"}


@dataclass(frozen=True)
class Paths:
    """Where the program wrote what verl reads, and where verl's trainer writes its metrics."""

    model: Path
    train: Path
    val: Path
    reward: Path
    workdir: Path

    @property
    def metrics(self) -> Path:
        return self.workdir / "metrics.jsonl"

    @property
    def checkpoints(self) -> Path:
        return self.workdir / "checkpoints"


def _quoted(value: Path | str) -> str:
    """A Hydra override value as a quoted string (paths may hold characters Hydra's grammar reads)."""
    text = str(value)
    if any(c in text for c in "'\\\n"):
        raise ValueError(f"{text!r} holds a quote, backslash or newline: use a folder without them")
    return f"'{text}'"


def grpo_overrides(paths: Paths, bridge: str, attention_backend: str, n_gpus: int = 1) -> list[str]:
    """The command-line overrides of ``python -m verl.trainer.main_ppo`` for one GRPO step of the tiny model on
    ``n_gpus`` GPUs of one node: the Megatron actor (and its reference, for the KL loss) built through ``bridge``
    with ``attention_backend``, vLLM rollout in the same GPUs (verl's hybrid engine), the rule reward of
    reward.py, metrics to the console and to ``paths.metrics`` (verl's file logger)."""
    if bridge not in BRIDGES:
        raise ValueError(f"unknown bridge {bridge!r}: use one of {', '.join(BRIDGES)}")
    if attention_backend not in BACKENDS:
        raise ValueError(f"unknown attention backend {attention_backend!r}: use one of {', '.join(BACKENDS)}")
    actor = "actor_rollout_ref.actor"
    return [
        "model_engine=megatron",
        "algorithm.adv_estimator=grpo",
        "algorithm.use_kl_in_reward=False",
        f"data.train_files={_quoted(paths.train)}",
        f"data.val_files={_quoted(paths.val)}",
        f"data.train_batch_size={GRPO['prompts']}",
        f"data.max_prompt_length={MAX_PROMPT_LENGTH}",
        f"data.max_response_length={MAX_RESPONSE_LENGTH}",
        "data.filter_overlong_prompts=True",
        "data.truncation=error",
        "data.dataloader_num_workers=0",
        f"actor_rollout_ref.model.path={_quoted(paths.model)}",
        f"{actor}.strategy=megatron",
        f"{actor}.ppo_mini_batch_size={GRPO['mini_batch']}",
        f"{actor}.ppo_micro_batch_size_per_gpu={GRPO['micro_batch_per_gpu']}",
        f"{actor}.use_kl_loss=True",
        f"{actor}.kl_loss_coef=0.001",
        f"{actor}.kl_loss_type=low_var_kl",
        f"{actor}.entropy_coeff=0",
        f"{actor}.megatron.tensor_model_parallel_size=1",
        f"{actor}.megatron.pipeline_model_parallel_size=1",
        f"{actor}.megatron.use_mbridge=True",
        f"{actor}.megatron.vanilla_mbridge={bridge == 'mbridge'}",
        f"{actor}.megatron.override_transformer_config.attention_backend={attention_backend}",
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        f"actor_rollout_ref.rollout.gpu_memory_utilization={GRPO['gpu_memory_utilization']}",
        "actor_rollout_ref.rollout.enforce_eager=True",
        f"actor_rollout_ref.rollout.n={GRPO['n']}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={GRPO['micro_batch_per_gpu']}",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={GRPO['micro_batch_per_gpu']}",
        f"reward.custom_reward_function.path={_quoted(paths.reward)}",
        "reward.custom_reward_function.name=compute_score",
        "reward.num_workers=1",
        "trainer.logger=[console,file]",
        f"trainer.project_name={EXPERIMENT['project']}",
        f"trainer.experiment_name={EXPERIMENT['name']}",
        "trainer.nnodes=1",
        f"trainer.n_gpus_per_node={n_gpus}",
        "trainer.total_epochs=1",
        "trainer.total_training_steps=1",
        "trainer.val_before_train=False",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        "trainer.resume_mode=disable",
        f"trainer.default_local_dir={_quoted(paths.checkpoints)}",
        f"+ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH={_quoted(paths.metrics)}",
    ]


def grpo_command(python: str, overrides: Iterable[str]) -> list[str]:
    """verl's trainer as users launch it: its module, its default config (ppo_trainer), our overrides."""
    return [python, "-m", "verl.trainer.main_ppo", *overrides]


# ---------------------------------------------------------------------------------------------
# Which verl path runs, and what it needs from FlashAttention.

TE_NO_BACKEND = "No dot product attention backend is available"
"""What TE raises at the first attention forward when the NVTE variables megatron-core's attention_backend set
allow no backend it has (flash with no FlashAttention installed: src/mcore_images/catalogue/flash_attention.py)."""
NO_FLASH_IN_IMAGE = "no-flash-attention-in-image"
"""The flash case's expected refusal: TE found no FlashAttention, as this image ships none (TE's flash backend was
measured wrong on an H200 with a FlashAttention 4 that was right called directly: catalogue/flash_attention.py holds
the facts)."""
CASE_STATUSES = ("passed", "failed", NO_FLASH_IN_IMAGE, "not-run")


def te_has_flash(view: Mapping[str, str | None]) -> bool:
    """Whether TE saw any FlashAttention (its FlashAttentionUtils: fa2, fa3, fa4 versions, None where absent)."""
    return any(view.get(k) for k in ("fa2", "fa3", "fa4"))


def flash_refusal(error: str | None, te_flash: Mapping[str, str | None] | None) -> str | None:
    """Why a failed flash case is the expected refusal (None when it is a failure): TE raised its no-backend
    error and TE itself found no FlashAttention installed."""
    if not error or TE_NO_BACKEND not in error or te_flash is None or te_has_flash(te_flash):
        return None
    return (f"{NO_FLASH_IN_IMAGE}: attention_backend=flash lets TE use only FlashAttention, and TE found none "
            "(FlashAttention 2, 3 and 4 not installed), so it raised \"No dot product attention backend is "
            "available\"; this image ships no FlashAttention (src/mcore_images/catalogue/flash_attention.py)")


# ---------------------------------------------------------------------------------------------
# Verdicts.


def logprob_delta(a: list[list[float]], b: list[list[float]], mask: list[list[int]]) -> dict[str, float]:
    """max and mean |a − b| over the positions ``mask`` marks (1), and how many; inf where a value is not finite
    (a NaN never passes)."""
    deltas = []
    for row_a, row_b, row_m in zip(a, b, mask, strict=True):
        for x, y, keep in zip(row_a, row_b, row_m, strict=True):
            if keep:
                deltas.append(abs(x - y) if math.isfinite(x) and math.isfinite(y) else math.inf)
    if not deltas:
        return {"max_abs": math.inf, "mean_abs": math.inf, "tokens": 0}
    return {"max_abs": max(deltas), "mean_abs": sum(deltas) / len(deltas), "tokens": len(deltas)}


def judge_logprobs(delta: Mapping[str, float], max_logit: float, tol: Tolerance) -> dict[str, Any]:
    """The check of one log-prob comparison: max|Δ log p| / max|logit| against the tolerance."""
    limit = tol.logprob_rtol * max_logit
    ok = math.isfinite(delta["max_abs"]) and delta["tokens"] > 0 and delta["max_abs"] <= limit
    return {**delta, "max_logit": max_logit, "limit": limit, "ok": bool(ok)}


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def judge_update(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The update ran: a finite loss and a finite, positive grad norm."""
    loss, grad = metrics.get("loss"), metrics.get("grad_norm")
    ok = _finite(loss) and _finite(grad) and grad > 0
    return {"loss": loss, "grad_norm": grad, "ok": bool(ok)}


def _rel(value: Any, ref: Any) -> float:
    if not (_finite(value) and _finite(ref)):
        return math.inf
    return abs(value - ref) / abs(ref) if ref else (0.0 if value == ref else math.inf)


def judge_case(case: dict[str, Any], tol: Tolerance) -> dict[str, Any]:
    """One backend's record with its status: the expected refusal, a failure, or passed (log-probs within the
    tolerance of the fp32 reference and the update ran)."""
    if case.get("error"):
        refusal = flash_refusal(case["error"], case.get("te_flash")) if case["backend"] == "flash" else None
        status, reason = (NO_FLASH_IN_IMAGE, refusal) if refusal else ("failed", f"{case.get('stage')}: "
                                                                                  f"{case['error']}")
        return {**case, "status": status, "reason": reason}
    checks = {"logprobs_vs_reference": judge_logprobs(case["vs_reference"], case["max_logit"], tol),
              "update": judge_update(case.get("update") or {})}
    backend = str(case.get("te_backend") or "")
    selected = backend.startswith(f"te {case['backend']}")
    checks["te_selected"] = {"wanted": case["backend"], "selected": backend, "ok": selected}
    failed = [name for name, check in checks.items() if not check["ok"]]
    return {**case, "checks": checks, "status": "failed" if failed else "passed",
            "reason": f"failed: {', '.join(failed)}" if failed else None}


def agreement(cases: Mapping[str, dict[str, Any]], tol: Tolerance) -> dict[str, Any]:
    """flash against fused: log-probs within the tolerance, and the update's loss and grad norm; not compared
    (with why) unless both ran."""
    flash, fused = cases.get("flash"), cases.get("fused")
    if not flash or not fused or flash.get("error") or fused.get("error"):
        why = [f"{name} {(c or {}).get('status', 'not run')}" for name, c in (("flash", flash), ("fused", fused))
               if not c or c.get("error")]
        return {"compared": False, "ok": True, "reason": f"not compared: {', '.join(why)}"}
    delta = logprob_delta(flash["logprobs"], fused["logprobs"], fused["response_mask"])
    lp = judge_logprobs(delta, fused["max_logit"], tol)
    loss = _rel((flash.get("update") or {}).get("loss"), (fused.get("update") or {}).get("loss"))
    grad = _rel((flash.get("update") or {}).get("grad_norm"), (fused.get("update") or {}).get("grad_norm"))
    ok = lp["ok"] and loss <= tol.loss_rtol and grad <= tol.grad_norm_rtol
    return {"compared": True, "ok": bool(ok), "logprobs": lp, "loss_rel": loss, "grad_norm_rel": grad,
            "reason": None if ok else "flash and fused disagree beyond the tolerance"}


def engine_status(cases: Mapping[str, dict[str, Any]], agreed: Mapping[str, Any]) -> tuple[str, str | None]:
    """passed when fused passed, flash passed or refused as expected, and the two agree where both ran."""
    bad = [f"{name}: {c.get('reason')}" for name, c in cases.items() if c["status"] not in ("passed",
                                                                                             NO_FLASH_IN_IMAGE)]
    if "fused" not in cases or cases["fused"]["status"] != "passed":
        bad.append("the fused case did not pass")
    if not agreed.get("ok"):
        bad.append(str(agreed.get("reason")))
    return ("failed", "; ".join(dict.fromkeys(bad))) if bad else ("passed", None)


def judge_grpo(rc: int | None, steps: list[dict[str, Any]]) -> tuple[str, str | None, dict[str, Any]]:
    """(status, reason, step 1's metrics) of the trainer run: exit 0 and step 1 logged with every required
    metric finite."""
    metrics = next((s.get("data") or {} for s in steps if s.get("step") == 1), {})
    if rc != 0:
        return "failed", f"python -m verl.trainer.main_ppo exited {rc}", metrics
    if not metrics:
        return "failed", "verl's trainer logged no step 1", metrics
    missing = [k for k in GRPO_METRICS if not _finite(metrics.get(k))]
    if missing:
        return "failed", f"step 1 lacks finite {', '.join(missing)}", metrics
    return "passed", None, metrics


def overall(parts: Mapping[str, dict[str, Any]], error: str | None) -> tuple[str, int]:
    """The program's status and exit code: could not run (2) before anything ran, failed (1), passed (0)."""
    if error:
        return "could-not-run", 2
    if any(p.get("status") == "failed" for p in parts.values()):
        return "failed", 1
    if any(p.get("status") == "could-not-run" for p in parts.values()):
        return "could-not-run", 2
    return "passed", 0


# ---------------------------------------------------------------------------------------------
# The report and the certificate section.


def new_report(command: list[str], parts: Iterable[str], tol: Tolerance) -> dict[str, Any]:
    return {"schema": SCHEMA, "status": "could-not-run", "exit_code": 2, "error": None, "command": list(command),
            "parts": list(parts), "tolerance": tol.to_dict(), "verl": {}, "engine": None, "grpo": None,
            "seconds": None}


def _fmt(value: Any, spec: str = ".4g") -> str:
    return format(value, spec) if _finite(value) else ("–" if value is None else str(value))


def markdown(section: dict[str, Any]) -> list[str]:
    """The section as Markdown lines for certificate.md."""
    verl = section.get("verl") or {}
    lines = ["", f"## verl step: {section['status'].upper()} (exit {section['exit_code']})", ""]
    if section.get("error"):
        lines += [f"**Error:** {section['error']}", ""]
    lines.append(f"- verl {verl.get('version', '–')}, {verl.get('worker', '–')} → {verl.get('engine', '–')}, "
                 f"bridge {verl.get('bridge', '–')}; padding helpers: {verl.get('padding', '–')}")
    for item in verl.get("flash_attn_imports") or []:
        lines.append(f"- verl imports `{item['module']}` in {item['where']} ({item['how']})")
    lines.append(f"- Tolerance: {(section.get('tolerance') or {}).get('why', '–')}")
    engine = section.get("engine")
    if engine:
        header = "| attention_backend | status | TE selected | max \\|Δ log p\\| vs fp32 | limit | loss | grad norm |"
        lines += ["", f"### Engine: {engine['status']}" + (f" — {engine['reason']}" if engine.get("reason") else ""),
                  "", header, "|---|---|---|---|---|---|---|"]
        for name, case in (engine.get("cases") or {}).items():
            check = (case.get("checks") or {}).get("logprobs_vs_reference") or {}
            update = case.get("update") or {}
            status = case["status"] if case["status"] == "passed" else f"{case['status']}: {case.get('reason')}"
            lines.append(f"| {name} | {status} | {case.get('te_backend') or '–'} | {_fmt(check.get('max_abs'), '.3g')}"
                         f" | {_fmt(check.get('limit'), '.3g')} | {_fmt(update.get('loss'))} | "
                         f"{_fmt(update.get('grad_norm'))} |")
        agreed = engine.get("agreement") or {}
        if agreed.get("compared"):
            lines.append(f"\nflash vs fused: max|Δ log p| {_fmt(agreed['logprobs']['max_abs'], '.3g')} (limit "
                         f"{_fmt(agreed['logprobs']['limit'], '.3g')}), loss {_fmt(agreed['loss_rel'], '.2e')}, "
                         f"grad norm {_fmt(agreed['grad_norm_rel'], '.2e')} relative")
        else:
            lines.append(f"\nflash vs fused: {agreed.get('reason', '–')}")
    grpo = section.get("grpo")
    if grpo:
        lines += ["", f"### GRPO step: {grpo['status']}" + (f" — {grpo['reason']}" if grpo.get("reason") else ""), ""]
        metrics = grpo.get("metrics") or {}
        shown = [k for k in GRPO_METRICS if k in metrics]
        if shown:
            lines += ["| " + " | ".join(shown) + " |", "|" + "---|" * len(shown),
                      "| " + " | ".join(_fmt(metrics[k]) for k in shown) + " |"]
    return lines
