"""examples/train-gpt judges its numbers and its folders before any process group starts, without torch: a bad value
is one line from rank 0 (the other ranks end quietly) and exit 2, and a run whose saves would move a finished run's
`latest` back is refused, naming --load. Before: `--tp 0`, `--tp -2`, `--lr nan`, `--global-batch 0` ended in a
traceback on every rank, `--tp abc` in a usage block, and a second run with --save on a finished run's folder and no
--load moved `latest` from step 30 to step 4."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.host import without_modules
from tests.unit.conftest import PYTHONPATH
from tests.unit.repo import train_gpt_script

TRAIN = train_gpt_script.SCRIPT


def rank_env(tmp_path: Path, rank: str, world: str) -> dict[str, str]:
    """One rank's environment, on a machine without torch or megatron-core (no LOCAL_RANK: not under torchrun)."""
    env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_RANK",)}
    env.update(PYTHONPATH=os.pathsep.join([without_modules(tmp_path / "hidden", "torch", "megatron"), PYTHONPATH]),
               RANK=rank, WORLD_SIZE=world)
    return env


def train(tmp_path: Path, *args: str, rank: str = "0", world: str = "1") -> subprocess.CompletedProcess:
    """train.py as torchrun starts one rank of it, on a machine without torch or megatron-core."""
    return subprocess.run([sys.executable, str(TRAIN), *args], capture_output=True, text=True,
                          env=rank_env(tmp_path, rank, world), cwd=tmp_path, timeout=60)


@pytest.mark.parametrize(("args", "said"), [
    (("--tp", "0"), "argument --tp: 0 is out of range: give a whole number of 1 or more"),
    (("--tp", "-2"), "argument --tp: -2 is out of range"),
    (("--tp", "abc"), "argument --tp: 'abc' is not a whole number"),
    (("--lr", "nan"), "argument --lr: nan is not a finite number: give a number greater than 0"),
    (("--lr", "inf"), "argument --lr: inf is not a finite number"),
    (("--global-batch", "0"), "argument --global-batch: 0 is out of range"),
    (("--seed", "99999999999999999999"), "argument --seed: 99999999999999999999 is out of range"),
    (("--save", ""), "--save is empty"),
    (("--config", "/dev/zero"), "--config /dev/zero is a character device, not a regular file"),
    (("--tp", "2"), "--tp 2 × --pp 1 × --ep 1 must divide the 1 rank(s)"),
])
def test_a_bad_value_is_one_line_from_rank_0_and_exit_2(tmp_path: Path, args: tuple[str, ...], said: str) -> None:
    done = train(tmp_path, *args)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.splitlines() == [next(line for line in done.stderr.splitlines() if said in line)], done.stderr
    assert done.stderr.startswith("train-gpt: ")
    other = train(tmp_path, *args, rank="1")
    assert other.returncode == 2 and other.stderr == "", other.stderr


@pytest.mark.parametrize(("line", "said"), [
    ("tp = 0", "tp = 0: 0 is out of range"),
    ("lr = nan", "lr = nan: nan is not a finite number"),
    ("global_batch = 2.5", "global_batch = 2.5: give a whole number"),
    ("steps = true", "steps = True: give a whole number"),
    ("save = ''", "save = '': give a path"),
])
def test_a_bad_value_in_the_config_file_is_one_line_naming_it(tmp_path: Path, line: str, said: str) -> None:
    (tmp_path / "config.toml").write_text(line + "\n")
    done = train(tmp_path, "--config", "config.toml")
    lines = done.stderr.splitlines()
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"train-gpt: config.toml: {said}"), lines


def finished(folder: Path, *steps: int) -> None:
    for step in steps:
        (folder / f"iter_{step:07d}").mkdir(parents=True)
        (folder / f"iter_{step:07d}" / "train_state.json").write_text(json.dumps({"step": step, "seed": 1}))
    (folder / "latest").write_text(f"iter_{max(steps):07d}")


def test_saves_that_would_move_latest_back_are_refused_naming_load(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    finished(ckpt, 4, 30)
    done = train(tmp_path, "--cpu", "--save", str(ckpt), "--save-interval", "4", "--steps", "40")
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"train-gpt: --save {ckpt} holds a checkpoint at step 30 (latest), and this run starts at step 0: its saves "
        f"would move latest back; resume it with --load {ckpt}, or pass another --save folder"]
    assert (ckpt / "latest").read_text() == "iter_0000030"
    older = tmp_path / "older"
    finished(older, 4)
    done = train(tmp_path, "--cpu", "--load", str(older), "--save", str(ckpt), "--save-interval", "4", "--steps", "40")
    assert done.returncode == 2 and "this run starts at step 4: its saves would move latest back" in done.stderr


def test_a_quiet_rank_under_torchrun_waits_for_rank_0_to_say_it_and_ends_on_sigterm(tmp_path: Path) -> None:
    """Before: rank 1 refused as fast as rank 0 but said nothing, and when it exited first, torchrun ended rank 0
    (SIGTERM) before rank 0 printed: the job stopped with exit 1 and no line saying why (seen in CI). Now a quiet rank
    that torchrun started (LOCAL_RANK) waits PEER_WAIT_S, and rank 0's exit ends it: torchrun's SIGTERM."""
    env = rank_env(tmp_path, "1", "2") | {"LOCAL_RANK": "1"}
    started = time.monotonic()
    alone = subprocess.run([sys.executable, str(TRAIN), "--tp", "0"], capture_output=True, text=True, env=env,
                           cwd=tmp_path, timeout=60)
    assert alone.returncode == 2 and alone.stderr == "", alone.stderr  # no rank 0 ended it: it ends on its own
    assert time.monotonic() - started >= train_gpt_script.load().PEER_WAIT_S
    waiting = subprocess.Popen([sys.executable, str(TRAIN), "--tp", "0"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    time.sleep(1)
    waiting.send_signal(signal.SIGTERM)  # what torchrun sends once rank 0 has exited
    _, err = waiting.communicate(timeout=60)
    assert waiting.returncode == -signal.SIGTERM and err == "", err
