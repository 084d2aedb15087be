"""Megatron distributed checkpoints (``megatron.core.dist_checkpointing``, the default ``torch_dist``
format) for every program on the image: the sharded state, a save (synchronous or in the background), a
check of a checkpoint folder before anything is loaded, and the load.

Every rank saves its shards of the model and of the optimizer state keyed by global names, so a
checkpoint loads into another parallel layout. A checkpoint that cannot be loaded (a missing or truncated
shard, one saved from a model of another shape) is refused by ``verify`` with one line naming the cause,
before any parameter is touched: nothing is ever half-loaded. A save that fails is raised as
``SaveFailed``, one line that names a full file system as such (megatron-core's own errors for it read
"unexpected pos …" or "cannot pickle code objects"). ``writer_outlives_sigterm`` lets a background save
finish after SIGTERM, and ``helpers_die_with_rank`` makes every process a rank starts for its saves end with
that rank, however it ends (its last step, a failure, ``os._exit``, a signal). ``seal`` writes the sha256 of
every file of a complete checkpoint, and ``verify`` checks them before anything is loaded: a shard changed after
the save (a flipped byte, which torch's reader loads silently) is refused in one line naming the file.
"""

from __future__ import annotations

import errno
import hashlib
import importlib.util
import multiprocessing
import os
import signal
import time
from collections.abc import Callable
from multiprocessing.managers import SyncManager
from pathlib import Path
from typing import Any

import torch
from megatron.core import dist_checkpointing
from megatron.core import parallel_state as ps

from mcore_images import create_only
from mcore_images.smoke.kit import folders
from mcore_images.smoke.kit.lifetime import die_with_parent, helpers_die_with_rank
from mcore_images.smoke.kit.releases import supported

CHECKSUMS = "checksums.sha256"
"""sha256 of every file of a complete checkpoint (``sha256sum`` format), written once every rank's files are."""

COMMON_FILES = ("metadata.json", ".metadata")
"""What megatron-core writes next to the shards: its own config and torch's index (the unsharded state
is common.pt up to megatron-core 0.18, a sharded object in the shards from 0.19)."""


NEARLY_FULL = 64 * 2**20
"""Free bytes below which a failed save is put down to a full file system. megatron-core loses a writer's
OSError on its way to rank 0 (gathering it fails with "cannot pickle code objects"), so what is left on
the disk decides."""


class CheckpointError(Exception):
    """A checkpoint that cannot be saved or loaded; str() is one line naming the cause."""


def _save_errors() -> tuple[type[BaseException], ...]:
    """What a failed save raises: torch's CheckpointException derives from BaseException, not Exception (it
    is how megatron-core reports a writer's failure, a full disk included)."""
    from torch.distributed.checkpoint import CheckpointException

    return Exception, CheckpointException


class SaveFailed(CheckpointError):
    """A save that did not complete. ``no_space``: the file system ran out of room. ``everywhere``: every
    rank raised it (megatron-core gathers its writers' failures and raises them on all ranks), so rank 0
    may speak for all; otherwise only the rank that raised it knows."""

    def __init__(self, folder: Path, exc: BaseException) -> None:
        from torch.distributed.checkpoint import CheckpointException

        causes = _causes(exc)
        self.folder = folder
        self.everywhere = any(isinstance(e, CheckpointException) for e in causes)
        self.free = folders.free_bytes(folder)
        self.no_space = self.free < NEARLY_FULL or any(_is_enospc(e) for e in causes)
        self.detail = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        super().__init__(f"no space left on {folder}" if self.no_space else
                         f"the save into {folder} failed ({self.detail}; {self.free / 2**20:.0f} MiB free)")


def _causes(exc: BaseException) -> list[BaseException]:
    """``exc``, what it was raised from, and the per-rank failures a CheckpointException carries."""
    found: list[BaseException] = []
    todo = [exc]
    while todo:
        e = todo.pop()
        if any(e is f for f in found):
            continue
        found.append(e)
        todo += [c for c in (e.__cause__, e.__context__) if c is not None]
        for failure in (getattr(e, "failures", None) or {}).values():
            todo += [f for f in (failure if isinstance(failure, tuple) else (failure,)) if isinstance(f, BaseException)]
    return found


def _is_enospc(exc: BaseException) -> bool:
    return (isinstance(exc, OSError) and exc.errno == errno.ENOSPC) or "No space left on device" in str(exc)


def metadata() -> dict[str, Any]:
    """The sharded-state metadata a checkpoint is saved and loaded with; built anew for each layout
    (megatron-core keeps the data-parallel group in it)."""
    return {
        # The distributed optimizer's one format that reshards across tensor and pipeline parallelism as
        # well as data parallelism (megatron.training's --dist-ckpt-optim-fully-reshardable); its default
        # (fully_sharded_model_space) is deprecated and refused by megatron-core >= 0.16.
        "distrib_optim_sharding_type": "fully_reshardable",
        "dp_cp_group": ps.get_data_parallel_group(with_context_parallel=True),
    }


def sharded_state(models: list[torch.nn.Module], optimizer: Any, loading: bool) -> dict[str, Any]:
    """The model chunks' (unwrapped GPTModels) and the optimizer's sharded state, keyed as
    megatron.training keys them (``model``, or ``model0``, ``model1``… with virtual pipeline stages)."""
    meta = metadata()
    state: dict[str, Any] = ({"model": models[0].sharded_state_dict(metadata=meta)} if len(models) == 1
                             else {f"model{i}": m.sharded_state_dict(metadata=meta) for i, m in enumerate(models)})
    state["optimizer"] = optimizer.sharded_state_dict(state, is_loading=loading, metadata=meta)
    return state


def _writer_ready() -> None:
    # megatron-core's writer processes import psutil without declaring it; without it they die at start
    # and the save waits for them forever.
    if importlib.util.find_spec("psutil") is None:
        raise CheckpointError("psutil is not installed: megatron-core's checkpoint writer needs it "
                              "(install psutil in the image)")


def writer_outlives_sigterm() -> Callable[[], None]:
    """Start the queue megatron-core's background writer sends its results back through now, and return what
    stops it. megatron-core makes that queue on first use in a spawned Manager process, which SIGTERM ends:
    torchrun passes SIGTERM on to a rank's whole process group (killpg) and Slurm to every process of the job
    step, so a background save in flight always failed ("EOFError") and never finished after SIGTERM. This
    one ignores SIGTERM and still ends with its rank (``die_with_parent``), whatever way the rank ends; the
    rank's forked helpers are tied to it too (``helpers_die_with_rank``). Call it on the main thread, before
    the first background save."""
    from megatron.core.dist_checkpointing.strategies import filesystem_async

    helpers_die_with_rank()
    # the module global every megatron-core release from 0.13 to 0.19 keeps the queue in
    if not hasattr(filesystem_async, "_results_queue") or filesystem_async._results_queue is not None:
        return lambda: None
    # The manager starts with SIGTERM ignored (inherited from its first instruction on) and its first act is to
    # tie itself to this rank, which may already have ended by then; die_with_parent is standard library only,
    # so the spawned process imports neither torch nor megatron-core to run it.
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        manager = SyncManager(ctx=multiprocessing.get_context("spawn"))  # what Manager() makes, with an initializer
        manager.start(initializer=die_with_parent, initargs=(os.getpid(),))
    finally:
        signal.signal(signal.SIGTERM, previous)
    filesystem_async._results_queue = manager.Queue()
    return manager.shutdown


class Save:
    """One save in progress: ``seconds`` is the time spent on the training path, ``waited`` the time spent
    in ``finish`` for a background save's files. Every rank calls ``finish`` at the same points. Both raise
    SaveFailed."""

    def __init__(self, models: list[torch.nn.Module], optimizer: Any, folder: Path, background: bool) -> None:
        _writer_ready()
        self.folder, self.queue, self.waited = folder, None, 0.0
        t0 = time.perf_counter()
        try:
            state = sharded_state(models, optimizer, loading=False)
            if background:
                from megatron.core.dist_checkpointing.strategies.async_utils import AsyncCallsQueue

                self.queue = AsyncCallsQueue()
                # megatron-core 0.19 defaults to nvidia-resiliency-ext's writer, which no stack carries; its
                # own writer (the only one before 0.19) is asked for by name where the option exists.
                strategy = supported(dist_checkpointing.save, async_strategy="mcore")
                self.queue.schedule_async_request(
                    dist_checkpointing.save(state, str(folder), async_sharded_save=True, **strategy))
            else:
                dist_checkpointing.save(state, str(folder))
        except _save_errors() as exc:
            raise SaveFailed(folder, exc) from exc
        self.seconds = time.perf_counter() - t0

    def finish(self, blocking: bool = True) -> bool:
        """Whether the checkpoint is complete on every rank (``blocking``: wait until it is)."""
        if self.queue is None:
            return True
        t0 = time.perf_counter()
        try:
            self.queue.maybe_finalize_async_calls(blocking=blocking)
        except _save_errors() as exc:
            raise SaveFailed(self.folder, exc) from exc
        finally:
            self.waited += time.perf_counter() - t0
        if self.queue.get_num_unfinalized_calls():
            return False
        self.queue.close()
        self.queue = None
        return True


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def seal(folder: Path) -> None:
    """Write CHECKSUMS for a complete checkpoint (one rank, after every rank's files are written): the sha256 of
    every file in it, written next to them and renamed into place."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name not in (CHECKSUMS, folders.LOCK_NAME))
    text = "".join(f"{_sha256(p)}  {p.relative_to(folder).as_posix()}\n" for p in files)
    create_only.replace_text(folder / CHECKSUMS, text)


def checksum_problem(folder: Path, share: tuple[int, int] = (0, 1)) -> str | None:
    """Why the checkpoint's files do not match the CHECKSUMS written at save (None when they do, or when it was
    saved without them). ``share``: (this rank, ranks): each rank reads its share of the files."""
    listed = folder / CHECKSUMS
    if not listed.is_file():
        return None
    rank, ranks = share
    for index, line in enumerate(listed.read_text().splitlines()):
        want, _, name = line.partition("  ")
        if index % ranks != rank or not name:
            continue
        path = folder / name
        if not path.is_file():
            return f"checkpoint file {path} is missing (copy the whole folder, or load an earlier checkpoint)"
        got = _sha256(path)
        if got != want:
            return (f"checkpoint file {path} is not the one saved: its sha256 is {got[:16]}…, the save wrote "
                    f"{want[:16]}… ({CHECKSUMS}); copy it again from where it came, or load an earlier checkpoint")
    return None


def verify(folder: Path, state: dict[str, Any]) -> None:
    """Refuse a checkpoint that would fail or half-load: files missing or shorter than torch's index says,
    or tensors this model needs that it lacks or holds in another shape."""
    from megatron.core.dist_checkpointing.dict_utils import nested_values
    from megatron.core.dist_checkpointing.mapping import ShardedTensor
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    if not folder.is_dir():
        raise CheckpointError(f"no checkpoint at {folder}: pass the folder a save wrote")
    missing = [name for name in COMMON_FILES if not (folder / name).is_file()]
    if missing:
        raise CheckpointError(f"{folder} is not a complete megatron checkpoint: {', '.join(missing)} missing "
                              "(the save did not finish; load an earlier one)")
    index = FileSystemReader(str(folder)).read_metadata()
    needed: dict[str, int] = {}
    for info in index.storage_data.values():
        needed[info.relative_path] = max(needed.get(info.relative_path, 0), info.offset + info.length)
    for name, size in sorted(needed.items()):
        path = folder / name
        if not path.is_file():
            raise CheckpointError(f"checkpoint shard {path} is missing (copy the whole folder, or load an "
                                  "earlier checkpoint)")
        if path.stat().st_size < size:
            raise CheckpointError(f"checkpoint shard {path} is truncated: {path.stat().st_size} of {size} bytes "
                                  "(copy it again, or load an earlier checkpoint)")
    ranks = torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1
    rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
    if problem := checksum_problem(folder, (rank, ranks)):
        raise CheckpointError(problem)
    stored = index.state_dict_metadata
    for tensor in nested_values(state):
        if not isinstance(tensor, ShardedTensor) or not tensor.key.startswith(("embedding", "decoder", "output")):
            continue
        saved = stored.get(tensor.key)
        if saved is None:
            raise CheckpointError(f"checkpoint {folder} has no {tensor.key}: it was saved from another model")
        if isinstance(saved, TensorStorageMetadata) and tuple(saved.size) != tuple(tensor.global_shape):
            raise CheckpointError(f"checkpoint {folder} holds {tensor.key} of shape {tuple(saved.size)}, this "
                                  f"model needs {tuple(tensor.global_shape)}: it was saved from a model of "
                                  "another shape")


def every_rank_agrees(problem: str | None) -> None:
    """The ranks' verdicts on a checkpoint, gathered (a collective) before any rank starts loading: a rank that
    found nothing wrong would otherwise wait in the load's collectives for one that gave up. Every rank raises
    the first problem, which names the file; the rank that read it is said after it (ranks split the checksum
    reads, so the rank that finds a file is not the rank that wrote it)."""
    if not torch.distributed.is_initialized():
        if problem:
            raise CheckpointError(problem)
        return
    problems: list[str | None] = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(problems, problem)
    failed = [(r, p) for r, p in enumerate(problems) if p]
    if failed:
        r, first = failed[0]
        raise CheckpointError(first if r == 0 else f"{first} (read by rank {r})")


def load(models: list[torch.nn.Module], optimizer: Any, folder: Path,
         agree: Callable[[str | None], None] = every_rank_agrees) -> None:
    """Verify, then load the model and optimizer state saved (in any layout) in ``folder``. ``agree``: called
    on every rank with this rank's verdict (None, or the line ``verify`` raised) before any collective, so
    that the ranks settle on one report; it raises (or exits) when any rank has a problem."""
    state = sharded_state(models, optimizer, loading=True)
    try:
        verify(folder, state)
    except CheckpointError as exc:
        agree(str(exc))
        raise
    agree(None)
    loaded = dist_checkpointing.load(state, str(folder))
    if len(models) == 1:
        models[0].load_state_dict(loaded["model"])
    else:
        for i, model in enumerate(models):
            model.load_state_dict(loaded[f"model{i}"])
    optimizer.load_state_dict(loaded["optimizer"])


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
