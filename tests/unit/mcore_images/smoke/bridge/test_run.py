"""Real runs of `python -m mcore_images.smoke.bridge --cpu`, where torch, megatron-core and a bridge import.

The host's unit-test Python has none of them, so these skip there; they run wherever all import
(inside a runtime image: `docker run -v $PWD:/src -w /src IMAGE python -m pytest tests/unit/test_smoke_bridge_run.py`).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.unit.conftest import PYTHONPATH

pytest.importorskip("torch")
pytest.importorskip("megatron.core")
if not any(importlib.util.find_spec(m) for m in ("mbridge", "megatron.bridge")):
    pytest.skip("neither mbridge nor Megatron-Bridge is installed", allow_module_level=True)



def bridge(*args: str, timeout: float = 900) -> tuple[subprocess.CompletedProcess, dict[str, Any]]:
    env = {**os.environ, "PYTHONPATH": PYTHONPATH, "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, "-m", "mcore_images.smoke.bridge", "--cpu", *args], capture_output=True,
                          text=True,
                          env=env, timeout=timeout)
    return proc, json.loads(proc.stdout)


def test_dense_and_moe_pass_exactly(tmp_path: Path) -> None:
    proc, report = bridge("--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert json.loads((tmp_path / "bridge.json").read_text()) == report
    for record in report["architectures"]:
        assert record["passed"] and record["roundtrip_exact"], record
        assert record["logit_rel_diff"] <= 1e-4
        assert record["forward_backward"]["ok"]


def test_unsupported_architecture_fails_with_the_clear_error(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
                                                      "n_embd": 64, "n_layer": 1, "n_head": 2}))
    proc, report = bridge("--hf-config", str(tmp_path))
    assert proc.returncode == 1, proc.stderr[-3000:]
    for record in report["architectures"]:
        assert record["stage"] == "config" and record["status"] == "failed"
        assert record["reason"].startswith("config conversion failed: architecture GPT2LMHeadModel")
        assert "check model architecture compatibility" in record["reason"]


def test_a_bridge_that_is_not_installed_could_not_run() -> None:
    missing = [b for b, m in (("mbridge", "mbridge"), ("megatron-bridge", "megatron.bridge"))
               if importlib.util.find_spec(m) is None]
    if not missing:
        pytest.skip("both bridges are installed")
    proc, report = bridge("--bridges", missing[0], "--archs", "qwen2")
    assert proc.returncode == 2
    assert report["architectures"][0]["status"] == "could-not-run"
    assert "does not import" in report["architectures"][0]["reason"]
