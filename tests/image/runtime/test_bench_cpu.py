"""The bench's code path in the image on CPU (gloo, fp32): the real model, DDP, optimizer, schedule,
variants and profiler on seconds-long shapes. No numbers are judged: CPU results have no baseline."""

from __future__ import annotations

import json
from typing import Any

from mcore_images.catalogue import wgrad_fusion

OUT = "/tmp/mcore-images-test-bench"


def test_the_bench_trains_every_variant_profiles_and_writes(host: Any, labels: dict[str, str]) -> None:
    result = host.run(f"cd /tmp && timeout 600 python -m mcore_images.smoke.bench --cpu --configs tiny,tiny-moe "
                      f"--variants defaults,production+ce --warmup 1 --steps 2 --repeats 2 --profile --out {OUT}")
    assert result.rc == 0, (result.stdout + result.stderr)[-3000:]
    doc = json.loads(host.file(f"{OUT}/bench.json").content_string)
    assert doc["status"] == "passed" and doc["stack_how"] == "the image's ($MCORE_IMAGES_STACK)"
    rows = [(r["config"], r["spec"], r["variant"], r["precision"], r["status"]) for r in doc["results"]]
    assert rows == [(c, "local", v, "fp32", "ok") for c in ("tiny", "tiny-moe") for v in ("defaults", "production+ce")]
    for r in doc["results"]:
        assert len(r["step_ms"]) == 4 and len(r["window_ms_medians"]) == 2 and r["tflops_per_gpu"] > 0
        assert r["mfu"] is None
        assert r["gate"]["status"] == "no-baseline"
        assert r["profile"]["kinds_ms"].get("gemm", 0) > 0, r["profile"]
    fused = doc["results"][1]
    assert fused["settings"]["normalization"] == "RMSNorm" and fused["settings"]["cross_entropy_loss_fusion"]
    # The frameworks' default where the image's module runs on the CPU (this project's; apex's is CUDA only).
    ours = labels.get(wgrad_fusion.LABEL) == wgrad_fusion.OURS
    assert fused["settings"].get("gradient_accumulation_fusion", False) is ours, fused
    assert doc["gradient_accumulation_fusion"]["on"] is ours
    text = host.file(f"{OUT}/bench.md").content_string
    assert "## Bench: PASSED" in text and "### Where the step time goes: tiny-moe/local/production+ce/fp32" in text


def test_dropless_moe_and_the_8b_attention_train(host: Any) -> None:
    """The dropless variant through the alltoall dispatcher (grouped GEMM and fused permutation are TE's: named as not
    applied on CPU), and tiny-gqa, with dense-8b's four query heads per key/value group."""
    out = "/tmp/mcore-images-test-bench-dropless"
    result = host.run(f"cd /tmp && timeout 600 python -m mcore_images.smoke.bench --cpu --configs tiny-gqa,tiny-moe "
                      f"--variants dropless --dispatcher alltoall --warmup 1 --steps 2 --repeats 1 --out {out}")
    assert result.rc == 0, (result.stdout + result.stderr)[-3000:]
    doc = json.loads(host.file(f"{out}/bench.json").content_string)
    gqa, moe = doc["results"]
    assert [(r["config"], r["variant"], r["status"]) for r in (gqa, moe)] == [("tiny-gqa", "dropless", "ok"),
                                                                              ("tiny-moe", "dropless", "ok")]
    assert moe["dispatcher"] == "alltoall" and "moe_expert_capacity_factor" not in moe["settings"]
    assert any(d.startswith("moe_grouped_gemm") for d in moe["dropped"])
    assert all(0 < loss < 10 for r in (gqa, moe) for loss in r["loss"])  # ln(256) = 5.5 at the start


META_BUILD = r"""
import json, os
os.environ["TORCH_COMPILE_DISABLE"] = "1"
from mcore_images.smoke.kit import cpu_shim
cpu_shim.install()
cpu_shim.hide_transformer_engine()
import megatron.core
cpu_shim.patch_megatron()
import torch
from mcore_images.smoke.bench import memory, model
from mcore_images.smoke.kit import bootstrap, gpt_builder
bootstrap.init_process_group(True, 120)
bootstrap.init_parallel(cpu=True, timeout_s=120, seed=1)
cfg = model.CONFIGS["dense-8b"]
gpt = gpt_builder.Gpt(cfg.size, spec="local", cpu=True, dtype="bf16", params_dtype="bf16")
config, _ = gpt_builder.transformer_config(gpt, normalization="RMSNorm", perform_initialization=False)
with torch.device("meta"):
    (chunk,) = gpt_builder.build(gpt, config)
print("RESULT " + json.dumps({
    "params": sum(p.numel() for p in chunk.parameters()), "modelled": cfg.size.total_params(),
    "learned_positions": cfg.size.seq * cfg.size.hidden, "layers": len(chunk.decoder.layers),
    "qkv": list(chunk.decoder.layers[0].self_attention.linear_qkv.weight.shape)}))
bootstrap.teardown()
"""


def test_dense_8b_as_megatron_core_builds_it_has_the_parameters_the_memory_model_counts(host: Any) -> None:
    """The whole dense-8b on the meta device (no memory): megatron-core's own model holds exactly the parameters
    bench/memory.py multiplies by 18 bytes (CPU builds use learned positions instead of RoPE: seq × hidden more)."""
    result = host.run(f"cd /tmp && timeout 300 python - <<'PY'\n{META_BUILD}\nPY")
    assert result.rc == 0, (result.stdout + result.stderr)[-3000:]
    built = json.loads(next(line for line in result.stdout.splitlines() if line.startswith("RESULT "))[7:])
    assert built["params"] == built["modelled"] + built["learned_positions"]
    assert built["qkv"] == [4096 + 2 * 1024, 4096]  # 32 query heads, 8 key/value groups of 128
    assert built["layers"] == 17
