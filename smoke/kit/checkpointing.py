"""Megatron distributed checkpoints (``megatron.core.dist_checkpointing``, the default ``torch_dist``
format) for every program on the image: the sharded state, a save (synchronous or in the background), a
check of a checkpoint folder before anything is loaded, and the load.

Every rank saves its shards of the model and of the optimizer state keyed by global names, so a
checkpoint loads into another parallel layout. A checkpoint that cannot be loaded (a missing or truncated
shard, one saved from a model of another shape) is refused by ``verify`` with one line naming the cause,
before any parameter is touched: nothing is ever half-loaded.
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path
from typing import Any

import torch
from megatron.core import dist_checkpointing
from megatron.core import parallel_state as ps

from smoke.kit.bootstrap import supported

COMMON_FILES = ("metadata.json", ".metadata")
"""What megatron-core writes next to the shards: its own config and torch's index (the unsharded state
is common.pt up to megatron-core 0.18, a sharded object in the shards from 0.19)."""


class CheckpointError(Exception):
    """A checkpoint that cannot be saved or loaded; str() is one line naming the cause."""


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


class Save:
    """One save in progress: ``seconds`` is the time spent on the training path, ``waited`` the time spent
    in ``finish`` for a background save's files. Every rank calls ``finish`` at the same points."""

    def __init__(self, models: list[torch.nn.Module], optimizer: Any, folder: Path, background: bool) -> None:
        _writer_ready()
        self.folder, self.queue, self.waited = folder, None, 0.0
        t0 = time.perf_counter()
        state = sharded_state(models, optimizer, loading=False)
        if background:
            from megatron.core.dist_checkpointing.strategies.async_utils import AsyncCallsQueue

            self.queue = AsyncCallsQueue()
            # megatron-core 0.19 defaults to nvidia-resiliency-ext's writer, which no stack carries; its own
            # writer (the only one before 0.19) is asked for by name where the option exists.
            strategy = supported(dist_checkpointing.save, async_strategy="mcore")
            self.queue.schedule_async_request(
                dist_checkpointing.save(state, str(folder), async_sharded_save=True, **strategy))
        else:
            dist_checkpointing.save(state, str(folder))
        self.seconds = time.perf_counter() - t0

    def finish(self, blocking: bool = True) -> bool:
        """Whether the checkpoint is complete on every rank (``blocking``: wait until it is)."""
        if self.queue is None:
            return True
        t0 = time.perf_counter()
        self.queue.maybe_finalize_async_calls(blocking=blocking)
        self.waited += time.perf_counter() - t0
        if self.queue.get_num_unfinalized_calls():
            return False
        self.queue.close()
        self.queue = None
        return True


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


def load(models: list[torch.nn.Module], optimizer: Any, folder: Path) -> None:
    """Verify, then load the model and optimizer state saved (in any layout) in ``folder``."""
    state = sharded_state(models, optimizer, loading=True)
    verify(folder, state)
    loaded = dist_checkpointing.load(state, str(folder))
    if len(models) == 1:
        models[0].load_state_dict(loaded["model"])
    else:
        for i, model in enumerate(models):
            model.load_state_dict(loaded[f"model{i}"])
    optimizer.load_state_dict(loaded["optimizer"])


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
