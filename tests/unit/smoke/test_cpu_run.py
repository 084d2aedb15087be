"""Real multi-process runs of the suite on CPU (gloo), where torch and megatron-core are installed.

The host's unit-test Python has neither, so these skip there; they run wherever both import (a dev
venv, or inside an image). They show that parity holds across layouts and that planted faults end
the run with exit 1 within the collective timeout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.unit.conftest import PYTHONPATH

pytest.importorskip("torch")
pytest.importorskip("megatron.core")



def smoke(out: Path, *args: str, timeout: float = 300) -> tuple[subprocess.CompletedProcess, float]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(PYTHONPATH=PYTHONPATH, CUDA_VISIBLE_DEVICES="")
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "smoke", "--cpu", "--out", str(out), *args],
                          capture_output=True, text=True, env=env, timeout=timeout)
    return proc, time.monotonic() - start


def test_two_ranks_train_every_layout_and_match_dp(tmp_path: Path) -> None:
    proc, _ = smoke(tmp_path, "--nproc", "2", "--layouts", "tp2,pp2,ep2,pp2-vpp2", "--steps", "3")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    cert = json.loads((tmp_path / "certificate.json").read_text())
    ran = {r["id"]: r for r in cert["runs"] if r["status"] != "skipped"}
    assert set(ran) == {"dp2/dense/local", "tp2/dense/local", "pp2/dense/local", "pp2-vpp2/dense/local",
                        "dp2/moe/local", "pp2/moe/local", "dp2-ep2/moe/local", "pp2-vpp2/moe/local"}
    for run in ran.values():
        assert run["status"] == "passed", run
        if run["parity"]:
            assert run["parity"]["loss_rel"] <= 1e-5 and run["parity"]["grad_norm_rel"] <= 1e-4
    assert (tmp_path / "certificate.md").read_text().startswith("# Smoke certificate: PASSED")


def test_a_rank_that_raises_fails_the_run(tmp_path: Path) -> None:
    proc, took = smoke(tmp_path, "--nproc", "2", "--layouts", "pp2", "--models", "dense", "--steps", "3",
                       "--inject-fault", "raise", "--timeout", "20")
    cert = json.loads((tmp_path / "certificate.json").read_text())
    assert proc.returncode == 1 and cert["status"] == "failed"
    assert "injected fault" in cert["error"] and took < 120


def test_a_collective_that_never_completes_times_out(tmp_path: Path) -> None:
    proc, took = smoke(tmp_path, "--nproc", "2", "--layouts", "pp2", "--models", "dense", "--steps", "3",
                       "--inject-fault", "hang", "--timeout", "10", "--watchdog", "240")
    cert = json.loads((tmp_path / "certificate.json").read_text())
    assert proc.returncode == 1 and cert["status"] == "failed", cert["error"]
    assert "Timed out" in cert["error"] and took < 120


def test_the_watchdog_ends_a_single_stuck_rank(tmp_path: Path) -> None:
    proc, took = smoke(tmp_path, "--nproc", "1", "--models", "dense", "--steps", "3",
                       "--inject-fault", "hang", "--watchdog", "30")
    cert = json.loads((tmp_path / "certificate.json").read_text())
    assert proc.returncode == 1 and "watchdog" in cert["error"] and took < 90
