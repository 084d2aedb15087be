"""The bridge check's pure parts (no torch): tiny configs, checkpoint layouts, tolerance, verdicts, messages, CLI."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mcore_images.catalogue import components
from mcore_images.smoke import certificate
from mcore_images.smoke.bridge import spec
from mcore_images.smoke.bridge.cli import select_bridges
from mcore_images.smoke.kit import envinfo
from mcore_images.smoke.kit.errors import CouldNotRun
from mcore_images.smoke.kit.numerics import Math, bridge
from mcore_images.smoke.kit.seeds import seed_for
from tests.support.host import without_modules
from tests.unit.conftest import PYTHONPATH

TOL_FP32 = bridge(Math("fp32", "fp32", "fp32 on the CPU"))
TOL_BF16 = bridge(Math("bf16", "bf16", "bf16 compute"))


def run_bridge(*args: str, hide_torch: Path | None = None) -> subprocess.CompletedProcess:
    """The bridge check's command; ``hide_torch``: a folder to make torch unimportable from, whatever this host has."""
    path = PYTHONPATH if hide_torch is None else f"{without_modules(hide_torch, 'torch')}{os.pathsep}{PYTHONPATH}"
    env = {**os.environ, "PYTHONPATH": path, "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run([sys.executable, "-m", "mcore_images.smoke.bridge", *args], capture_output=True, text=True,
                          env=env,
                          timeout=120)


# ---------------------------------------------------------------------------------------------
# Configs and checkpoint layouts.


@pytest.mark.parametrize("name", list(spec.ARCHITECTURES))
def test_tiny_configs_name_their_family_and_use_grouped_query_attention(name: str) -> None:
    cfg = spec.ARCHITECTURES[name].config()
    assert cfg["model_type"] == name
    assert cfg["architectures"] == [spec.ARCHITECTURES[name].hf_class]
    assert cfg["num_key_value_heads"] < cfg["num_attention_heads"]  # the q/k/v interleave matters
    assert cfg["num_hidden_layers"] >= 2  # layer-index mapping matters
    assert cfg["tie_word_embeddings"] is False
    assert json.loads(json.dumps(cfg)) == cfg  # what config.json will hold


def test_default_checks_one_dense_and_one_moe() -> None:
    archs = [spec.ARCHITECTURES[n] for n in spec.DEFAULT_ARCHS]
    assert [a.moe for a in archs] == [False, True]


def test_qwen2_layout_has_qkv_biases_and_gqa_shapes() -> None:
    cfg = spec.ARCHITECTURES["qwen2"].config()
    shapes = spec.checkpoint_shapes(cfg)
    h, hd = cfg["hidden_size"], spec.head_dim(cfg)
    assert len(shapes) == 3 + cfg["num_hidden_layers"] * 12
    assert shapes["model.layers.1.self_attn.q_proj.weight"] == (cfg["num_attention_heads"] * hd, h)
    assert shapes["model.layers.1.self_attn.k_proj.weight"] == (cfg["num_key_value_heads"] * hd, h)
    assert shapes["model.layers.0.self_attn.v_proj.bias"] == (cfg["num_key_value_heads"] * hd,)
    assert shapes["model.layers.0.mlp.down_proj.weight"] == (h, cfg["intermediate_size"])
    assert "model.layers.0.self_attn.o_proj.bias" not in shapes


def test_qwen3_moe_layout_has_qk_norms_experts_and_no_biases() -> None:
    cfg = spec.ARCHITECTURES["qwen3_moe"].config()
    shapes = spec.checkpoint_shapes(cfg)
    assert shapes["model.layers.0.self_attn.q_norm.weight"] == (spec.head_dim(cfg),)
    assert shapes["model.layers.1.mlp.gate.weight"] == (cfg["num_experts"], cfg["hidden_size"])
    assert shapes["model.layers.1.mlp.experts.3.up_proj.weight"] == (cfg["moe_intermediate_size"], cfg["hidden_size"])
    assert not any(name.endswith(".bias") for name in shapes)
    assert not any("shared_expert" in name for name in shapes)


def test_mixtral_and_qwen2_moe_layouts_use_their_hub_names() -> None:
    mixtral = spec.checkpoint_shapes(spec.ARCHITECTURES["mixtral"].config())
    moe = "model.layers.0.block_sparse_moe"
    assert {f"{moe}.experts.0.w1.weight", f"{moe}.experts.0.w3.weight", f"{moe}.gate.weight"} <= set(mixtral)
    qwen2_moe = spec.checkpoint_shapes(spec.ARCHITECTURES["qwen2_moe"].config())
    assert qwen2_moe["model.layers.1.mlp.shared_expert_gate.weight"] == (1, 128)
    assert "model.layers.1.mlp.shared_expert.down_proj.weight" in qwen2_moe


def test_mlp_only_layers_stay_dense() -> None:
    cfg = {**spec.ARCHITECTURES["qwen3_moe"].config(), "mlp_only_layers": [0]}
    shapes = spec.checkpoint_shapes(cfg)
    assert "model.layers.0.mlp.gate_proj.weight" in shapes
    assert "model.layers.1.mlp.experts.0.gate_proj.weight" in shapes


def test_tied_embeddings_drop_lm_head_and_unknown_family_is_a_key_error() -> None:
    cfg = {**spec.ARCHITECTURES["qwen2"].config(), "tie_word_embeddings": True}
    assert "lm_head.weight" not in spec.checkpoint_shapes(cfg)
    with pytest.raises(KeyError):
        spec.checkpoint_shapes({**cfg, "model_type": "gpt2"})


def test_random_values_make_misplaced_norms_and_biases_visible() -> None:
    assert spec.init_stats("model.layers.0.input_layernorm.weight", (128,)) == (1.0, 0.1)
    assert spec.init_stats("model.layers.0.self_attn.q_proj.bias", (128,)) == (0.0, 0.2)
    assert spec.init_stats("model.embed_tokens.weight", (512, 128)) == (0.0, 1.0)
    assert spec.init_stats("lm_head.weight", (512, 128)) == (0.0, pytest.approx(2 / math.sqrt(128)))
    assert spec.init_stats("model.layers.0.mlp.down_proj.weight", (128, 256)) == (0.0, pytest.approx(1 / 16))


def test_seeds_are_stable_and_per_name() -> None:
    assert seed_for("a", 1) == seed_for("a", 1)
    assert seed_for("a", 1) != seed_for("b", 1) != seed_for("a", 2)
    assert 0 <= seed_for("a", 1) < 2**63


def test_parse_archs() -> None:
    assert spec.parse_archs(" qwen2 , mixtral,qwen2") == ("qwen2", "mixtral")
    with pytest.raises(ValueError, match="choose from qwen2"):
        spec.parse_archs("qwen2,llama4")
    with pytest.raises(ValueError):
        spec.parse_archs(" , ")


# ---------------------------------------------------------------------------------------------
# Tolerance and verdicts.


def test_tolerances_are_stated_with_their_reason() -> None:
    fp32, bf16 = TOL_FP32, TOL_BF16
    assert fp32.logits_rtol == 1e-4 and fp32.loss_rtol == 1e-5
    assert bf16.logits_rtol == 2.0**-5 and bf16.loss_rtol == 2.0**-8
    assert "1e-4" in fp32.why and "8u" in bf16.why
    # The margins the docstring claims: measured clean deltas below, planted and real faults far above.
    assert 1.1e-2 * 2.5 < bf16.logits_rtol < 0.19 / 5
    assert 6e-7 * 100 < fp32.logits_rtol < 0.19 / 1000


@pytest.mark.parametrize(("diff", "scale", "expected"), [
    (1e-3, 10.0, 1e-4), (0.0, 0.0, 0.0), (1.0, 0.0, math.inf), (math.nan, 1.0, math.inf), (1.0, math.inf, math.inf)])
def test_logit_delta(diff: float, scale: float, expected: float) -> None:
    assert spec.logit_delta(diff, scale) == pytest.approx(expected)


def finished(**changes: Any) -> dict[str, Any]:
    tol = TOL_FP32
    record = spec.new_result("qwen2", "mbridge", "0.15.1", tol)
    record.update(roundtrip_exact=True, roundtrip={"tensors": 27, "mismatched": [], "missing": [], "extra": []},
                  max_logit_diff=1e-6, logit_scale=5.0, logit_rel_diff=2e-7,
                  forward_backward={"ok": True, "problem": None, "loss": 6.3, "grad_norm": 3.0},
                  loss={"megatron": 6.3, "transformers": 6.3, "rel_diff": 0.0})
    record.update(changes)
    return record


def test_judge_passes_a_clean_record() -> None:
    assert spec.judge(finished(), TOL_FP32) == []


@pytest.mark.parametrize(("changes", "words"), [
    ({"roundtrip_exact": False, "roundtrip": {"mismatched": [{"name": "x"}], "missing": [], "extra": ["y"]}},
     "round trip not exact: 1 tensor(s) differ, 0 missing from the export, 1 extra"),
    ({"logit_rel_diff": 3e-3}, "logits differ from transformers by 0.003"),
    ({"logit_rel_diff": None}, "logits differ from transformers by None"),
    ({"logit_rel_diff": math.nan}, "logits differ"),
    ({"forward_backward": {"ok": False, "problem": "loss nan is not finite"}}, "forward-backward: loss nan"),
    ({"loss": {"megatron": 6.4, "transformers": 6.3, "rel_diff": 0.016}}, "training loss 6.4"),
])
def test_judge_names_each_failed_check(changes: dict[str, Any], words: str) -> None:
    problems = spec.judge(finished(**changes), TOL_FP32)
    assert len(problems) == 1 and words in problems[0], problems


def test_overall_exit_codes() -> None:
    ok, failed, cnr = finished(status="passed"), finished(status="failed"), finished(status="could-not-run")
    assert spec.overall([ok, ok]) == ("passed", 0)
    assert spec.overall([ok, cnr]) == ("could-not-run", 2)
    assert spec.overall([cnr, failed]) == ("failed", 1)
    assert spec.overall([]) == ("could-not-run", 2)
    assert spec.overall([ok], error="no bridge") == ("could-not-run", 2)


# ---------------------------------------------------------------------------------------------
# Messages.


def test_unsupported_architecture_message_is_one_clear_line() -> None:
    text = spec.unsupported_message("gpt2", "GPT2LMHeadModel", "mbridge", "0.15.1", ["qwen2", "mixtral"])
    assert text.startswith("config conversion failed: architecture GPT2LMHeadModel (model_type 'gpt2') is not "
                           "supported by mbridge 0.15.1; check model architecture compatibility")
    assert "(supported: mixtral, qwen2)" in text
    assert "\n" not in text


def test_mcore_incompatibility_names_the_cause_and_the_fix() -> None:
    text = spec.mcore_incompatible_message("mbridge", "0.15.1", "0.19.2",
                                           "AttributeError: type object 'ModelType' has no attribute "
                                           "'encoder_and_decoder'")
    assert "mbridge 0.15.1 cannot build models on megatron-core 0.19.2" in text
    assert "encoder_and_decoder" in text and "megatron-core older than 0.17" in text


def test_known_causes_name_the_fix() -> None:
    text = spec.known_cause("AttributeError: 'Qwen2Config' object has no attribute 'rope_theta'", "mbridge", "0.15.1",
                            {"transformers": "5.24.0"}, {})
    assert text == ("transformers 5.24.0 keeps rope_theta inside config.rope_parameters, and mbridge 0.15.1 reads "
                    "config.rope_theta: pin transformers < 5 next to this bridge")
    assert spec.known_cause("AttributeError: ... 'rope_theta'", "mbridge", "0.15.1", {"transformers": "4.57.6"},
                            {}) is None
    head = spec.known_cause("TypeError: unsupported operand type(s) for *: 'NoneType' and 'int'", "mbridge", "0.15.1",
                            {"transformers": "4.57.6"}, {"head_dim": None})
    assert head is not None and "set head_dim in config.json" in head
    assert spec.known_cause("RuntimeError: boom", "mbridge", "0.15.1", {}, {}) is None


def test_planted_faults_exchange_tensors_of_one_shape() -> None:
    shapes = spec.checkpoint_shapes(spec.ARCHITECTURES["qwen2"].config())
    for a, b in spec.FAULTS.values():
        assert shapes[a] == shapes[b]


def test_bridge_selection() -> None:
    assert select_bridges("auto", ["mbridge"], {"megatron-bridge": "ImportError"}) == (["mbridge"], {})
    assert select_bridges("mbridge,megatron-bridge", ["mbridge"], {"megatron-bridge": "ImportError: x"}) == (
        ["mbridge"], {"megatron-bridge": "ImportError: x"})
    with pytest.raises(CouldNotRun, match="neither mbridge nor Megatron-Bridge"):
        select_bridges("auto", [], {"mbridge": "ModuleNotFoundError", "megatron-bridge": "ModuleNotFoundError"})
    with pytest.raises(CouldNotRun, match="unknown bridge"):
        select_bridges("nemo", ["mbridge"], {})


# ---------------------------------------------------------------------------------------------
# The report in the smoke certificate.


def report(status: str = "passed") -> dict[str, Any]:
    tol = TOL_FP32
    rep = spec.new_report(["python", "-m", "mcore_images.smoke.bridge", "--cpu"], "cpu", "fp32", tol)
    rep["architectures"] = [finished(status="passed", passed=True)]
    rep["status"], rep["exit_code"] = status, 0
    return rep


def test_certificate_carries_and_renders_the_bridge_section(tmp_path: Path) -> None:
    cert = certificate.new(["python", "-m", "mcore_images.smoke"], "2026-01-01T00:00:00Z")
    cert.update(status="passed", exit_code=0)
    cert["bridge"] = report()
    assert certificate.validate(cert) == []
    json_path, md_path = certificate.write(cert, tmp_path)
    assert certificate.read(json_path)["bridge"]["architectures"][0]["arch"] == "qwen2"
    text = md_path.read_text()
    assert "## Bridge check: PASSED (exit 0)" in text
    assert "| qwen2 | mbridge 0.15.1 | passed | exact (27 tensors) | 2.00e-07 (1.0e-04) |" in text


def test_a_malformed_bridge_section_is_reported() -> None:
    cert = certificate.new(["python", "-m", "mcore_images.smoke"], "2026-01-01T00:00:00Z")
    cert["bridge"] = {**report(), "status": "fine", "architectures": None}
    problems = certificate.validate(cert)
    assert any(p.startswith("field bridge.status: 'fine' is not one of") for p in problems), problems
    assert any(p.startswith("field bridge.architectures: None is not of type 'array'") for p in problems), problems


def test_summary_lines() -> None:
    rep = report()
    rep["architectures"].append(finished(arch="mixtral", status="failed", stage="done", reason="logits differ"))
    lines = spec.summary_lines(rep)
    assert lines[0].startswith("qwen2      mbridge 0.15.1: passed — round trip exact (27 tensors)")
    assert lines[1] == "mixtral    mbridge 0.15.1: failed at done: logits differ"


# ---------------------------------------------------------------------------------------------
# The command line without torch (the host): bad input exits 2 at once; no torch is "could not run".


def test_unknown_architecture_exits_2_with_one_line() -> None:
    out = run_bridge("--archs", "qwen2,llama4")
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "smoke.bridge: could not run: unknown architecture(s) ['llama4']: choose from qwen2, qwen3, mixtral, "
        "qwen2_moe, qwen3_moe (or pass --hf-config FILE for another config.json)"]


def test_missing_hf_config_exits_2(tmp_path: Path) -> None:
    out = run_bridge("--hf-config", str(tmp_path / "nope.json"))
    assert out.returncode == 2 and "does not exist" in out.stderr


def test_a_seed_out_of_range_exits_2_with_one_line() -> None:
    out = run_bridge("--seed", "-1", "--dry-run")
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == ["smoke.bridge: could not run: --seed -1 is out of range: give 0 … "
                                               "4294967295"]


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0"])
def test_a_timeout_that_is_no_number_of_seconds_exits_2_with_one_line(value: str) -> None:
    """Before: --timeout nan or -1 was taken, and reached torch.distributed's process group as its timeout."""
    out = run_bridge("--timeout", value, "--dry-run")
    why = "not a finite number" if value in ("nan", "inf") else "out of range"
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        f"smoke.bridge: could not run: argument --timeout: {value} is {why}: give a number greater than 0, e.g. 120; "
        "see `python -m mcore_images.smoke.bridge --help`"]


def test_the_report_records_the_catalogues_packages_and_the_hf_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    installed = {"torch": "2.9.0", "megatron-core": "0.16.1", "mbridge": "0.15.1", "transformers": "4.57.1"}

    def version(name: str) -> str:
        if name not in installed:
            raise envinfo.md.PackageNotFoundError(name)
        return installed[name]

    monkeypatch.setattr(envinfo.md, "version", version)
    monkeypatch.setattr(envinfo.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(envinfo, "compiler_version", lambda: None)
    got = spec.packages()
    assert list(got) == [*components.certificate_packages(), *spec.HF_PACKAGES]
    assert {k: v for k, v in got.items() if v and k != "python"} == installed


def test_dry_run_needs_no_torch() -> None:
    out = run_bridge("--dry-run", "--cpu")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("bridge check: qwen2, qwen3_moe through auto bridge(s), fp32 on CPU")
    assert "tolerance: fp32" in out.stdout


def test_without_torch_the_report_says_could_not_run(tmp_path: Path) -> None:
    out = run_bridge("--cpu", hide_torch=tmp_path)  # the real run is tested in test_run.py, in an image with torch
    assert out.returncode == 2
    rep = json.loads(out.stdout)
    assert rep["schema"] == spec.SCHEMA and rep["status"] == "could-not-run" and rep["exit_code"] == 2
    assert "torch does not import" in rep["error"]
