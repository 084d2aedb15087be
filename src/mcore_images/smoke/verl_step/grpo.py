"""The GRPO part: one step of verl's trainer as users launch it, ``python -m verl.trainer.main_ppo`` with the
overrides of spec.grpo_overrides (vLLM rollout and the Megatron actor colocated on one GPU), its step metrics read
back from verl's own file logger.

The config is composed and validated here first (config.py: verl's own checks), so a config verl would refuse is
reported in one line before Ray and vLLM start.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from mcore_images.smoke.verl_step import config, spec

TAIL_LINES = 40
"""Lines of the trainer's output kept in the report when it fails."""


def read_steps(path: Path) -> list[dict[str, Any]]:
    """verl's file logger's records ({"step": N, "data": {metric: value}}), one a line; [] when absent."""
    if not path.is_file():
        return []
    steps = []
    for line in path.read_text().splitlines():
        try:
            steps.append(json.loads(line))
        except ValueError:
            continue
    return steps


def trainer_env(paths: spec.Paths) -> dict[str, str]:
    """The trainer's environment: offline (nothing from a hub), no wandb, verl's file logger writing the metrics
    where the part reads them (also handed to Ray's workers through the config's runtime_env)."""
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", WANDB_MODE="disabled", RAY_DEDUP_LOGS="0",
               CUDA_DEVICE_MAX_CONNECTIONS="1", VERL_FILE_LOGGER_PATH=str(paths.metrics))
    return env


def run(paths: spec.Paths, bridge: str, attention_backend: str, timeout: float) -> dict[str, Any]:
    """One GRPO step; the part's record: status, the command, the composed config's summary, step 1's metrics."""
    overrides = spec.grpo_overrides(paths, bridge, attention_backend)
    command = spec.grpo_command(sys.executable, overrides)
    record: dict[str, Any] = {"command": command, "attention_backend": attention_backend, "bridge": bridge}
    composed = config.compose(overrides)
    config.validate(composed)
    record["config"] = config.summary(composed)
    start = time.perf_counter()
    log = paths.workdir / "trainer.log"
    record["log"] = str(log)
    print(f"smoke.verl_step: {' '.join(command[1:4])} … (output: {log})", file=sys.stderr)
    with log.open("w") as out, subprocess.Popen(command, env=trainer_env(paths), cwd=paths.workdir, stdout=out,
                                                stderr=subprocess.STDOUT, start_new_session=True) as proc:
        try:
            rc: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = None
        # Ray, vLLM and the workers run in the trainer's process group: none of them outlives the part.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    record["seconds"] = round(time.perf_counter() - start, 2)
    steps = read_steps(paths.metrics)
    status, reason, metrics = spec.judge_grpo(rc, steps)
    if rc is None:
        reason = f"python -m verl.trainer.main_ppo ran past {timeout:.0f} s and was stopped"
    tail = log.read_text(errors="replace").splitlines()[-TAIL_LINES:] if status != "passed" else []
    record.update(status=status, reason=reason, exit_code=rc, metrics=metrics, output_tail=tail)
    return record
