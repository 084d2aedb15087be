"""The verl step program's pure parts (no torch, no verl): the tokenizer's vocabulary, the tiny model, the data in
verl's format, the trainer's overrides, the verdicts and the certificate section."""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from mcore_images import jsonfiles, schemas
from mcore_images.catalogue.stacks import load_stacks
from mcore_images.smoke import certificate
from mcore_images.smoke.kit.numerics import Math, verl_logprobs
from mcore_images.smoke.verl_step import spec
from tests.support.certificates import write_certificate

TOL = verl_logprobs(Math("bf16", "bf16", "bf16 compute"))
PATHS = spec.Paths(model=Path("/w/model"), train=Path("/w/data/train.parquet"), val=Path("/w/data/test.parquet"),
                   reward=Path("/src/reward.py"), workdir=Path("/w"))
TE_ERROR = ("ValueError: No dot product attention backend is available for the provided inputs. Please run with "
            "NVTE_DEBUG=1 NVTE_DEBUG_LEVEL=2 to find out the reasons for disabling all backends.")
NO_FA = {"fa2": None, "fa3": None, "fa4": None}


# ---------------------------------------------------------------------------------------------
# Tokenizer and model.


def test_the_vocabulary_fills_the_models_vocabulary_exactly() -> None:
    vocab, _merges = spec.vocabulary()
    assert len(vocab) == spec.VOCAB_SIZE == spec.MODEL_CONFIG["vocab_size"]
    assert sorted(vocab.values()) == list(range(spec.VOCAB_SIZE))  # every id vLLM can sample decodes
    assert [vocab[t] for t in spec.SPECIAL_TOKENS] == [0, 1, 2]
    assert spec.MODEL_CONFIG["pad_token_id"] == vocab[spec.PAD] and spec.MODEL_CONFIG["eos_token_id"] == vocab[spec.EOS]


def test_the_byte_alphabet_covers_every_byte_once() -> None:
    alphabet = spec.byte_alphabet()
    assert len(alphabet) == len(set(alphabet)) == 256
    assert alphabet[ord("a")] == "a" and alphabet[ord(" ")] == spec.SPACE and alphabet[ord("\n")] == "\u010a"


def test_every_merge_joins_tokens_that_exist_before_it() -> None:
    vocab, merges = spec.vocabulary()
    for left, right in merges:
        assert vocab[left] < vocab[left + right] and vocab[right] < vocab[left + right], (left, right)
    for word in spec.WORDS:
        assert word in vocab and spec.SPACE + word in vocab


def test_the_model_is_qwen2_with_grouped_query_attention_and_a_kernel_friendly_head() -> None:
    cfg = spec.MODEL_CONFIG
    assert cfg["model_type"] == "qwen2" and cfg["architectures"] == ["Qwen2ForCausalLM"]
    assert cfg["num_key_value_heads"] < cfg["num_attention_heads"]
    assert cfg["hidden_size"] // cfg["num_attention_heads"] == 64
    assert cfg["tie_word_embeddings"] is False
    assert cfg["max_position_embeddings"] >= spec.MAX_PROMPT_LENGTH + spec.MAX_RESPONSE_LENGTH
    assert spec.ENGINE_BATCH["prompt"] + spec.ENGINE_BATCH["response"] <= cfg["max_position_embeddings"]


@pytest.mark.parametrize(("version", "refused"), [("0.9.1", False), ("0.10.0.dev0", False), ("1.0", False),
                                                ("0.8.0", True), ("0.6.1", True), ("main", True)])
def test_verl_before_0_9_is_refused_naming_what_differs(version: str, refused: bool) -> None:
    problem = spec.verl_problem(version)
    assert (problem is not None) == refused
    if problem and version[0].isdigit():
        assert problem.startswith(f"verl {version}: ") and "transformers 5" in problem


# ---------------------------------------------------------------------------------------------
# Data.


def test_rows_carry_the_columns_verls_dataset_and_reward_read() -> None:
    rows = spec.rows("train", 8, seed=1234)
    assert len(rows) == 8 and all(tuple(r) == spec.COLUMNS for r in rows)
    for index, row in enumerate(rows):
        assert row["data_source"] == spec.DATA_SOURCE
        assert row["prompt"][0]["role"] == "user" and row["reward_model"]["style"] == "rule"
        assert row["prompt"][0]["content"].endswith(row["reward_model"]["ground_truth"])
        assert row["extra_info"] == {"split": "train", "index": index}
    assert json.loads(json.dumps(rows)) == rows


def test_rows_are_the_same_for_a_seed_and_differ_by_split_and_seed() -> None:
    assert spec.rows("train", 8, 1) == spec.rows("train", 8, 1)
    truth = [r["reward_model"]["ground_truth"] for r in spec.rows("train", 8, 1)]
    assert truth != [r["reward_model"]["ground_truth"] for r in spec.rows("test", 8, 1)]
    assert truth != [r["reward_model"]["ground_truth"] for r in spec.rows("train", 8, 2)]


# ---------------------------------------------------------------------------------------------
# The trainer's overrides.


def overrides(bridge: str = "mbridge", backend: str = "fused") -> dict[str, str]:
    return dict(item.split("=", 1) for item in spec.grpo_overrides(PATHS, bridge, backend))


def test_the_grpo_step_runs_the_megatron_actor_with_vllm_on_one_gpu() -> None:
    got = overrides()
    assert got["model_engine"] == "megatron" and got["actor_rollout_ref.actor.strategy"] == "megatron"
    assert got["algorithm.adv_estimator"] == "grpo" and got["actor_rollout_ref.rollout.name"] == "vllm"
    assert got["trainer.n_gpus_per_node"] == "1" and got["trainer.total_training_steps"] == "1"
    assert got["actor_rollout_ref.actor.megatron.override_transformer_config.attention_backend"] == "fused"
    assert got["reward.custom_reward_function.path"] == "'/src/reward.py'"
    assert got["+ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH"] == "'/w/metrics.jsonl'"
    assert "console" in got["trainer.logger"] and "file" in got["trainer.logger"]


@pytest.mark.parametrize(("bridge", "vanilla"), [("mbridge", "True"), ("megatron-bridge", "False")])
def test_the_bridge_is_named_as_verls_vanilla_mbridge_switch(bridge: str, vanilla: str) -> None:
    assert overrides(bridge)["actor_rollout_ref.actor.megatron.vanilla_mbridge"] == vanilla


def test_the_batch_sizes_divide_as_verls_checks_need() -> None:
    trajectories = spec.GRPO["prompts"] * spec.GRPO["n"]
    assert trajectories % spec.GRPO["micro_batch_per_gpu"] == 0
    assert spec.GRPO["mini_batch"] <= spec.GRPO["prompts"] and spec.GRPO["prompts"] <= spec.SPLITS["train"]


def test_bad_names_and_unquotable_paths_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown bridge"):
        spec.grpo_overrides(PATHS, "nemo", "fused")
    with pytest.raises(ValueError, match="unknown attention backend"):
        spec.grpo_overrides(PATHS, "mbridge", "sdpa")
    quoted = spec.Paths(PATHS.model, PATHS.train, PATHS.val, PATHS.reward, Path("/w/it's"))
    with pytest.raises(ValueError, match="quote"):
        spec.grpo_overrides(quoted, "mbridge", "fused")


def test_the_command_is_verls_trainer_module() -> None:
    assert spec.grpo_command("python3", ["a=1"]) == ["python3", "-m", "verl.trainer.main_ppo", "a=1"]


# ---------------------------------------------------------------------------------------------
# Verdicts.


def ran(backend: str, shift: float = 0.0, te: str | None = None, loss: float = 0.5, grad: float = 1.0) -> dict:
    logprobs = [[-6.0 + shift, -6.1 + shift], [-6.2 + shift, 0.0]]
    return {"backend": backend, "error": None, "stage": None, "logprobs": logprobs, "response_mask": [[1, 1], [1, 0]],
            "max_logit": 1.5, "vs_reference": spec.logprob_delta(logprobs, REF, [[1, 1], [1, 0]]),
            "te_backend": te or f"te {backend} (FusedAttnBackend.F16_arbitrary_seqlen)",
            "update": {"loss": loss, "grad_norm": grad}}


REF = [[-6.0, -6.1], [-6.2, 5.0]]


def test_the_expected_refusal_needs_tes_error_and_no_flash_attention() -> None:
    assert spec.flash_refusal(TE_ERROR, NO_FA).startswith(spec.NO_FLASH_IN_IMAGE)
    assert spec.flash_refusal(TE_ERROR, {**NO_FA, "fa4": "4.0.0b36"}) is None  # installed and still refused
    assert spec.flash_refusal("RuntimeError: CUDA error: an illegal memory access", NO_FA) is None
    assert spec.flash_refusal(TE_ERROR, None) is None  # TE's view unknown: not assumed


def test_flash_refused_without_flash_attention_is_named_and_fused_carries_the_part() -> None:
    cases = {"flash": spec.judge_case({"backend": "flash", "error": TE_ERROR, "stage": "log-probs",
                                       "te_flash": NO_FA}, TOL),
             "fused": spec.judge_case(ran("fused"), TOL)}
    assert cases["flash"]["status"] == spec.NO_FLASH_IN_IMAGE and cases["fused"]["status"] == "passed"
    agreed = spec.agreement(cases, TOL)
    assert agreed["compared"] is False and "flash" in agreed["reason"]
    assert spec.engine_status(cases, agreed) == ("passed", None)


def test_any_other_flash_error_or_a_fused_error_fails() -> None:
    other = spec.judge_case({"backend": "flash", "error": "KeyError: 'x'", "stage": "build", "te_flash": NO_FA}, TOL)
    assert other["status"] == "failed" and "build" in other["reason"]
    fused = spec.judge_case({"backend": "fused", "error": TE_ERROR, "stage": "log-probs", "te_flash": NO_FA}, TOL)
    assert fused["status"] == "failed"
    status, reason = spec.engine_status({"flash": other, "fused": fused}, spec.agreement({}, TOL))
    assert status == "failed" and "fused case did not pass" in reason


def test_log_probs_beyond_the_tolerance_or_nan_fail() -> None:
    far = ran("fused", shift=0.2)  # 0.2 > 0.0625 × 1.5
    assert spec.judge_case(far, TOL)["checks"]["logprobs_vs_reference"]["ok"] is False
    near = ran("fused", shift=0.05)
    assert spec.judge_case(near, TOL)["status"] == "passed"
    nan = ran("fused")
    nan["logprobs"][0][0] = math.nan
    nan["vs_reference"] = spec.logprob_delta(nan["logprobs"], REF, nan["response_mask"])
    assert spec.judge_case(nan, TOL)["status"] == "failed"


def test_an_update_without_a_finite_positive_grad_norm_fails() -> None:
    assert spec.judge_case(ran("fused", grad=0.0), TOL)["checks"]["update"]["ok"] is False
    assert spec.judge_case(ran("fused", loss=math.inf), TOL)["status"] == "failed"


def test_a_case_that_te_ran_on_another_backend_fails() -> None:
    case = spec.judge_case(ran("flash", te="te fused (FusedAttnBackend.F16_arbitrary_seqlen)"), TOL)
    assert case["status"] == "failed" and "te_selected" in case["reason"]


def test_flash_and_fused_must_agree_where_both_ran() -> None:
    cases = {"flash": spec.judge_case(ran("flash", shift=0.03), TOL),
             "fused": spec.judge_case(ran("fused", shift=-0.03), TOL)}
    assert spec.agreement(cases, TOL)["ok"] is True  # 0.06 ≤ 0.094
    apart = {"flash": spec.judge_case(ran("flash", shift=0.06), TOL),
             "fused": spec.judge_case(ran("fused", shift=-0.06), TOL)}
    agreed = spec.agreement(apart, TOL)
    assert agreed["compared"] and agreed["ok"] is False
    assert spec.engine_status(apart, agreed)[0] == "failed"
    grads = {"flash": spec.judge_case(ran("flash", grad=1.1), TOL), "fused": spec.judge_case(ran("fused"), TOL)}
    assert spec.agreement(grads, TOL)["ok"] is False


@pytest.mark.parametrize(("rc", "steps", "status", "reason"), [
    (0, [{"step": 1, "data": {k: 0.5 for k in spec.GRPO_METRICS}}], "passed", None),
    (1, [], "failed", "exited 1"),
    (None, [], "failed", "exited None"),
    (0, [], "failed", "logged no step 1"),
    (0, [{"step": 1, "data": {"actor/pg_loss": 0.1}}], "failed", "lacks finite"),
    (0, [{"step": 1, "data": {**{k: 0.5 for k in spec.GRPO_METRICS}, "actor/grad_norm": math.nan}}], "failed",
     "actor/grad_norm"),
])
def test_the_grpo_step_needs_exit_0_and_step_1s_metrics(rc: int | None, steps: list, status: str,
                                                         reason: str | None) -> None:
    got_status, got_reason, _ = spec.judge_grpo(rc, steps)
    assert got_status == status
    assert (got_reason is None) if reason is None else (reason in got_reason)


def test_overall_status_and_exit_codes() -> None:
    assert spec.overall({"engine": {"status": "passed"}, "grpo": {"status": "passed"}}, None) == ("passed", 0)
    assert spec.overall({"engine": {"status": "failed"}, "grpo": {"status": "passed"}}, None) == ("failed", 1)
    assert spec.overall({}, "no GPU") == ("could-not-run", 2)


# ---------------------------------------------------------------------------------------------
# The certificate section.


def section() -> dict[str, Any]:
    report = spec.new_report(["python", "-m", "mcore_images.smoke.verl_step"], spec.PARTS, TOL)
    cases = {"flash": spec.judge_case({"backend": "flash", "error": TE_ERROR, "stage": "log-probs",
                                       "te_flash": NO_FA}, TOL),
             "fused": spec.judge_case(ran("fused"), TOL)}
    agreed = spec.agreement(cases, TOL)
    status, reason = spec.engine_status(cases, agreed)
    report["engine"] = {"status": status, "reason": reason, "cases": cases, "agreement": agreed}
    grpo_status, grpo_reason, metrics = spec.judge_grpo(0, [{"step": 1, "data": {k: 0.25 for k in spec.GRPO_METRICS}}])
    report["grpo"] = {"status": grpo_status, "reason": grpo_reason, "metrics": metrics}
    report["verl"] = {"version": "x", "worker": "verl.workers.engine_workers.TrainingWorker", "bridge": "mbridge",
                      "flash_attn_imports": [{"module": "flash_attn.bert_padding", "where": "in f",
                                              "how": "unguarded"}]}
    report["status"], report["exit_code"] = spec.overall({"engine": report["engine"], "grpo": report["grpo"]}, None)
    return report


def test_a_section_is_well_formed_and_a_broken_one_is_named() -> None:
    cert = certificate.new(["python", "-m", "mcore_images.smoke"], "2026-01-01T00:00:00Z")
    assert certificate.validate({**cert, "verl_step": json.loads(json.dumps(section(), default=str))}) == []
    broken = {"schema": "x", "status": "ok", "exit_code": "0", "verl": None, "engine": 3}
    problems = certificate.validate({**cert, "verl_step": broken})
    assert [p.split(":")[0] for p in problems[:-1]] == [
        "field verl_step.engine", "field verl_step.exit_code", "field verl_step.status", "field verl_step.verl"]
    assert problems[-1] == f"verl_step section schema 'x' is not {spec.SCHEMA!r}"


def test_the_certificate_carries_the_section_through_its_schema_and_markdown(tmp_path: Path) -> None:
    path = write_certificate(tmp_path, load_stacks()["debian"], repository="r/x", digest="sha256:" + "ab" * 32,
                             created=dt.datetime.now(dt.UTC), gpus=1)
    cert = json.loads(path.read_text())
    cert["verl_step"] = json.loads(json.dumps(section(), default=str))
    assert certificate.validate(cert) == []
    assert jsonfiles.problem(cert, schemas.CERTIFICATE_SCHEMA) is None
    text = certificate.render_markdown(cert)
    assert "## verl step: PASSED (exit 0)" in text and spec.NO_FLASH_IN_IMAGE in text
    assert "| fused | passed |" in text and "actor/grad_norm" in text
    header = next(line for line in text.splitlines() if line.startswith("| attention_backend |"))
    assert len(re.split(r"(?<!\\)\|", header)) - 2 == 7  # a | inside a cell is escaped
    cert["verl_step"]["status"] = "maybe"
    assert any(p.startswith("field verl_step.status: 'maybe' is not one of") for p in certificate.validate(cert))
    cert["verl_step"]["exit_code"] = "0"
    assert jsonfiles.problem(cert, schemas.CERTIFICATE_SCHEMA) is not None
