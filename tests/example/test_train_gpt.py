"""The example job trains, checkpoints, is killed, resumes in another layout, and its loss curve goes on
where an uninterrupted run's does; bad checkpoints and layouts are refused in one line; the job's pip
install cannot move torch."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.example.conftest import build_job

ARGS = ["--config", "config.toml", "--cpu", "--steps", "12"]


def torchrun(job: str, out: Path, *args: str, detach: bool = False) -> subprocess.CompletedProcess[str]:
    """The job on 2 CPU ranks with ``out`` mounted at /out."""
    name = f"train-gpt-{uuid.uuid4().hex[:8]}"
    cmd = ["docker", "run", "--name", name, "--ipc=host", "-v", f"{out}:/out", *(["-d"] if detach else ["--rm"]),
           job, "torchrun", "--standalone", "--nproc-per-node", "2", "train.py", *ARGS, *args]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=600)
    done.name = name  # type: ignore[attr-defined]
    return done


def curve(path: Path) -> dict[int, float]:
    return {e["step"]: e["loss"] for e in map(json.loads, path.read_text().splitlines())}


@pytest.fixture(scope="module")
def uninterrupted(job: str, tmp_path_factory: pytest.TempPathFactory) -> dict[int, float]:
    out = tmp_path_factory.mktemp("straight")
    done = torchrun(job, out, "--tp", "2", "--log-file", "/out/loss.jsonl")
    assert done.returncode == 0, done.stderr[-3000:]
    return curve(out / "loss.jsonl")


@pytest.fixture(scope="module")
def killed(job: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tp2 run saving every 4 steps in the background, killed (SIGKILL) once its first checkpoint is
    complete."""
    out = tmp_path_factory.mktemp("killed")
    started = torchrun(job, out, "--tp", "2", "--save", "/out/ckpt", "--save-interval", "4", "--async-save",
                       "--log-file", "/out/loss.jsonl", detach=True)
    assert started.returncode == 0, started.stderr
    name = started.name  # type: ignore[attr-defined]
    try:
        deadline = time.monotonic() + 300
        while not (out / "ckpt" / "latest").is_file():
            assert time.monotonic() < deadline, "no checkpoint within 300 s"
            running = subprocess.run(["docker", "inspect", "-f", "{{.State.Running}}", name],
                                     capture_output=True, text=True, check=False).stdout.strip()
            if running != "true" and not (out / "ckpt" / "latest").is_file():
                logs = subprocess.run(["docker", "logs", name], capture_output=True, text=True, check=False)
                pytest.fail(f"the job ended before its first checkpoint was complete:\n{logs.stderr[-3000:]}")
            time.sleep(0.2)
        subprocess.run(["docker", "kill", "--signal", "KILL", name], capture_output=True, check=False)
    finally:
        logs = subprocess.run(["docker", "logs", name], capture_output=True, text=True, check=False)
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
    print(logs.stdout[-2000:])
    return out


def test_the_resumed_run_continues_the_uninterrupted_curve_in_another_layout(
        job: str, uninterrupted: dict[int, float], killed: Path) -> None:
    saved = (killed / "ckpt" / "latest").read_text().strip()
    resumed = torchrun(job, killed, "--pp", "2", "--load", "/out/ckpt", "--log-file", "/out/resumed.jsonl")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    step = int(saved.removeprefix("iter_"))
    assert f"resumed from /out/ckpt/{saved} at step {step}" in resumed.stdout
    after = curve(killed / "resumed.jsonl")
    assert sorted(after) == list(range(step + 1, 13))
    rows = [(s, uninterrupted[s], after[s], abs(after[s] - uninterrupted[s]) / uninterrupted[s]) for s in after]
    print("\n".join(f"step {s:2d}: uninterrupted tp2 {a:.6f}  resumed pp2 {b:.6f}  rel {r:.1e}" for s, a, b, r in rows))
    # fp32 on CPU: tp2 and pp2 sum in different orders, nothing more
    assert max(r for *_, r in rows) <= 1e-5
    assert uninterrupted[12] < uninterrupted[1]


def refused(done: subprocess.CompletedProcess[str]) -> str:
    errors = [line for line in done.stderr.splitlines() if line.startswith("train-gpt: ")]
    assert done.returncode != 0 and errors, done.stderr[-3000:]
    return errors[0]


def test_a_truncated_shard_is_refused_in_one_line(job: str, killed: Path, tmp_path: Path) -> None:
    copy = tmp_path / "ckpt"
    shutil.copytree(killed / "ckpt", copy)
    shard = sorted((copy / (copy / "latest").read_text().strip()).glob("*.distcp"))[0]
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    line = refused(torchrun(job, tmp_path, "--load", "/out/ckpt"))
    assert f"{shard.name} is truncated" in line


def test_a_missing_shard_is_refused_in_one_line(job: str, killed: Path, tmp_path: Path) -> None:
    copy = tmp_path / "ckpt"
    shutil.copytree(killed / "ckpt", copy)
    shard = sorted((copy / (copy / "latest").read_text().strip()).glob("*.distcp"))[-1]
    shard.unlink()
    assert f"{shard.name} is missing" in refused(torchrun(job, tmp_path, "--load", "/out/ckpt"))


def test_a_checkpoint_of_another_model_shape_is_refused(job: str, killed: Path) -> None:
    line = refused(torchrun(job, killed, "--hidden", "32", "--load", "/out/ckpt"))
    assert "saved from a model of another shape" in line


def test_a_layout_that_cannot_hold_the_model_is_refused(job: str, killed: Path) -> None:
    line = refused(torchrun(job, killed, "--pp", "3", "--load", "/out/ckpt"))
    assert "must divide the 2 rank(s)" in line


def test_the_jobs_requirements_cannot_change_torch(base: str) -> None:
    torch = subprocess.run(["docker", "run", "--rm", base, "python", "-c", "import torch; print(torch.__version__)"],
                           capture_output=True, text=True, check=True).stdout.strip().split("+")[0]
    other = "2.10.0" if torch != "2.10.0" else "2.9.1"
    built = build_job(base, f"mcore-images-example:refused-{uuid.uuid4().hex[:8]}", extra=f"torch=={other}")
    assert built.returncode != 0, "the build installed another torch"
    assert f"torch=={torch}" in built.stderr or "conflict" in built.stderr.lower(), built.stderr[-3000:]
