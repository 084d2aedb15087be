"""The checkpoint round trip: train layout A, save a distributed checkpoint, keep training A, then load the
checkpoint into layout B and train the same steps; B's losses and grad norms must match A's.

The save and load are the kit's (smoke.kit.checkpointing): megatron-core's ``torch_dist`` format, model
and optimizer state (Adam's moments and step, the distributed optimizer's fully reshardable form on GPUs),
resharded on load. The pair marked ``async`` saves in the background while A trains on, and is finished
before B loads.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import torch
from megatron.core import parallel_state as ps

from smoke import train
from smoke.kit import checkpointing
from smoke.layouts import RoundTrip
from smoke.train import Settings

SAVED_AT = 3
"""Steps layout A trains before the checkpoint."""
AFTER = 3
"""Steps trained after it: A straight on, and B from the checkpoint."""


def round_trip(pair: RoundTrip, st: Settings, folder: Path) -> dict[str, Any]:
    """This rank's record of one pair: A's losses and grad norms after the save, B's from the checkpoint,
    and the seconds each part took."""
    t_start = time.perf_counter()
    rank = torch.distributed.get_rank()
    if rank == 0:
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    torch.distributed.barrier()
    session = train.start(pair.save, st)
    train.steps(session, st, SAVED_AT)
    save = checkpointing.Save(session.models(), session.opt, folder, pair.async_save)
    straight, straight_norms, _ = train.steps(session, st, AFTER, first=SAVED_AT)
    save.finish()
    finish_s = save.waited
    last_a = session.last
    del session
    ps.destroy_model_parallel()
    torch.distributed.barrier()

    resumed_session = train.start(pair.load, st)
    t0 = time.perf_counter()
    checkpointing.load(resumed_session.models(), resumed_session.opt, folder)
    load_s = time.perf_counter() - t0
    resumed, resumed_norms, _ = train.steps(resumed_session, st, AFTER, first=SAVED_AT)
    last_b = resumed_session.last
    del resumed_session
    ps.destroy_model_parallel()
    torch.distributed.barrier()
    size = checkpointing.folder_bytes(folder) if rank == 0 else None
    if rank == 0:
        shutil.rmtree(folder, ignore_errors=True)
    return {
        "rank": rank, "last_a": last_a, "last_b": last_b,
        "straight": straight, "straight_norms": straight_norms, "resumed": resumed, "resumed_norms": resumed_norms,
        "save_s": save.seconds, "finish_s": finish_s, "load_s": load_s, "bytes": size,
        "wall_s": time.perf_counter() - t_start,
    }

