"""examples/verl-grpo/grpo-megatron.sh judges its counts and quotes its paths before Hydra reads them. Before: TP, PP
and the GPU counts went to the trainer unchecked (`TP=0`, `TP=abc` reached verl), and a path went unquoted, so that
`DATA=/d,x` became a Hydra sweep over two values."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.unit.conftest import ROOT

SCRIPT = ROOT / "examples" / "verl-grpo" / "grpo-megatron.sh"


def run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    """The script, with verl's trainer replaced by a python3 that prints its arguments, one a line."""
    bin_ = tmp_path / "bin"
    bin_.mkdir(exist_ok=True)
    (bin_ / "python3").write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    (bin_ / "python3").chmod(0o755)
    clean = {k: v for k, v in os.environ.items() if k not in ("TP", "PP", "EP", "ROLLOUT_TP", "NNODES",
                                                               "GPUS_PER_NODE", "MODEL", "DATA")}
    return subprocess.run(["bash", str(SCRIPT)], env={**clean, "PATH": f"{bin_}:{clean['PATH']}", **env},
                          capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize(("env", "said"), [
    ({"TP": "0"}, "TP=0 is not a count: give a whole number of 1 or more"),
    ({"TP": "abc"}, "TP=abc is not a count"),
    ({"PP": "-1"}, "PP=-1 is not a count"),
    ({"GPUS_PER_NODE": "8 9"}, "GPUS_PER_NODE=8 9 is not a count"),
    ({"TP": "3"}, "TP=3 x PP=1 must divide the 8 GPUs (NNODES x GPUS_PER_NODE)"),
    ({"ROLLOUT_TP": "16"}, "ROLLOUT_TP=16 must divide the 8 GPUs"),
    ({"MODEL": "/models/it's"}, "MODEL=/models/it's holds a quote"),
    ({"DATA": "/data/${oc.env:HOME}"}, "DATA=/data/${oc.env:HOME}/train.parquet holds a quote, a backslash, a '${'"),
])
def test_a_bad_value_is_one_line_and_exit_2_before_the_trainer(tmp_path: Path, env: dict[str, str],
                                                                said: str) -> None:
    done = run(tmp_path, **env)
    assert done.returncode == 2 and done.stdout == "", done.stdout
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"grpo-megatron.sh: {said}"), done.stderr


def test_paths_reach_hydra_quoted(tmp_path: Path) -> None:
    done = run(tmp_path, MODEL="/models/a b,c", DATA="/d,x")
    assert done.returncode == 0, done.stderr
    args = done.stdout.splitlines()
    assert "actor_rollout_ref.model.path='/models/a b,c'" in args
    assert "data.train_files='/d,x/train.parquet'" in args and "data.val_files='/d,x/test.parquet'" in args
