"""The one Megatron-Core bootstrap every program uses: process group, parallel state, DDP + optimizer, a step.

It follows megatron-core's own minimal loop (examples/run_simple_mcore_train_loop.py and the
Utils.initialize_model_parallel helper of its unit tests): init the process group → parallel_state →
seeds → model → Float16Module → megatron DDP → megatron's optimizer (it steps from DDP's main_grad,
which plain torch Adam never sees) → get_forward_backward_func over several micro-batches → step, with
the hooks megatron.training would install (no_sync, finalize_model_grads, grad_scale) set here by hand.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from datetime import timedelta
from functools import partial
from typing import Any

import torch
from megatron.core import parallel_state as ps

from mcore_images.smoke.kit.errors import CouldNotRun
from mcore_images.smoke.kit.releases import supported


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def init_process_group(cpu: bool, timeout_s: float) -> tuple[int, int]:
    """Join the default process group (NCCL on GPUs, gloo on CPU): the one torchrun describes, or a
    one-rank group of this process on loopback. Returns (rank, world size)."""
    if "RANK" not in os.environ:
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(free_port()))
    kwargs: dict[str, Any] = {"backend": "gloo" if cpu else "nccl", "timeout": timedelta(seconds=timeout_s)}
    if not cpu:
        if not torch.cuda.is_available():
            raise CouldNotRun("torch sees no GPU: run on a GPU machine, or pass --cpu for a CPU (gloo) run")
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
        kwargs["device_id"] = device  # NCCL's communicator now, not at the first collective
    if not torch.distributed.is_initialized():
        torch.distributed.init_process_group(**supported(torch.distributed.init_process_group, **kwargs))
    return torch.distributed.get_rank(), torch.distributed.get_world_size()


def init_parallel(*, tp: int = 1, pp: int = 1, vpp: int = 1, cp: int = 1, ep: int = 1, cpu: bool,
                  timeout_s: float, seed: int, graphs: bool = False, te_rng_tracker: bool = False) -> None:
    """(Re-)initialise megatron's process groups for one layout and seed torch's generator and megatron's RNG
    trackers with the base seed, as Megatron-LM's training does (its ``_set_random_seed``); the world group
    stays, so NCCL's setup is paid once per process. ``graphs``: a tracker CUDA graphs can capture (TE's where
    ``te_rng_tracker``, as Megatron-LM chooses for TE layers); the tracker is made anew each time, so that a graphed
    model and the next eager one each get their own kind."""
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    ps.destroy_model_parallel()
    ps.initialize_model_parallel(**supported(
        ps.initialize_model_parallel,
        tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
        virtual_pipeline_model_parallel_size=vpp if vpp > 1 else None, context_parallel_size=cp,
        expert_model_parallel_size=ep, distributed_timeout_minutes=timeout_s / 60.0,
        create_gloo_process_groups=cpu,
    ))
    torch.manual_seed(seed)
    model_parallel_cuda_manual_seed(seed, **supported(model_parallel_cuda_manual_seed, te_rng_tracker=te_rng_tracker,
                                                      use_cudagraphable_rng=graphs, force_reset_rng=True))


def teardown() -> None:
    """Parallel state and the process group, in that order."""
    ps.destroy_model_parallel()
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def ddp_options(*, dist_opt: bool, overlap_grad_reduce: bool = False, check_for_nan: bool = True) -> dict[str, Any]:
    """megatron DDP's settings for every program (the bridge check hands them to the bridges): gradients reduced
    in fp32."""
    return {"grad_reduce_in_fp32": True, "overlap_grad_reduce": overlap_grad_reduce,
            "use_distributed_optimizer": dist_opt, "check_for_nan_in_grad": check_for_nan}


def wrap(models: Sequence[torch.nn.Module], config: Any, *, dist_opt: bool, cpu: bool, lr: float,
         weight_decay: float = 0.0, clip_grad: float = 1.0, overlap_grad_reduce: bool = False,
         check_for_nan: bool = True) -> tuple[list[torch.nn.Module], Any]:
    """Float16Module (bf16) → megatron DDP around each model chunk, megatron's optimizer over them, and the
    training hooks. Returns (chunks, optimizer)."""
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig, finalize_model_grads
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.transformer.module import Float16Module

    ddp_config = DistributedDataParallelConfig(**supported(
        DistributedDataParallelConfig, **ddp_options(dist_opt=dist_opt, overlap_grad_reduce=overlap_grad_reduce,
                                                     check_for_nan=check_for_nan)))
    chunks = [DistributedDataParallel(config=config, ddp_config=ddp_config,
                                      module=Float16Module(config, m) if config.bf16 else m) for m in models]
    opt = get_megatron_optimizer(
        OptimizerConfig(optimizer="adam", lr=lr, weight_decay=weight_decay, adam_beta2=0.95, clip_grad=clip_grad,
                        bf16=config.bf16, params_dtype=torch.float32, use_distributed_optimizer=dist_opt),
        chunks,
        **supported(get_megatron_optimizer, use_gloo_process_groups=cpu),
    )
    # What megatron.training's setup_model_and_optimizer would install:
    config.no_sync_func = [c.no_sync for c in chunks] if len(chunks) > 1 else chunks[0].no_sync
    config.finalize_model_grads_func = finalize_model_grads
    config.grad_scale_func = opt.scale_loss
    return chunks, opt


def lm_loss(output: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token loss sum and token count (megatron divides by the global count in finalize_model_grads;
    configs set calculate_per_token_loss=True)."""
    losses = output.float().reshape(-1)
    total = losses.sum()
    count = torch.tensor(losses.numel(), dtype=torch.int, device=losses.device)
    return total, count, {"lm loss": torch.stack([total.detach(), count.float()])}


def gpt_forward(data: Any, model: torch.nn.Module) -> tuple[torch.Tensor, Any]:
    """Forward step of a GPTModel on a micro-batch dict (tokens, position_ids, attention_mask, labels)."""
    mb = next(data)
    out = model(mb["tokens"], mb["position_ids"], mb["attention_mask"], labels=mb["labels"])
    return out, partial(lm_loss)


def train_step(chunks: list[torch.nn.Module], opt: Any, batches: list[dict[str, Any]], *, seq: int,
               micro_batch: int) -> tuple[list[dict[str, torch.Tensor]], float | None]:
    """One optimizer step over ``batches`` (this rank's micro-batches) through megatron's schedule
    (1F1B or interleaved with several chunks). Returns (per-micro-batch reduced losses on the last
    pipeline stage, grad norm)."""
    from megatron.core.pipeline_parallel.schedules import get_forward_backward_func

    for chunk in chunks:
        chunk.zero_grad_buffer()
    opt.zero_grad()
    data = [iter(batches) for _ in chunks] if len(chunks) > 1 else iter(batches)
    reduced = get_forward_backward_func()(
        forward_step_func=gpt_forward, data_iterator=data, model=chunks if len(chunks) > 1 else chunks[0],
        num_microbatches=len(batches), seq_length=seq, micro_batch_size=micro_batch, decoder_seq_length=seq,
        forward_only=False,
    )
    _, grad_norm, _ = opt.step()
    return reduced, None if grad_norm is None else float(grad_norm)


def reduced_pair(reduced: list[dict[str, torch.Tensor]], group: Any) -> torch.Tensor:
    """[loss sum, token count] of the step over the data-parallel (and context-parallel) group, on the
    device (reading it waits for the step: read it when the step's time has been taken)."""
    pair = torch.stack([r["lm loss"] for r in reduced]).sum(0)
    torch.distributed.all_reduce(pair, group=group)
    return pair


def reduced_loss(reduced: list[dict[str, torch.Tensor]], group: Any) -> float:
    """The step's mean loss per token over the data-parallel (and context-parallel) group."""
    pair = reduced_pair(reduced, group)
    return float(pair[0] / pair[1])
