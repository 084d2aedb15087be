"""`python -m mcore_images.smoke` outside torchrun: plan, start the ranks under torchrun, watch, and certify.

Standard library only, so it also runs where torch is missing (and reports that as "could not run").
The ranks run as ``python -m torch.distributed.run ... -m mcore_images.smoke``; torchrun stops every rank when
one fails, and this launcher kills the whole process group if the run outlives its watchdog.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mcore_images import PACKAGE, create_only, reading
from mcore_images.errors import InputError
from mcore_images.smoke import args as cli_args
from mcore_images.smoke import certificate, layouts
from mcore_images.smoke.attention import table as attention_table
from mcore_images.smoke.kit import errors, folders
from mcore_images.smoke.kit.gpus import count_gpus

GRACE_S = 30.0
"""The launcher's watchdog waits this long past the ranks' own, so theirs reports first."""


def te_installed() -> bool:
    return importlib.util.find_spec("transformer_engine") is not None


def plan_from_args(args: argparse.Namespace, available: int, te_here: bool | None = None) -> layouts.Plan:
    """The plan the ranks will make too (TE presence judged by whether it is installed, unless ``te_here`` says:
    the plan an image, which carries TE, would run)."""
    selected = layouts.parse_layouts(args.layouts)
    world = layouts.choose_world(available, selected)
    te_here = te_installed() if te_here is None else te_here
    te = not args.cpu and args.spec != "local" and te_here
    specs = ("local", "te") if args.spec == "auto" and te else (("local",) if args.spec == "auto" else (args.spec,))
    shape = layouts.CPU_SHAPE if args.cpu else layouts.GPU_SHAPE
    return layouts.plan(world, selected, te=te, models=tuple(args.models), specs=specs, shape=shape,
                        repeat=args.deterministic, checkpoint=args.checkpoint)


def _rank_states(state_dir: Path) -> list[dict[str, Any]]:
    states = []
    for path in sorted(state_dir.glob("rank*.json")):
        try:
            states.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return states


def classify(rc: int | None, cert: dict[str, Any] | None, states: list[dict[str, Any]],
             watchdog_fired: bool) -> tuple[int, str | None]:
    """(exit code, error line) from torchrun's return code, rank 0's certificate and rank states."""
    finished = cert is not None and cert.get("status") in ("passed", "failed") and cert.get("exit_code") in (0, 1)
    if finished and (rc == 0 or cert["status"] == "failed"):
        return cert["exit_code"], cert.get("error")
    if not states:
        return errors.COULD_NOT_RUN, "no rank started (torchrun or rendezvous failed): see the log above"
    could_not = [s for s in states if s.get("code") == errors.COULD_NOT_RUN]
    if could_not:
        return errors.COULD_NOT_RUN, f"rank {could_not[0]['rank']}: {could_not[0]['error']}"
    # The earliest failure is the cause: a rank that raised takes its peers' collectives down with it.
    failed = sorted((s for s in states if s.get("error")), key=lambda s: (s.get("failed_t", float("inf")), s["rank"]))
    if failed:
        first = failed[0]
        return errors.FAILED, f"rank {first['rank']} failed in {first['phase']}: {first['error']}" + _laggards(
            states, first)
    if watchdog_fired:
        phases = sorted({s.get("phase", "?") for s in states})
        return errors.FAILED, f"watchdog: run exceeded its time; ranks were in {phases}"
    stuck = [s for s in states if s.get("phase") != "done"]
    where = f"rank {stuck[0]['rank']} last in {stuck[0]['phase']}" if stuck else "all ranks finished"
    return errors.FAILED, f"torchrun exited {rc}: a rank died without a report ({where})"


def _laggards(states: list[dict[str, Any]], failed: dict[str, Any]) -> str:
    """When a collective timed out: the peers that were in no collective at the time (the ones that
    stopped answering), as a clause of the error line; "" when none can be named."""
    if "timed_out" not in (failed.get("collectives") or {}):
        return ""
    idle = [s for s in states if s is not failed and not s.get("error") and not _issued(s).get("outstanding")]
    return "".join(
        f"; rank {s['rank']} was in no collective (phase {s.get('phase')!r}, "
        f"{_issued(s).get('issued', 0)} issued, last {_issued(s).get('last') or '–'})" for s in idle)


def _issued(state: dict[str, Any]) -> dict[str, Any]:
    return state.get("collectives") or {}


def _stop(proc: subprocess.Popen, now: bool = False) -> None:
    """Stop torchrun and every rank it started: SIGTERM to torchrun's session, then SIGKILL (``now``: SIGKILL at
    once, for a user's Ctrl-C or SIGTERM). Each rank runs in a session of its own that no signal to torchrun's
    reaches; the kernel ends it with torchrun (smoke.kit.lifetime), and its save helpers with it."""
    for sig, wait in ((signal.SIGKILL, 5),) if now else ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def package_roots() -> list[str]:
    """Where this launcher's mcore_images package (the smoke's own, and the tooling data it reads) lives: the
    ranks import the very same copy."""
    return [str(PACKAGE.parent)]


def worker_argv(argv: list[str], out: Path) -> list[str]:
    """The ranks get the user's flags, minus launcher-only ones, plus the certificate folder."""
    result, skip = [], False
    for item in argv:
        if skip:
            skip = False
            continue
        if item in ("--out", "--nproc"):
            skip = True
            continue
        if item.startswith(("--out=", "--nproc=")):
            continue
        result.append(item)
    return [*result, "--out", str(out)]


def launch(args: argparse.Namespace, argv: list[str], target: create_only.Output | None = None) -> int:
    """Plan, run the ranks (under torchrun, or as Ray actors with --ray), then write the final certificate;
    returns the exit code. ``target``: the claimed --out folder, made when missing and marked when the run ends
    (left unmade when nothing was written into it); None: a new temporary folder."""
    if target is None:
        return _launch(args, argv, None)
    with create_only.filled(target) as out:
        return _launch(args, argv, out)


def _launch(args: argparse.Namespace, argv: list[str], out_folder: Path | None) -> int:
    launched = time.time()
    available = args.nproc if args.nproc is not None else (2 if args.cpu else count_gpus())
    the_plan = plan_from_args(args, available)
    if args.inject_fault and args.fault_rank >= the_plan.world:
        raise errors.CouldNotRun(f"--fault-rank {args.fault_rank}: the run has ranks 0 … {the_plan.world - 1}")
    # A folder the user named is checked before anything starts; the default one, inside a new temporary
    # --out, is made by rank 0.
    checkpoints = cli_args.checkpoint_dir(args, out_folder)
    named = bool(the_plan.round_trips and (args.checkpoint_dir or out_folder))
    made = named and cli_args.prepare_checkpoint_dir(args, checkpoints)
    if importlib.util.find_spec("torch") is None:
        if made:
            folders.remove_if_empty(checkpoints)
        raise errors.CouldNotRun("torch is not installed: run the smoke inside an image with torch")
    if args.ray and importlib.util.find_spec("ray") is None:
        if made:
            folders.remove_if_empty(checkpoints)
        raise errors.CouldNotRun("--ray needs ray, which is not installed here: run it in an app image (verl's "
                                 "images carry ray), or drop --ray")
    out = out_folder or Path(tempfile.mkdtemp(prefix="smoke-out-"))
    print(layouts.render_plan(the_plan), flush=True)
    state = Path(tempfile.mkdtemp(prefix="smoke-state-"))
    env = dict(os.environ)
    env.update(
        SMOKE_STATE_DIR=str(state), SMOKE_LAUNCH_T=repr(launched), PYTHONUNBUFFERED="1",
        PYTHONPATH=os.pathsep.join(p for p in (*package_roots(), env.get("PYTHONPATH")) if p),
    )
    for stale in (out / "certificate.json", out / "certificate.md"):
        stale.unlink(missing_ok=True)
    if args.ray:
        return _finish(args, argv, out, state, launched, checkpoints, made,
                       *_run_under_ray(args, the_plan.world, worker_argv(argv, out), env), env=env)
    cmd = [
        # One node: rendezvous on loopback, so a container without a network (or whose hostname does
        # not resolve) starts as fast as any other.
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--local-addr", "127.0.0.1", "--nnodes", "1",
        "--nproc-per-node", str(the_plan.world), "--max-restarts", "0", "-m", "mcore_images.smoke", *worker_argv(argv,
                                                                                                                 out),
    ]
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    fired = False
    try:
        rc: int | None = proc.wait(timeout=args.watchdog + GRACE_S)
    except subprocess.TimeoutExpired:
        print(f"[smoke] launcher watchdog: run exceeded {args.watchdog + GRACE_S:.0f} s, stopping it", flush=True)
        fired = True
        _stop(proc)
        rc = proc.returncode
    except (KeyboardInterrupt, errors.Stopped):  # Ctrl-C, SIGTERM: the ranks' session goes first, whole
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN)
        _stop(proc, now=True)
        shutil.rmtree(state, ignore_errors=True)
        if made:
            folders.remove_if_empty(checkpoints)
        raise
    return _finish(args, argv, out, state, launched, checkpoints, made, rc, fired, None, env=env)


def _run_under_ray(args: argparse.Namespace, world: int, ranks_argv: list[str], env: dict[str, str]) -> tuple[
        int | None, bool, dict[str, Any]]:
    """The ranks as Ray actors (smoke.on_ray); what torchrun's wait gives, and what the certificate records."""
    from mcore_images.smoke import on_ray

    shared = {k: env[k] for k in ("SMOKE_STATE_DIR", "SMOKE_LAUNCH_T", "PYTHONUNBUFFERED", "PYTHONPATH") if k in env}
    os.environ["PYTHONPATH"] = env["PYTHONPATH"]  # the actors' processes start from this one's environment
    return on_ray.run_ranks(world, ranks_argv, {**shared, "SMOKE_LAUNCHER": "ray"}, args.watchdog + GRACE_S, args.cpu)


ATTENTION_FILE = "attention.json"
"""The attention check's section, beside the certificate, before the launcher adds it there."""


def run_attention(args: argparse.Namespace, out: Path, env: dict[str, str]) -> dict[str, Any] | None:
    """The attention check (smoke.attention) as a process of its own once the ranks are gone (the GPU is free, and
    the NVTE variables it sets and FlashAttention's compiles touch no run); its section, or None with --no-attention."""
    if not args.attention:
        return None
    path = out / ATTENTION_FILE
    path.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "mcore_images.smoke.attention", "--out", str(path), *(["--cpu"] if args.cpu else [])]
    print("[smoke] attention check: " + " ".join(cmd), flush=True)
    try:
        rc = subprocess.run(cmd, env=env, timeout=args.watchdog, check=False).returncode
    except subprocess.TimeoutExpired:
        return attention_table.failed_to_finish(f"the attention check did not finish within {args.watchdog:.0f} s "
                                                "(--watchdog)")
    try:
        section = reading.read_json(path, "", "")
    except InputError:
        return attention_table.failed_to_finish(f"the attention check exited {rc} without writing its section")
    path.unlink(missing_ok=True)
    if not isinstance(section, dict):
        return attention_table.failed_to_finish("its section is not an object")
    section.pop(create_only.WRITTEN_BY, None)  # the file's mark (create_only.py), not a part of the section
    return section


def with_attention(code: int, error: str | None, attention: dict[str, Any] | None) -> tuple[int, str | None]:
    """The run's exit code and error once the attention check is counted: a wrong (or crashed) backend fails a run
    that passed; a check that could not run makes it could-not-run (the certificate cannot claim it)."""
    if attention is None or attention.get("status") == "passed":
        return code, error
    line = f"attention check: {attention.get('error')}"
    if attention.get("status") == "failed":
        return errors.FAILED if code == errors.PASSED else code, f"{error}; {line}" if error else line
    return (errors.COULD_NOT_RUN, line) if code == errors.PASSED else (code, error)


def _finish(args: argparse.Namespace, argv: list[str], out: Path, state: Path, launched: float, checkpoints: Path,
            made: bool, rc: int | None, fired: bool, ray_record: dict[str, Any] | None,
            env: dict[str, str] | None = None) -> int:
    """Classify the run from the ranks' results, run the attention check, complete rank 0's certificate and write
    it."""
    exited = time.time()
    attention = None if fired else run_attention(args, out, env if env is not None else dict(os.environ))
    cert_path = out / "certificate.json"
    cert = json.loads(cert_path.read_text()) if cert_path.exists() else None
    states = _rank_states(state)
    code, error = with_attention(*classify(rc, cert, states, fired), attention)
    shutil.rmtree(state, ignore_errors=True)
    if made:
        folders.remove_if_empty(checkpoints)
    if cert is None:
        from mcore_images.smoke.kit import envinfo  # stdlib-only part: package versions

        created = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        cert = certificate.new(["python", "-m", "mcore_images.smoke", *argv], created)
        cert["environment"] = {"packages": envinfo.packages()}
    cert["status"] = errors.STATUS[code]
    cert["exit_code"] = code
    cert["error"] = error
    timing = cert.setdefault("timing", {})
    if "wall_s" in timing:  # the ranks' own: launch → last run judged
        timing["ranks_wall_s"] = timing["wall_s"]
        # after the last run: barrier, destroy_process_group, process exit, torchrun's exit
        timing["teardown_s"] = exited - launched - timing["ranks_wall_s"]
    done = [s["done_t"] for s in states if "done_t" in s]
    if done:  # of that, torchrun's own exit once every rank had torn down
        timing["torchrun_exit_s"] = exited - max(done)
    if attention is not None:
        timing["attention_s"] = time.time() - exited
    timing["wall_s"] = time.time() - launched
    if ray_record is not None:
        cert.setdefault("settings", {})["ray"] = ray_record
    if attention is not None:
        cert["attention"] = attention
    certificate.write(cert, out)
    print(certificate.render_markdown(cert), flush=True)
    print(f"[smoke] certificate: {cert_path} ({cert['status']}, exit {code})", flush=True)
    return code
