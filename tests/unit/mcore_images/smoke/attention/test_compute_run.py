"""The attention check on CPU with the real torch and megatron-core: it passes megatron-core's own attention and
torch's SDPA against the fp32 reference, and fails each planted fault (the causal mask dropped, the output
perturbed), naming backend and case.

The host's unit-test Python has neither torch nor megatron-core, so these skip there; they run wherever both import
(inside a runtime image: `docker run -v $PWD:/src -w /src IMAGE python -m pytest
tests/unit/mcore_images/smoke/attention/test_compute_run.py`, or a venv with CPU torch and megatron-core).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.unit.conftest import PYTHONPATH

pytest.importorskip("torch")
pytest.importorskip("megatron.core")


def check(*flags: str) -> tuple[int, dict]:
    env = {**os.environ, "PYTHONPATH": PYTHONPATH, "TORCH_COMPILE_DISABLE": "1"}
    out = subprocess.run([sys.executable, "-m", "mcore_images.smoke.attention", "--cpu", "--json",
                          "--backends", "flash,local,sdpa", *flags],
                         capture_output=True, text=True, env=env, timeout=600)
    return out.returncode, json.loads(out.stdout.strip().splitlines()[-1])


def test_megatron_cores_attention_and_sdpa_pass_on_cpu() -> None:
    rc, sec = check()
    assert rc == 0 and sec["status"] == "passed", sec["failed"]
    ran = {(r["backend"], r["case"].split()[0]) for r in sec["results"] if r["status"] == "passed"}
    assert ran == {("local", "sbhd"), ("sdpa", "sbhd"), ("sdpa", "bshd"), ("sdpa", "thd")}
    assert len([r for r in sec["results"] if r["status"] == "passed"]) == 16
    flash = next(r for r in sec["results"] if r["backend"] == "flash")
    assert flash["status"] == "unavailable" and "no GPU" in flash["reason"]


@pytest.mark.parametrize("fault", ["noncausal", "perturb"])
def test_a_planted_wrong_attention_fails_every_case_naming_backend_and_case(fault: str) -> None:
    rc, sec = check("--inject-fault", fault)
    ran = [r for r in sec["results"] if r["status"] in ("passed", "failed")]
    assert rc == 1 and sec["status"] == "failed" and ran and all(r["status"] == "failed" for r in ran)
    assert "local (megatron-core DotProductAttention) × sbhd MHA d64: out" in sec["error"]
