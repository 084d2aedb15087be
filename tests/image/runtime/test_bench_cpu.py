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
