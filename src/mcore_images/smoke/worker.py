"""What each rank does under torchrun: one process group, every planned run in turn, rank 0 certifies.

A rank that raises ends its process at once (torchrun then stops the others) rather than leaving its
peers waiting in a collective; a collective that has not completed ``--timeout`` seconds after it was
issued ends its rank (smoke.kit.collectives), naming the collective; a rank stuck longer than
``--watchdog`` ends itself. Each rank writes its phase, and how many collectives it has issued, to a
status file the launcher reads afterwards (it names the peer that stopped answering).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from mcore_images import create_only
from mcore_images.smoke import args as cli_args
from mcore_images.smoke import certificate, judge, layouts
from mcore_images.smoke.kit import collectives, determinism, errors, folders, numerics
from mcore_images.smoke.kit import transformer_engine as te


class Status:
    """This rank's phase and error, in ``$SMOKE_STATE_DIR/rankN.json`` (absent under a user's torchrun)."""

    def __init__(self, rank: int) -> None:
        state = os.environ.get("SMOKE_STATE_DIR")
        self.path = Path(state) / f"rank{rank}.json" if state else None
        self.data: dict[str, Any] = {"rank": rank, "phase": "start", "error": None, "code": None}
        self.lock = threading.Lock()  # the collective monitor's thread writes too

    def update(self, **fields: Any) -> None:
        with self.lock:
            self.data.update(fields)
            if self.path:
                create_only.replace_text(self.path, json.dumps(self.data))

    def collective_expired(self, message: str, collectives: dict[str, Any]) -> None:
        self.failed(message, errors.FAILED, collectives=collectives)

    def failed(self, error: str, code: int, **fields: Any) -> None:
        """Record the error with the time it happened: when one rank's failure makes its peers' collectives
        fail too, the launcher reports the earliest, the cause."""
        self.update(error=error, code=code, failed_t=time.time(), **fields)


def start_watchdog(seconds: float, status: Status) -> None:
    """End this process if the whole run takes longer than ``seconds`` (nothing may hang CI)."""

    def fire() -> None:
        msg = f"watchdog: rank {status.data['rank']} still in phase {status.data['phase']!r} after {seconds:.0f} s"
        print(f"[smoke] {msg}", flush=True)
        status.failed(msg, errors.FAILED)
        os._exit(errors.FAILED)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()


def settings_for(args: argparse.Namespace, world: int) -> Any:
    """The shared run settings, derived from flags and world size."""
    from mcore_images.smoke.kit.accumulation import gradient_accumulation_fusion
    from mcore_images.smoke.train import Settings

    return Settings(
        cpu=args.cpu, dtype=args.dtype, steps=args.steps, global_batch=4 * world,
        shape=layouts.CPU_SHAPE if args.cpu else layouts.GPU_SHAPE, seed=args.seed, lr=args.lr,
        timeout_s=args.timeout, dist_opt=args.dist_opt, fault=args.inject_fault, fault_rank=args.fault_rank,
        deterministic=args.deterministic, wgrad_fusion=gradient_accumulation_fusion(args.cpu)["on"],
    )


def _round_trips(the_plan: Any, st: Any, tol: Any, folder: Path, rank: int, world: int,
                 status: Status) -> dict[str, Any] | None:
    """Every planned checkpoint round trip; the certificate's ``checkpoint`` section (on rank 0)."""
    import torch

    from mcore_images.smoke import checkpoint
    from mcore_images.smoke.kit import checkpointing

    # The background saves' helpers (megatron-core's result-queue manager, its forked writers) end with this
    # rank, which leaves with os._exit; the manager is shut down in order once the round trips are done.
    stop_writer = (checkpointing.writer_outlives_sigterm()
                   if any(p.async_save and not p.skip for p in the_plan.round_trips) else lambda: None)
    pairs = []
    for index, pair in enumerate(the_plan.round_trips, 1):
        if pair.skip:
            res = judge.round_trip_skipped(pair)
        else:
            status.update(phase=f"checkpoint {pair.id}")
            try:
                record = checkpoint.round_trip(pair, st, folder)
            except checkpointing.CheckpointError as exc:  # one line that names the cause: no traceback
                print(f"[smoke] rank {rank}: checkpoint {pair.id}: {exc}", flush=True)
                status.failed(str(exc), errors.FAILED)
                os._exit(errors.FAILED)
            records: list[Any] = [None] * world
            torch.distributed.all_gather_object(records, record)
            res = judge.round_trip(pair, records, tol, deterministic=st.cpu or st.deterministic)
        pairs.append(res)
        if rank == 0:
            print(judge.round_trip_line(res, index, len(the_plan.round_trips)), flush=True)
    stop_writer()
    ran = [p for p in pairs if p["status"] != "skipped"]
    verdict = "skipped" if not ran else "passed" if all(p["status"] == "passed" for p in ran) else "failed"
    return {"format": "torch_dist", "saved_after_steps": checkpoint.SAVED_AT, "resumed_steps": checkpoint.AFTER,
            "distributed_optimizer": st.dist_opt, "folder": str(folder), "verdict": verdict, "pairs": pairs}


def main(args: argparse.Namespace, argv: list[str]) -> int:
    """Entry point of one rank; returns its exit code (rank 0's decides the run)."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    status = Status(rank)
    start_watchdog(args.watchdog, status)
    try:
        return _run(args, argv, rank, world, status)
    except errors.CouldNotRun as exc:
        print(f"[smoke] rank {rank}: could not run: {exc}", flush=True)
        status.failed(str(exc), errors.COULD_NOT_RUN)
        os._exit(errors.COULD_NOT_RUN)
    except BaseException as exc:  # any crash must end this rank now, loudly
        traceback.print_exc()
        error = f"{type(exc).__name__}: {exc}".splitlines()[0]
        fields: dict[str, Any] = {}
        if (blamed := collectives.blamed()) is not None:
            if not blamed["raised"]:
                error += f" (collective in flight: {blamed['timed_out']})"
            fields["collectives"] = blamed
        status.failed(error, errors.FAILED, **fields)
        os._exit(errors.FAILED)



def _run(args: argparse.Namespace, argv: list[str], rank: int, world: int, status: Status) -> int:
    t_start = time.time()
    launched = float(os.environ.get("SMOKE_LAUNCH_T", t_start))
    status.update(phase="import")
    maths = numerics.settle(args.dtype, "cpu" if args.cpu else "cuda", args.allow_tf32)
    deterministic = determinism.settle(args.deterministic)
    try:
        import torch

        # before megatron-core binds any collective
        collectives.install(args.timeout, rank=rank, on_expiry=status.collective_expired,
                            publish=lambda state: status.update(collectives=state))
        if args.cpu:
            from mcore_images.smoke.kit import cpu_shim

            cpu_shim.install()
            cpu_shim.hide_transformer_engine()
        import megatron.core

        if args.cpu:
            cpu_shim.patch_megatron()
        from mcore_images.smoke import train
        from mcore_images.smoke.kit import accumulation, bootstrap, envinfo
    except ImportError as exc:
        raise errors.CouldNotRun(f"{exc}: run in an image with torch and megatron-core") from exc
    numerics.apply_to_torch(maths)
    determinism.apply_to_torch(args.deterministic)
    te_ok, te_error = te.state(not args.cpu and args.spec != "local")
    t_imported = time.time()

    status.update(phase="init")
    bootstrap.init_process_group(args.cpu, args.timeout)
    torch.distributed.barrier()
    t_init = time.time()

    specs = ("local", "te") if args.spec == "auto" else (args.spec,)
    if args.spec == "auto" and not te_ok:
        specs = ("local",)
    st = settings_for(args, world)
    the_plan = layouts.plan(world, layouts.parse_layouts(args.layouts), te=te_ok, models=tuple(args.models),
                            specs=specs, shape=st.shape, repeat=args.deterministic, checkpoint=args.checkpoint)
    tol = numerics.parity(maths)
    out = Path(args.out) if args.out else None
    # Under the launcher the checkpoint folder is checked and made already; under a user's torchrun, here
    # (rank 0 only: it creates each pair's folder), before any run.
    ck_folder = cli_args.checkpoint_dir(args, out)
    ck_created = rank == 0 and bool(the_plan.round_trips) and cli_args.prepare_checkpoint_dir(args, ck_folder)
    created = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    cert = certificate.new(["python", "-m", "mcore_images.smoke", *argv], created)
    if rank == 0:
        nodes = int(os.environ.get("GROUP_WORLD_SIZE", os.environ.get("NNODES", "1")))
        cert["environment"] = envinfo.collect(world, nodes, args.cpu)
        cert["environment"]["megatron_core_import"] = megatron.core.__version__
        cert["settings"] = {
            "world_size": world, "nodes": nodes, "backend": "gloo" if args.cpu else "nccl",
            "launcher": os.environ.get("SMOKE_LAUNCHER", "torchrun"),
            "dtype": args.dtype, "steps": args.steps, "global_batch": st.global_batch,
            "micro_batching": "each rank's share of the global batch in one micro-batch per pipeline stage",
            "seq": st.shape.seq, "model_shape": st.shape.__dict__, "specs_run": list(specs),
            "te_available": te_ok, "te_error": te_error, "distributed_optimizer": args.dist_opt,
            "timeout_s": args.timeout, "watchdog_s": args.watchdog, "seed": args.seed, "lr": args.lr,
        }
        cert["settings"]["math"] = maths.to_dict()
        cert["settings"]["determinism"] = deterministic
        cert["settings"]["gradient_accumulation_fusion"] = accumulation.gradient_accumulation_fusion(args.cpu)
        cert["tolerance"] = tol.to_dict()
        print(layouts.render_plan(the_plan), flush=True)
        if out:
            certificate.write(cert, out)

    results: dict[str, dict] = {}
    build_s = steps_s = 0.0
    for index, run in enumerate(the_plan.runs, 1):
        if run.skip:
            res = judge.skipped(run)
        else:
            status.update(phase=f"run {run.id}")
            record = train.train(run, st)
            records: list[Any] = [None] * world
            torch.distributed.all_gather_object(records, record)
            res = judge.evaluate(run, records, tol, results.get(run.baseline_id))
            build_s += res["timing"]["build_s"]
            steps_s += res["timing"]["steps_s"]
        results[run.id] = res
        if rank == 0:
            cert["runs"].append(res)
            print(judge.progress_line(res, index, len(the_plan.runs)), flush=True)
            if out:
                certificate.write(cert, out)

    if the_plan.round_trips:
        cert["checkpoint"] = _round_trips(the_plan, st, tol, ck_folder, rank, world, status)
        if ck_created:
            folders.remove_if_empty(ck_folder)
        if rank == 0 and out:
            certificate.write(cert, out)

    failed = [r["id"] for r in cert["runs"] if r["status"] == "failed"] if rank == 0 else []
    if rank == 0 and cert.get("checkpoint"):
        failed += [f"checkpoint {p['id']}" for p in cert["checkpoint"]["pairs"] if p["status"] == "failed"]
    if te_error and rank == 0:
        failed.append("transformer-engine import")
    code = errors.FAILED if failed else errors.PASSED
    if rank == 0:
        cert["determinism"] = judge.determinism(cert["runs"])
        cert["status"] = "failed" if failed else "passed"
        cert["exit_code"] = code
        cert["error"] = f"failed: {', '.join(failed)}" if failed else None
        cert["timing"] = {
            "wall_s": time.time() - launched, "launch_to_rank_s": t_start - launched,
            "imports_s": t_imported - t_start, "init_s": t_init - t_imported,
            "build_s": build_s, "steps_s": steps_s,
        }
        if out:
            certificate.write(cert, out)
    status.update(phase="teardown", code=code)
    # Every result is written once all ranks pass this barrier; the process then leaves with os._exit
    # (smoke.cli): destroying NCCL's communicators first took seconds per rank and decides nothing.
    torch.distributed.barrier()
    status.update(phase="done", code=code, done_t=time.time())
    return code
