"""The checkpoint round trip: train layout A, save a distributed checkpoint, keep training A, then load the
checkpoint into layout B and train the same steps; B's losses and grad norms must match A's.

The save and load are the kit's (smoke.kit.checkpointing): megatron-core's ``torch_dist`` format, model
and optimizer state (Adam's moments and step, the distributed optimizer's fully reshardable form on GPUs),
resharded on load. The pair marked ``async`` saves in the background while A trains on, and is finished
before B loads.

Each pair saves into a fresh folder that rank 0 creates inside the folder it is given (``--checkpoint-dir``)
and removes afterwards; nothing else there is touched.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from megatron.core import parallel_state as ps

from mcore_images.smoke import train
from mcore_images.smoke.kit import checkpointing
from mcore_images.smoke.layouts import RoundTrip
from mcore_images.smoke.train import Settings

SAVED_AT = 3
"""Steps layout A trains before the checkpoint."""
AFTER = 3
"""Steps trained after it: A straight on, and B from the checkpoint."""


def fresh_folder(parent: Path, pair: RoundTrip) -> Path:
    """A new folder inside ``parent`` for one pair's checkpoint: rank 0 creates it, every rank learns its
    name (a collective: every rank calls this)."""
    name = [None]
    if torch.distributed.get_rank() == 0:
        tag = re.sub(r"[^A-Za-z0-9]+", "-", pair.id).strip("-")
        name[0] = tempfile.mkdtemp(prefix=f"smoke-{tag}-", dir=parent)
    torch.distributed.broadcast_object_list(name, src=0)
    return Path(name[0])


def round_trip(pair: RoundTrip, st: Settings, parent: Path) -> dict[str, Any]:
    """This rank's record of one pair: A's losses and grad norms after the save, B's from the checkpoint,
    and the seconds each part took."""
    t_start = time.perf_counter()
    rank = torch.distributed.get_rank()
    folder = fresh_folder(parent, pair)
    try:
        return _round_trip(pair, st, folder, rank, t_start)
    except checkpointing.SaveFailed as exc:
        if exc.no_space:
            raise checkpointing.CheckpointError(
                f"no space left on {parent}: the checkpoint of {pair.id} did not fit ({exc.free / 2**20:.1f} MiB "
                "free); give --checkpoint-dir a folder with room") from exc
        raise
    finally:
        if rank == 0:  # the folder fresh_folder made, and only that
            shutil.rmtree(folder, ignore_errors=True)


def _round_trip(pair: RoundTrip, st: Settings, folder: Path, rank: int, t_start: float) -> dict[str, Any]:
    session = train.start(pair.save, st)
    train.steps(session, st, SAVED_AT)
    save = checkpointing.Save(session.models(), session.opt, folder, pair.async_save)
    straight, straight_norms, _ = train.steps(session, st, AFTER, first=SAVED_AT)
    save.finish()
    finish_s = save.waited
    if rank == 0:  # every rank's files are written once finish returns: their sha256, checked at load
        checkpointing.seal(folder)
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
    return {
        "rank": rank, "last_a": last_a, "last_b": last_b,
        "straight": straight, "straight_norms": straight_norms, "resumed": resumed, "resumed_norms": resumed_norms,
        "save_s": save.seconds, "finish_s": finish_s, "load_s": load_s, "bytes": size,
        "wall_s": time.perf_counter() - t_start,
    }

