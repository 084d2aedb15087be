"""`python -m mcore_images.smoke` without GPUs: dry run, bad input, exit codes and the launcher's verdicts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mcore_images.smoke.kit import errors
from mcore_images.smoke.launcher import classify, worker_argv
from tests.support.host import without_modules
from tests.unit.conftest import PYTHONPATH


def smoke(*args: str, hide_torch: Path | None = None, first: str | None = None, **env: str
          ) -> subprocess.CompletedProcess:
    """The smoke's launcher; ``hide_torch``: a folder to make torch unimportable from, whatever this host has;
    ``first``: a PYTHONPATH entry before the tool's."""
    clean = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    path = PYTHONPATH if hide_torch is None else f"{without_modules(hide_torch, 'torch')}{os.pathsep}{PYTHONPATH}"
    path = path if first is None else f"{first}{os.pathsep}{path}"
    clean.update(PYTHONPATH=path, CUDA_VISIBLE_DEVICES="", **env)
    return subprocess.run([sys.executable, "-m", "mcore_images.smoke", *args], capture_output=True, text=True,
                          env=clean,
                          timeout=60)


def test_dry_run_without_gpus_shows_the_plan_for_each_machine_size() -> None:
    out = smoke("--dry-run")
    assert out.returncode == 0, out.stderr
    assert "no GPU visible" in out.stdout
    for world in (1, 2, 4, 8):
        assert f"smoke plan: {world} rank(s)" in out.stdout
    assert "tp2-pp2-ep2" in out.stdout


def test_dry_run_for_a_given_size_and_selection() -> None:
    out = smoke("--dry-run", "--nproc", "4", "--layouts", "tp2,pp2-ep2", "--models", "moe")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == "smoke plan: 4 rank(s), 3 run(s) of 4, 1 checkpoint round trip(s) of 1"
    assert "dp4            moe   local baseline" in out.stdout
    assert "dp4 again      moe   local bitwise vs dp4/moe/local (deterministic)" in out.stdout


def test_a_dry_run_without_transformer_engine_says_what_an_image_adds(tmp_path: Path) -> None:
    """Before: a host's dry run (no TE) planned the local spec alone and projected its wall time, a plan no image
    runs, without a word."""
    hidden = without_modules(tmp_path / "no-te", "transformer_engine")
    out = smoke("--dry-run", "--nproc", "8", first=hidden)
    assert out.returncode == 0, out.stderr
    head = out.stdout.splitlines()[0]
    assert head.startswith("smoke plan: 8 rank(s), 17 run(s) of 25"), head
    said = [line for line in out.stdout.splitlines() if "no Transformer Engine" in line]
    assert said == ["this machine has no Transformer Engine, so the plan above is the local spec's alone; in an "
                    "image, which carries TE, --spec auto adds the te spec: 25 more run(s), 42 of 50 (`mcore-images "
                    "smoke --image IMAGE -- --dry-run` shows that plan)"], out.stdout
    assert "\nin an image: projected wall time on 8 × " in out.stdout


@pytest.mark.parametrize("args", [["--spec", "local"], ["--cpu"]])
def test_a_dry_run_that_asks_for_no_te_adds_nothing(tmp_path: Path, args: list[str]) -> None:
    hidden = without_modules(tmp_path / "no-te", "transformer_engine")
    out = smoke("--dry-run", "--nproc", "2", *args, first=hidden)
    assert out.returncode == 0 and "no Transformer Engine" not in out.stdout, out.stdout + out.stderr


def test_a_dry_run_where_transformer_engine_is_plans_it_and_adds_nothing(tmp_path: Path) -> None:
    (tmp_path / "te" / "transformer_engine").mkdir(parents=True)
    (tmp_path / "te" / "transformer_engine" / "__init__.py").write_text("")
    out = smoke("--dry-run", "--nproc", "2", first=str(tmp_path / "te"))
    assert out.returncode == 0 and "no Transformer Engine" not in out.stdout, out.stdout + out.stderr
    assert " te    " in out.stdout


def test_the_deterministic_repeat_is_planned_on_gpus_only_by_default() -> None:
    cpu = smoke("--dry-run", "--cpu", "--nproc", "2", "--layouts", "tp2", "--models", "dense")
    assert cpu.returncode == 0 and "again" not in cpu.stdout
    asked = smoke("--dry-run", "--cpu", "--deterministic", "--nproc", "2", "--layouts", "tp2", "--models", "dense")
    assert "dp2 again      dense local bitwise vs dp2/dense/local" in asked.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["--layouts", "tp16", "--nproc", "8"], "needs 16 GPUs but 8 are available"),
    (["--layouts", "tq2"], "bad layout part"),
    (["--models", "dense,vision"], "unknown model"),
    (["--steps", "1"], "too few"),
    (["--cpu", "--spec", "te"], "--spec te needs GPUs"),
    (["--timeout", "0"], "argument --timeout: 0 is out of range: give a number greater than 0, e.g. 60"),
    (["--nproc", "0"], "--nproc 0 is not a count of ranks: give 1 or more"),
    (["--nproc", "-2"], "--nproc -2 is not a count of ranks"),
    (["--timeout", "nan"], "argument --timeout: nan is not a finite number: give a number greater than 0"),
    (["--watchdog", "inf"], "argument --watchdog: inf is not a finite number"),
    (["--watchdog", "-5"], "argument --watchdog: -5 is out of range: give a number greater than 0, e.g. 900"),
    (["--lr", "0"], "argument --lr: 0 is out of range: give a number greater than 0, e.g. 3e-3"),
    (["--seed", "-1"], "--seed -1 is out of range"),
    (["--seed", str(2**64)], "is out of range: give 0 … 4294967295"),
    (["--fault-rank", "1"], "--fault-rank 1: give a rank (0 or more) with --inject-fault"),
    (["--inject-fault", "raise", "--fault-rank", "-3"], "--fault-rank -3: give a rank"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    out = smoke(*args, "--dry-run")
    assert out.returncode == errors.COULD_NOT_RUN
    assert message in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_a_fault_rank_beyond_the_run_is_refused() -> None:
    out = smoke("--cpu", "--nproc", "2", "--layouts", "tp2", "--inject-fault", "raise", "--fault-rank", "2")
    assert out.returncode == errors.COULD_NOT_RUN
    assert out.stderr.strip() == "smoke: could not run: --fault-rank 2: the run has ranks 0 … 1"


def sentinels(root: Path) -> dict[str, str]:
    """A folder tree of someone else's files."""
    files = {"ckpt/iter_0000100/shard.distcp": "weights", "ckpt/latest": "iter_0000100", "notes.txt": "keep me"}
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return files


@pytest.mark.parametrize("where", ["notes.txt", "notes.txt/sub"])
def test_a_checkpoint_dir_that_cannot_be_a_folder_is_refused_before_anything_runs(tmp_path: Path,
                                                                                   where: str) -> None:
    files = sentinels(tmp_path)
    out = smoke("--cpu", "--nproc", "1", "--checkpoint-dir", str(tmp_path / where))
    assert out.returncode == errors.COULD_NOT_RUN, out.stderr
    line = out.stderr.strip()
    assert line.startswith(f"smoke: could not run: --checkpoint-dir {tmp_path / where}: ") and "\n" not in line
    assert line.endswith(": pass a folder this user can write")
    assert out.stdout == ""  # not even the plan: nothing started
    assert {name: (tmp_path / name).read_text() for name in files} == files


def test_a_missing_checkpoint_dir_is_made_and_an_existing_one_kept(tmp_path: Path) -> None:
    files = sentinels(tmp_path)
    made = tmp_path / "new" / "ckpt"
    out = smoke("--cpu", "--nproc", "1", "--checkpoint-dir", str(made), hide_torch=tmp_path / "hide")
    # torch hidden: the folder was made and checked, then removed again as nothing ran
    assert out.returncode == errors.COULD_NOT_RUN and "torch is not installed" in out.stderr
    assert not made.exists() and (tmp_path / "new").is_dir()
    out = smoke("--cpu", "--nproc", "1", "--checkpoint-dir", str(tmp_path / "ckpt"), hide_torch=tmp_path / "hide")
    assert {name: (tmp_path / name).read_text() for name in files} == files


def test_too_many_gpus_without_dry_run_is_exit_2() -> None:
    out = smoke("--layouts", "tp2", "--nproc", "1")
    assert out.returncode == errors.COULD_NOT_RUN and "needs 2 GPUs but 1" in out.stderr


def test_missing_torch_is_could_not_run(tmp_path: Path) -> None:
    out = smoke("--cpu", "--nproc", "1", hide_torch=tmp_path)
    assert out.returncode == errors.COULD_NOT_RUN and "torch is not installed" in out.stderr


def test_worker_argv_drops_launcher_flags_and_adds_out() -> None:
    argv = ["--layouts", "tp2", "--out", "x", "--nproc=4", "--cpu"]
    assert worker_argv(argv, Path("/c")) == ["--layouts", "tp2", "--cpu", "--out", "/c"]


def _cert(status: str, code: int) -> dict:
    return {"status": status, "exit_code": code, "error": None if code == 0 else "failed: tp2/dense/local"}


def test_launcher_verdicts() -> None:
    done = [{"rank": 0, "phase": "done", "error": None, "code": 0}]
    assert classify(0, _cert("passed", 0), done, False) == (0, None)
    assert classify(1, _cert("failed", 1), done, False) == (1, "failed: tp2/dense/local")
    code, why = classify(1, None, [], False)
    assert code == errors.COULD_NOT_RUN and "no rank started" in (why or "")
    missing = [{"rank": 1, "phase": "import", "error": "No module named 'megatron'", "code": 2}]
    assert classify(1, None, missing, False)[0] == errors.COULD_NOT_RUN
    crash = [{"rank": 0, "phase": "run tp2/dense/local", "error": None, "code": None},
             {"rank": 1, "phase": "run tp2/dense/local", "error": "RuntimeError: boom", "code": 1}]
    code, why = classify(1, _cert("running", -1), crash, False)
    assert code == errors.FAILED and why == "rank 1 failed in run tp2/dense/local: RuntimeError: boom"
    hung = [{"rank": 0, "phase": "run dp1/dense/local", "error": None, "code": None}]
    code, why = classify(-9, None, hung, True)
    assert code == errors.FAILED and "watchdog" in (why or "")
    code, why = classify(-11, None, hung, False)
    assert code == errors.FAILED and "died without a report" in (why or "")
    # a passed certificate but a rank that crashed afterwards still fails the run
    late = [{"rank": 0, "phase": "done", "error": None, "code": 0},
            {"rank": 1, "phase": "done", "error": "SIGSEGV", "code": 1}]
    assert classify(1, _cert("passed", 0), late, False)[0] == errors.FAILED


def test_a_timed_out_collective_names_the_peer_that_stopped_answering() -> None:
    timed_out = {"rank": 0, "phase": "run tp2/dense/local", "code": 1,
                 "error": "rank 0: collective all_reduce #57 on ranks [0, 1], issued 10.2 s ago did not complete",
                 "collectives": {"issued": 57, "last": "all_reduce", "outstanding": "all_reduce #57",
                                 "timed_out": "all_reduce #57"}}
    idle = {"rank": 1, "phase": "run tp2/dense/local", "error": None, "code": None,
            "collectives": {"issued": 56, "last": "broadcast", "outstanding": None}}
    busy = {"rank": 2, "phase": "run tp2/dense/local", "error": None, "code": None,
            "collectives": {"issued": 57, "last": "all_reduce", "outstanding": "all_reduce #57"}}
    code, why = classify(-15, None, [timed_out, idle, busy], False)
    assert code == errors.FAILED
    assert why == ("rank 0 failed in run tp2/dense/local: rank 0: collective all_reduce #57 on ranks [0, 1], issued "
                   "10.2 s ago did not complete; rank 1 was in no collective (phase 'run tp2/dense/local', 56 issued, "
                   "last broadcast)")
    raised = {**timed_out, "collectives": None}
    assert "was in no collective" not in classify(-15, None, [raised, idle], False)[1]


def test_the_earliest_failure_is_reported_not_the_peers_it_took_down() -> None:
    cause = {"rank": 1, "phase": "run dp2/dense/local", "code": 1, "failed_t": 100.0,
             "error": "RuntimeError: injected fault: rank 1 raised at step 1"}
    echo = {"rank": 0, "phase": "run dp2/dense/local", "code": 1, "failed_t": 100.2,
            "error": "RuntimeError: rank 0: coalesced collectives #16 on ranks [0, 1] failed: Connection reset by peer"}
    code, why = classify(1, None, [echo, cause], False)
    assert code == errors.FAILED and why.startswith("rank 1 failed in run dp2/dense/local: RuntimeError: injected")
