"""The HF <-> Megatron-Core bridge(s) the image labels work with its megatron-core (src/mcore_images/smoke/bridge.py, on
CPU).

`python -m mcore_images.smoke.bridge --cpu` runs in the container for every bridge the labels name: tiny Qwen2
and MoE checkpoints written there, built through the bridge's AutoBridge, bit-exact weight round
trip, logits vs transformers, a forward-backward. An architecture the bridge lacks must fail with
the one-line "config conversion failed" error.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

import pytest
from tests.image.utils import docker

from mcore_images.catalogue.stacks import NONE

BRIDGE_LABELS = ("mbridge", "megatron-bridge")
BRIDGE = "cd /workspace 2>/dev/null; timeout {t} python -m mcore_images.smoke.bridge {args}"
# An architecture neither bridge converts (GPT-2): what a user's unsupported model looks like.
UNSUPPORTED = {
    "architectures": ["GPT2LMHeadModel"],
    "model_type": "gpt2",
    "vocab_size": 512,
    "n_embd": 128,
    "n_layer": 2,
    "n_head": 4,
    "n_positions": 256,
}


def labelled_bridges(image: docker.ImageInfo) -> list[str]:
    return [key for key in BRIDGE_LABELS if image.label(key) not in (None, NONE)]


@pytest.fixture(scope="module")
def bridges(image: docker.ImageInfo, host: Any) -> list[str]:
    found = labelled_bridges(image)
    if not found:
        pytest.skip(
            f"{image.ref} labels no bridge (io.mcore-images.mbridge={image.label('mbridge')}, "
            f"io.mcore-images.megatron-bridge={image.label('megatron-bridge')}): nothing to check"
        )
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('mcore_images.smoke.bridge') is None)"
    if host.run(f'python -c "{probe}"').rc:
        pytest.skip("this image's smoke programs have no bridge check (smoke.bridge): it predates it")
    return found


def run_bridge(host: Any, args: str, timeout: int = 900) -> tuple[Any, dict[str, Any]]:
    result = host.run(BRIDGE.format(t=timeout, args=args))
    try:
        report = json.loads(result.stdout)
    except ValueError:
        pytest.fail(
            f"python -m mcore_images.smoke.bridge {args} printed no JSON report (exit {result.rc}): "
            f"{(result.stdout + result.stderr).strip()[-3000:]}"
        )
    return result, report


def test_bridge_round_trip_logits_and_fwd_bwd_on_cpu(host: Any, bridges: list[str]) -> None:
    """Every labelled bridge passes for a dense and a MoE architecture; exit 0."""
    args = f"--cpu --bridges {','.join(bridges)}"
    result, report = run_bridge(host, args)
    lines = [
        f"{r['arch']}/{r['bridge']}: {r['status']}" + (f" at {r['stage']}: {r['reason']}" if r["reason"] else "")
        for r in report["architectures"]
    ]
    print(f"python -m mcore_images.smoke.bridge {args}:\n" + "\n".join(lines))
    assert result.rc == 0, f"exit {result.rc}, {report['status']}: {report.get('error') or ''}\n" + "\n".join(lines)
    for bridge in bridges:
        passed = [r for r in report["architectures"] if r["bridge"] == bridge and r["passed"]]
        assert {r["moe"] for r in passed} == {False, True}, f"{bridge}: a dense and a MoE architecture must pass"
        for r in passed:
            assert r["roundtrip_exact"] is True
            assert r["logit_rel_diff"] <= r["tolerance"]


def test_unsupported_architecture_is_one_clear_error(host: Any, bridges: list[str]) -> None:
    folder = "/tmp/mcore-images-test-gpt2"
    written = host.run(f"mkdir -p {folder} && printf %s {shlex.quote(json.dumps(UNSUPPORTED))} > {folder}/config.json")
    assert written.rc == 0, written.stderr
    result, report = run_bridge(host, f"--cpu --bridges {','.join(bridges)} --hf-config {folder}", timeout=600)
    assert result.rc == 1, f"an unsupported architecture must fail (exit 1), got {result.rc}: {report}"
    for record in report["architectures"]:
        assert record["status"] == "failed" and record["stage"] == "config", record
        assert record["reason"].startswith(
            "config conversion failed: architecture GPT2LMHeadModel (model_type "
            f"'gpt2') is not supported by {record['bridge']} "
        ), record["reason"]
        assert "check model architecture compatibility" in record["reason"]
