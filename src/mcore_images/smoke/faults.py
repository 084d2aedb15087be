"""Planted faults (hidden ``--inject-fault``): prove that a crashed or stuck rank fails the run in time."""

from __future__ import annotations

import os
import time

KINDS = ("raise", "hang")


def maybe(kind: str | None, rank: int, step: int) -> None:
    """At step 1 of the first run, make rank ``rank`` raise or stop answering collectives."""
    if kind is None or step != 1 or int(os.environ.get("RANK", "0")) != rank:
        return
    if os.environ.get("SMOKE_FAULT_FIRED"):
        return
    os.environ["SMOKE_FAULT_FIRED"] = "1"
    if kind == "raise":
        raise RuntimeError(f"injected fault: rank {rank} raised at step {step}")
    if kind == "hang":
        print(f"[smoke] injected fault: rank {rank} stops answering at step {step}", flush=True)
        while True:
            time.sleep(3600)
    raise ValueError(f"unknown fault {kind!r}: use one of {KINDS}")
