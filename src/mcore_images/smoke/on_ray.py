"""The smoke's ranks as Ray actors, the way verl runs its Megatron workers (`python -m mcore_images.smoke --ray`).

A Ray head is started in this process (or the cluster ``RAY_ADDRESS`` names is joined); one actor per
rank is placed, each joins the same torch.distributed group (gloo on CPU, NCCL on GPUs) through the
env:// rendezvous torchrun would give it, and runs the smoke's own rank code (smoke.worker) unchanged:
the TP/PP/EP forward-backward, parity and checkpoint round trips. A rank that raises ends its actor
(the worker leaves with os._exit, as under torchrun); the first actor that dies or returns non-zero
ends the run here, and the other actors are killed at once rather than left waiting in a collective.

Needs ``ray`` (verl's images carry it); imported only when ``--ray`` is asked for.
"""

from __future__ import annotations

import os
import time
from typing import Any

POLL_S = 0.5
"""How often the driver looks for an actor that ended.

This module imports nothing heavy at its top: each actor's process unpickles `_RankActor` from it, and a
megatron-core imported then (smoke.kit.bootstrap imports it) would bind Transformer Engine before a CPU
run's shim hides it, so the actors' grad norm would call TE's CUDA kernels."""


def _rank_main(env: dict[str, str], argv: list[str]) -> int:
    """One rank inside its actor: the environment torchrun would give it, then smoke.worker."""
    os.environ.update(env)
    from mcore_images.smoke import args as cli_args
    from mcore_images.smoke import worker

    args = cli_args.normalise(cli_args.build_parser().parse_args(argv))
    return worker.main(args, argv)


def run_ranks(world: int, argv: list[str], env: dict[str, str], wait_s: float, cpu: bool) -> tuple[
        int | None, bool, dict[str, Any]]:
    """Run ``world`` ranks as Ray actors; (exit code or None when stopped, whether ``wait_s`` ran out, what
    the certificate records about Ray)."""
    import ray

    from mcore_images.smoke.kit.bootstrap import free_port

    started = time.time()
    address = os.environ.get("RAY_ADDRESS") or None
    ray.init(address=address, include_dashboard=False, log_to_driver=True, ignore_reinit_error=True,
             **({} if address else {"num_cpus": max(world, os.cpu_count() or 1), "_node_ip_address": "127.0.0.1"}))
    head_s = time.time() - started
    master = {"MASTER_ADDR": "127.0.0.1" if address is None else ray.util.get_node_ip_address(),
              "MASTER_PORT": str(free_port())}
    runner = ray.remote(num_cpus=1, num_gpus=0 if cpu else 1, max_restarts=0)(_RankActor)
    actors = [runner.remote() for _ in range(world)]
    pending = {
        actor.run.remote({**env, **master, "RANK": str(rank), "LOCAL_RANK": str(rank if address is None else 0),
                          "WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(world if address is None else 1)},
                         argv): rank
        for rank, actor in enumerate(actors)}
    codes: dict[int, int] = {}
    failed: str | None = None
    fired = False
    try:
        while pending and failed is None:
            if time.time() - started > wait_s:
                fired = True
                break
            done, _ = ray.wait(list(pending), timeout=POLL_S)
            for ref in done:
                rank = pending.pop(ref)
                try:
                    codes[rank] = int(ray.get(ref))
                except ray.exceptions.RayError as error:  # the actor died: the rank left with os._exit
                    codes[rank] = 1
                    failed = f"rank {rank}'s actor ended: {type(error).__name__}"
                if codes[rank] != 0 and failed is None:
                    failed = f"rank {rank} exited {codes[rank]}"
    finally:
        for actor in actors:
            ray.kill(actor, no_restart=True)
        ray.shutdown()
    if failed:
        print(f"[smoke] under Ray: {failed}; the other actors were stopped", flush=True)
    rc = None if fired else (max(codes.values()) if codes else 1)
    record = {"ray": ray.__version__, "actors": world, "address": address or "local head",
              "head_start_s": round(head_s, 2), "first_failure": failed}
    return rc, fired, record


class _RankActor:
    """A Ray actor holding one rank (a class, so Ray gives it a process of its own)."""

    def run(self, env: dict[str, str], argv: list[str]) -> int:
        return _rank_main(env, argv)
