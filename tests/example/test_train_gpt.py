"""The example job trains, checkpoints, is killed, resumes in another layout, and its loss curve goes on
where an uninterrupted run's does; bad checkpoints and layouts are refused in one line; faults of the
checkpoint folder (full, read-only, written by a second job) and SIGTERM lose nothing and say why in one
line; the job's pip install cannot move torch."""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.example.conftest import JOB_DIR, build_job

ARGS = ["--config", "config.toml", "--cpu", "--steps", "12"]


def torchrun(job: str, out: Path, *args: str, detach: bool = False, docker: tuple[str, ...] = (),
             then: str | None = None) -> subprocess.CompletedProcess[str]:
    """The job on 2 CPU ranks with ``out`` mounted at /out (and ``docker``'s run flags); ``then``: a shell
    command run in the container after the job (the job's exit code stays the container's)."""
    name = f"train-gpt-{uuid.uuid4().hex[:8]}"
    job_cmd = ["torchrun", "--standalone", "--nproc-per-node", "2", "train.py", *ARGS, *args]
    if then:
        job_cmd = ["sh", "-c", f"{shlex.join(job_cmd)}; rc=$?; {then}; exit $rc"]
    cmd = ["docker", "run", "--name", name, "--ipc=host", "-v", f"{out}:/out", *docker,
           *(["-d"] if detach else ["--rm"]), job, *job_cmd]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=600)
    done.name = name  # type: ignore[attr-defined]
    return done


def running(name: str) -> bool:
    return subprocess.run(["docker", "inspect", "-f", "{{.State.Running}}", name], capture_output=True, text=True,
                          check=False).stdout.strip() == "true"


def ended(name: str) -> subprocess.CompletedProcess[str]:
    """Wait for a detached job, then its logs (stdout, stderr) and exit code; the container is removed."""
    code = subprocess.run(["docker", "wait", name], capture_output=True, text=True, check=False, timeout=600)
    logs = subprocess.run(["docker", "logs", name], capture_output=True, text=True, check=False)
    subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
    return subprocess.CompletedProcess(name, int(code.stdout.strip() or -1), logs.stdout, logs.stderr)


def said(done: subprocess.CompletedProcess[str]) -> list[str]:
    """The job's own one-line reports (every other line on stderr is torchrun's or megatron-core's)."""
    return [line for line in done.stderr.splitlines() if line.startswith("train-gpt: ")]


def wait_for(path: Path, name: str, seconds: float = 300) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"no {path} within {seconds:.0f} s"
        if not running(name) and not path.exists():
            logs = subprocess.run(["docker", "logs", name], capture_output=True, text=True, check=False)
            pytest.fail(f"the job ended before {path} appeared:\n{logs.stderr[-3000:]}")
        time.sleep(0.05)


def digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


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


def readme_cpu_line(job: str) -> str:
    """The README's CPU launch line as written, with the job image built here in place of `train-gpt`."""
    text = (JOB_DIR / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", text[text.index("<!-- cpu-line:"):], re.S)
    assert block, "examples/train-gpt/README.md lost its CPU launch line"
    line, count = re.subn(r"\btrain-gpt(?= torchrun)", job, block.group(1))
    assert count == 1, block.group(1)
    return line


def test_the_readme_line_starts_on_an_empty_folder_and_resumes_on_its_own_checkpoint(job: str,
                                                                                      tmp_path: Path) -> None:
    """Before: every launch line passes --save DIR --load DIR, and its first run stopped at once, "/out/ckpt has no
    train_state.json"."""
    line = readme_cpu_line(job)
    first = subprocess.run(["bash", "-euc", line], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                           check=False)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "--load /out/ckpt: no checkpoint there yet, starting from step 0" in first.stdout, first.stdout[-2000:]
    saved = (tmp_path / "out" / "ckpt" / "latest").read_text().strip()
    again = subprocess.run(["bash", "-euc", line], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                           check=False)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resumed from /out/ckpt/{saved} at step" in again.stdout, again.stdout[-2000:]


def test_a_load_folder_with_files_but_no_checkpoint_is_refused_before_a_step(job: str, tmp_path: Path) -> None:
    """What a first save that never completed leaves (its folder, no `latest`) is not trained over."""
    (tmp_path / "ckpt" / "iter_0000004").mkdir(parents=True)
    done = torchrun(job, tmp_path, "--tp", "2", "--save", "/out/ckpt", "--load", "/out/ckpt")
    assert refused(done) == ("train-gpt: --load /out/ckpt holds iter_0000004 but no complete checkpoint (no latest): "
                             "pass the --save folder of an earlier run, or an empty folder to start from step 0")
    assert "step " not in done.stdout, done.stdout[-2000:]  # nothing trained, nothing loaded


def refused(done: subprocess.CompletedProcess[str]) -> str:
    errors = said(done)
    assert done.returncode != 0 and errors, done.stderr[-3000:]
    assert len(errors) == 1, errors
    return errors[0]


def test_a_truncated_shard_is_refused_in_one_line(job: str, killed: Path, tmp_path: Path) -> None:
    copy = tmp_path / "ckpt"
    shutil.copytree(killed / "ckpt", copy)
    shard = sorted((copy / (copy / "latest").read_text().strip()).glob("*.distcp"))[0]
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    line = refused(torchrun(job, tmp_path, "--load", "/out/ckpt"))
    assert f"{shard.name} is truncated" in line


def test_a_flipped_byte_is_refused_in_one_line(job: str, killed: Path, tmp_path: Path) -> None:
    """Before: a shard with one byte changed (same size) loaded silently and the run ended in NaN a step later.
    The save wrote every file's sha256 (checksums.sha256); the load checks them first."""
    copy = tmp_path / "ckpt"
    shutil.copytree(killed / "ckpt", copy)
    shard = sorted((copy / (copy / "latest").read_text().strip()).glob("*.distcp"))[-1]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01
    shard.write_bytes(bytes(data))
    line = refused(torchrun(job, tmp_path, "--load", "/out/ckpt"))
    assert f"{shard.name} is not the one saved" in line and "checksums.sha256" in line, line


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


def tmpfs_bytes(folder: Path) -> int:
    """What ``folder``'s files take on a tmpfs: whole 4 KiB pages."""
    return sum(-(-p.stat().st_size // 4096) * 4096 for p in folder.rglob("*") if p.is_file())


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_full_disk_is_named_in_one_line_and_latest_stays_right(job: str, killed: Path, tmp_path: Path,
                                                                 mode: str) -> None:
    """A tmpfs with room for one checkpoint and a half: step 4's fits, step 8's does not."""
    one = tmpfs_bytes(killed / "ckpt" / "iter_0000004")
    size_k = one * 3 // 2 // 1024
    done = torchrun(job, tmp_path, "--tp", "2", "--save", "/ck", "--save-interval", "4",
                    *(["--async-save"] if mode == "async" else []),
                    docker=("--tmpfs", f"/ck:size={size_k}k"), then="cat /ck/latest > /out/latest")
    print(f"{mode}: exit {done.returncode}, {len(done.stderr.splitlines())} lines on stderr; said: {said(done)}")
    assert refused(done) == ("train-gpt: no space left on /ck: the checkpoint at step 8 is incomplete; latest still "
                             "points to step 4 (free space there, then resume with --load)")
    assert done.returncode == 1
    assert (tmp_path / "latest").read_text() == "iter_0000004"
    assert "checkpoint /ck/iter_0000004 saved at step 4" in done.stdout


def test_a_read_only_save_folder_is_refused_before_a_step(job: str, tmp_path: Path) -> None:
    (tmp_path / "ro" / "ckpt").mkdir(parents=True)
    (tmp_path / "ro" / "ckpt" / "sentinel").write_text("keep")
    done = torchrun(job, tmp_path, "--tp", "2", "--save", "/ro/ckpt", "--save-interval", "4",
                    docker=("-v", f"{tmp_path / 'ro'}:/ro:ro"))
    assert refused(done) == ("train-gpt: --save /ro/ckpt: cannot write in /ro/ckpt (Read-only file system): pass a "
                             "folder this job can write")
    assert "step " not in done.stdout, done.stdout[-2000:]  # not one step trained
    assert [p.name for p in (tmp_path / "ro" / "ckpt").iterdir()] == ["sentinel"]


def test_a_second_job_on_the_same_folder_is_refused_before_it_writes(job: str, tmp_path: Path) -> None:
    """Job A saves every 20 steps; job B, pointed at A's folder, stops before it writes, naming A. Once A is
    killed (SIGKILL: no chance to clean up), a resumed job on the same folder runs: the lock died with A."""
    first = torchrun(job, tmp_path, "--tp", "2", "--steps", "100000", "--save", "/out/ckpt", "--save-interval", "20",
                     detach=True)
    assert first.returncode == 0, first.stderr
    a = first.name  # type: ignore[attr-defined]
    try:
        wait_for(tmp_path / "ckpt" / "iter_0000040", a)  # step 20's save is complete: A saves in line
        before = digest(tmp_path / "ckpt" / "iter_0000020")
        second = torchrun(job, tmp_path, "--tp", "2", "--save", "/out/ckpt", "--save-interval", "4")
        line = refused(second)
        print(f"second job: exit {second.returncode}: {line}")
        assert re.fullmatch(r"train-gpt: --save /out/ckpt: /out/ckpt is being written by another job \(train-gpt, "
                            r"pid \d+ on host \w+, started \S+\): let it finish or stop it, or pass another folder",
                            line), line
        assert running(a)
        assert digest(tmp_path / "ckpt" / "iter_0000020") == before
    finally:
        subprocess.run(["docker", "kill", "--signal", "KILL", a], capture_output=True, check=False)
        ended(a)
    saved = int((tmp_path / "ckpt" / "latest").read_text().strip().removeprefix("iter_"))
    resumed = torchrun(job, tmp_path, "--pp", "2", "--load", "/out/ckpt", "--save", "/out/ckpt", "--save-interval",
                       "4", "--steps", str(saved + 4))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resumed from /out/ckpt/iter_{saved:07d} at step {saved}" in resumed.stdout
    assert (tmp_path / "ckpt" / "latest").read_text() == f"iter_{saved + 4:07d}"


SLOW = ("--hidden", "256", "--ffn", "1024", "--global-batch", "32")
"""Sizes that make a step take about a second on two CPU ranks, so that SIGTERM lands while the background
save of step 4 is in flight (it is named in `latest` only at a later step)."""


def test_sigterm_lets_the_background_save_finish_and_names_it_in_latest(job: str, tmp_path: Path) -> None:
    started = torchrun(job, tmp_path, "--tp", "2", *SLOW, "--save", "/out/ckpt", "--save-interval", "4",
                       "--async-save", detach=True)
    assert started.returncode == 0, started.stderr
    name = started.name  # type: ignore[attr-defined]
    try:
        wait_for(tmp_path / "ckpt" / "iter_0000004", name)  # the save of step 4 has begun
        subprocess.run(["docker", "kill", "--signal", "TERM", name], capture_output=True, check=True)
        done = ended(name)
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
    print(f"exit {done.returncode}; said: {said(done)}")
    line = refused(done)
    assert re.fullmatch(r"train-gpt: SIGTERM after step \d+: (finished the save of step 4|no save in flight), "
                        r"latest points to step 4; stopped \(resume with --load /out/ckpt\)", line), line
    assert (tmp_path / "ckpt" / "latest").read_text() == "iter_0000004"
    assert (tmp_path / "ckpt" / "iter_0000004" / "train_state.json").is_file()


def test_the_jobs_requirements_cannot_change_torch(base: str) -> None:
    torch = subprocess.run(["docker", "run", "--rm", base, "python", "-c", "import torch; print(torch.__version__)"],
                           capture_output=True, text=True, check=True).stdout.strip().split("+")[0]
    other = "2.10.0" if torch != "2.10.0" else "2.9.1"
    built = build_job(base, f"mcore-images-example:refused-{uuid.uuid4().hex[:8]}", extra=f"torch=={other}")
    assert built.returncode != 0, "the build installed another torch"
    assert f"torch=={torch}" in built.stderr or "conflict" in built.stderr.lower(), built.stderr[-3000:]
