"""One smoke run: a layout, a model (dense or MoE) and a layer spec, trained for N real steps.

Follows megatron-core's own minimal loop (parallel_state → GPTModel → DDP → megatron optimizer →
get_forward_backward_func with several micro-batches → finalize_model_grads → step), with the
hooks megatron.training would install set here by hand.
"""

from __future__ import annotations

import inspect
import math
import time
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from megatron.core import parallel_state as ps
from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig, finalize_model_grads
from megatron.core.models.gpt.gpt_model import GPTModel
from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
from megatron.core.pipeline_parallel.schedules import get_forward_backward_func
from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
from megatron.core.transformer.module import Float16Module
from megatron.core.transformer.transformer_config import TransformerConfig

from smoke import faults, globalinit
from smoke.layouts import Layout, ModelShape, Run
from smoke.shards import batch_slice, cp_token_indices


@dataclass(frozen=True)
class Settings:
    """What every run of one invocation shares."""

    cpu: bool
    dtype: str
    steps: int
    global_batch: int
    shape: ModelShape
    seed: int
    lr: float
    timeout_s: float
    dist_opt: bool
    fault: str | None = None
    fault_rank: int = -1

    @property
    def torch_dtype(self) -> torch.dtype:
        return torch.bfloat16 if self.dtype == "bf16" else torch.float32

    @property
    def device(self) -> torch.device:
        return torch.device("cpu") if self.cpu else torch.device("cuda", torch.cuda.current_device())


def _supported(func: Any, **kwargs: Any) -> dict[str, Any]:
    """Keep only the keyword arguments ``func`` accepts (megatron-core grows options per release)."""
    params = inspect.signature(func).parameters
    return {k: v for k, v in kwargs.items() if k in params}


def init_parallel(lay: Layout, st: Settings) -> None:
    """Re-initialise megatron's process groups for ``lay`` (the world group stays: NCCL paid once)."""
    ps.destroy_model_parallel()
    ps.initialize_model_parallel(
        **_supported(
            ps.initialize_model_parallel,
            tensor_model_parallel_size=lay.tp,
            pipeline_model_parallel_size=lay.pp,
            virtual_pipeline_model_parallel_size=lay.vpp if lay.vpp > 1 else None,
            context_parallel_size=lay.cp,
            expert_model_parallel_size=lay.ep,
            distributed_timeout_minutes=st.timeout_s / 60.0,
            create_gloo_process_groups=st.cpu,
        )
    )
    model_parallel_cuda_manual_seed(st.seed)


def transformer_config(run: Run, st: Settings) -> TransformerConfig:
    """The small GPT's config; MoE, sequence parallelism and dispatcher follow the run and device."""
    lay, sh = run.layout, st.shape
    moe: dict[str, Any] = {}
    if run.model == "moe":
        moe = dict(
            num_moe_experts=sh.experts,
            moe_router_topk=sh.topk,
            moe_ffn_hidden_size=sh.moe_ffn,
            # alltoall creates a CUDA stream when built; gloo runs use the allgather dispatcher.
            moe_token_dispatcher_type="allgather" if st.cpu else "alltoall",
            # No aux loss: it would add a routing-dependent term to the parity comparison.
            moe_router_load_balancing_type="none",
            moe_aux_loss_coeff=0.0,
            moe_router_dtype="fp32",
            moe_grouped_gemm=False,
        )
    return TransformerConfig(
        num_layers=sh.layers,
        hidden_size=sh.hidden,
        num_attention_heads=sh.heads,
        ffn_hidden_size=sh.ffn,
        gated_linear_unit=True,
        activation_func=F.silu,
        add_bias_linear=False,  # megatron-core requires it for MoE with expert-TP; kept for dense too
        hidden_dropout=0.0,
        attention_dropout=0.0,
        tensor_model_parallel_size=lay.tp,
        pipeline_model_parallel_size=lay.pp,
        virtual_pipeline_model_parallel_size=lay.vpp if lay.vpp > 1 else None,
        context_parallel_size=lay.cp,
        expert_model_parallel_size=lay.ep,
        sequence_parallel=run.spec == "te" and lay.tp > 1,
        pipeline_dtype=st.torch_dtype,
        bf16=st.dtype == "bf16",
        params_dtype=torch.float32,
        use_cpu_initialization=st.cpu,
        # megatron sets the tensor-parallel attributes (which dim is split) only while it
        # initialises; globalinit then overwrites the values from the global model.
        perform_initialization=True,
        calculate_per_token_loss=True,
        # gloo's batched isend/irecv does not keep the pairwise order NCCL's grouped calls keep, so
        # interleaved pipelines swapped activations on CPU (caught by the parity check); unbatch there.
        batch_p2p_comm=not st.cpu,
        **moe,
    )


def block_spec(run: Run, cfg: TransformerConfig, vp: int | None) -> Any:
    """The decoder block spec: local (torch norm, local attention, SequentialMLP) or Transformer Engine.

    A block spec, not a layer spec: given only a layer spec, megatron-core picks the block's final
    norm itself, and picks TE's norm whenever TE is installed, so a "local" run would still call a
    TE kernel (on CPU it fails; on GPU it silently mixes specs).
    """
    from megatron.core.models.gpt import gpt_layer_specs as specs

    return specs.get_gpt_decoder_block_spec(
        cfg, use_transformer_engine=run.spec == "te",
        **_supported(specs.get_gpt_decoder_block_spec, vp_stage=vp))


def build(run: Run, st: Settings, cfg: TransformerConfig) -> list[torch.nn.Module]:
    """Model chunks of this rank (several with vpp), name-seeded, cast, wrapped in megatron DDP."""
    lay, sh = run.layout, st.shape
    chunks: list[torch.nn.Module] = []
    for vp in range(lay.vpp):
        stage = {"ignore_virtual": False, "vp_stage": vp} if lay.vpp > 1 else {}
        model = GPTModel(
            config=cfg,
            transformer_layer_spec=block_spec(run, cfg, vp if lay.vpp > 1 else None),
            vocab_size=sh.vocab,
            max_sequence_length=sh.seq,
            pre_process=ps.is_pipeline_first_stage(**stage),
            post_process=ps.is_pipeline_last_stage(**stage),
            share_embeddings_and_output_weights=False,
            # rope reads CUDA state in megatron-core; the CPU runs use learned positions instead.
            position_embedding_type="learned_absolute" if st.cpu else "rope",
            **({"vp_stage": vp} if lay.vpp > 1 else {}),
        )
        if not st.cpu:
            model.cuda(torch.cuda.current_device())
        globalinit.apply(model, base_seed=st.seed, shape=sh, gated=cfg.gated_linear_unit)
        if cfg.bf16:
            model = Float16Module(cfg, model)
        ddp = DistributedDataParallelConfig(
            grad_reduce_in_fp32=True,
            overlap_grad_reduce=False,
            use_distributed_optimizer=st.dist_opt,
            check_for_nan_in_grad=True,
        )
        chunks.append(DistributedDataParallel(config=cfg, ddp_config=ddp, module=model))
    return chunks


def micro_batches(st: Settings, lay: Layout) -> list[dict[str, Any]]:
    """This rank's micro-batches (size 1) of the fixed global batch every layout trains on."""
    sh, dev = st.shape, st.device
    gen = torch.Generator().manual_seed(st.seed + 1)
    tokens = torch.randint(0, sh.vocab, (st.global_batch, sh.seq + 1), generator=gen)
    start, stop = batch_slice(st.global_batch, ps.get_data_parallel_world_size(), ps.get_data_parallel_rank())
    positions = torch.arange(sh.seq)
    if lay.cp > 1:
        positions = torch.tensor(cp_token_indices(sh.seq, lay.cp, ps.get_context_parallel_rank()))
    mask = None
    if lay.cp == 1:  # TE's causal attention makes its own mask; the local spec needs one
        mask = torch.triu(torch.ones(sh.seq, sh.seq, dtype=torch.bool), diagonal=1)[None, None].to(dev)
    out = []
    for row in tokens[start:stop]:
        out.append({
            "tokens": row[:-1][positions][None].to(dev),
            "labels": row[1:][positions][None].to(dev),
            "position_ids": positions[None].to(dev),
            "attention_mask": mask,
        })
    return out


def _loss_func(output: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token loss sum and token count: megatron divides by the global count in finalize_model_grads."""
    losses = output.float().reshape(-1)
    total = losses.sum()
    count = torch.tensor(losses.numel(), dtype=torch.int, device=losses.device)
    return total, count, {"lm loss": torch.stack([total.detach(), count.float()])}


def _forward_step(data: Any, model: torch.nn.Module) -> tuple[torch.Tensor, Any]:
    mb = next(data)
    out = model(mb["tokens"], mb["position_ids"], mb["attention_mask"], labels=mb["labels"])
    return out, partial(_loss_func)


def _checksums(chunks: list[torch.nn.Module]) -> tuple[float, float]:
    """(dense, expert) float64 sums of parameter values: replicas must hold identical weights."""
    dense = expert = 0.0
    for chunk in chunks:
        for name, p in chunk.named_parameters():
            value = float(p.detach().double().abs().sum() + p.detach().double().sum())
            if ".experts." in name:
                expert += value
            else:
                dense += value
    return dense, expert


def _sync(st: Settings) -> None:
    if not st.cpu:
        torch.cuda.synchronize()


def train(run: Run, st: Settings) -> dict[str, Any]:
    """Build and train one run on this rank; returns this rank's record for rank 0 to judge."""
    t0 = time.perf_counter()
    lay = run.layout
    init_parallel(lay, st)
    cfg = transformer_config(run, st)
    chunks = build(run, st, cfg)
    opt = get_megatron_optimizer(
        OptimizerConfig(
            optimizer="adam", lr=st.lr, weight_decay=0.0, adam_beta2=0.95, clip_grad=1.0,
            bf16=cfg.bf16, params_dtype=torch.float32, use_distributed_optimizer=st.dist_opt,
        ),
        chunks,
        **_supported(get_megatron_optimizer, use_gloo_process_groups=st.cpu),
    )
    # What megatron.training's setup_model_and_optimizer would install:
    cfg.no_sync_func = [c.no_sync for c in chunks] if len(chunks) > 1 else chunks[0].no_sync
    cfg.finalize_model_grads_func = finalize_model_grads
    cfg.grad_scale_func = opt.scale_loss
    mbs = micro_batches(st, lay)
    last = ps.is_pipeline_last_stage()
    _sync(st)
    build_s = time.perf_counter() - t0
    forward_backward = get_forward_backward_func()
    losses: list[float] = []
    norms: list[float] = []
    step_s: list[float] = []
    for step in range(st.steps):
        faults.maybe(st.fault, st.fault_rank, step)
        t = time.perf_counter()
        for chunk in chunks:
            chunk.zero_grad_buffer()
        opt.zero_grad()
        data = [iter(mbs) for _ in chunks] if len(chunks) > 1 else iter(mbs)
        reduced = forward_backward(
            forward_step_func=_forward_step,
            data_iterator=data,
            model=chunks if len(chunks) > 1 else chunks[0],
            num_microbatches=len(mbs),
            seq_length=st.shape.seq,
            micro_batch_size=1,
            decoder_seq_length=st.shape.seq,
            forward_only=False,
        )
        _, grad_norm, _ = opt.step()
        loss = math.nan
        if last:
            pair = torch.stack([r["lm loss"] for r in reduced]).sum(0)
            torch.distributed.all_reduce(pair, group=ps.get_data_parallel_group(with_context_parallel=True))
            loss = float(pair[0] / pair[1])
        _sync(st)
        step_s.append(time.perf_counter() - t)
        losses.append(loss)
        norms.append(float(grad_norm) if grad_norm is not None else math.nan)
    dense, expert = _checksums(chunks)
    dp_group = ps.get_data_parallel_group(with_context_parallel=True)
    edp_group = ps.get_expert_data_parallel_group() if run.model == "moe" else dp_group
    record = {
        "rank": torch.distributed.get_rank(),
        "last_stage": last,
        "losses": losses,
        "grad_norms": norms,
        "step_s": step_s,
        "build_s": build_s,
        "dense_sum": dense,
        "expert_sum": expert,
        "dp_group": sorted(torch.distributed.get_process_group_ranks(dp_group)),
        "edp_group": sorted(torch.distributed.get_process_group_ranks(edp_group)),
    }
    del opt, chunks
    ps.destroy_model_parallel()
    return record


def process_group_timeout(seconds: float) -> timedelta:
    """The collective timeout: short so a hung collective fails a CI run instead of stalling it."""
    return timedelta(seconds=seconds)
