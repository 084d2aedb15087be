"""One smoke run: a layout, a model (dense or MoE) and a layer spec, trained for N real steps.

The bootstrap (parallel state, DDP + optimizer + hooks, the step) is the kit's (smoke.kit.bootstrap);
here: the small GPT's config, its name-seeded global initialisation, the fixed batch, and what each
rank records for rank 0 to judge.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from megatron.core import parallel_state as ps
from megatron.core.models.gpt.gpt_model import GPTModel
from megatron.core.transformer.transformer_config import TransformerConfig

from smoke import faults, globalinit
from smoke.kit import bootstrap
from smoke.layouts import Layout, ModelShape, Run
from smoke.shards import batch_slice, cp_token_indices, micro_batch_split


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
    deterministic: bool = False

    @property
    def torch_dtype(self) -> torch.dtype:
        return torch.bfloat16 if self.dtype == "bf16" else torch.float32

    @property
    def device(self) -> torch.device:
        return torch.device("cpu") if self.cpu else torch.device("cuda", torch.cuda.current_device())


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
        deterministic_mode=st.deterministic,
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
        **bootstrap.supported(specs.get_gpt_decoder_block_spec, vp_stage=vp))


def build(run: Run, st: Settings, cfg: TransformerConfig) -> list[torch.nn.Module]:
    """This rank's model chunks (several with vpp), initialised from the name-seeded global model."""
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
        chunks.append(model)
    return chunks


def micro_batches(st: Settings, lay: Layout) -> list[dict[str, Any]]:
    """This rank's share of the fixed global batch every layout trains on, in as few micro-batches as its
    pipeline needs (one per stage): an MoE step is bound by the host per micro-batch (router, permutation,
    per-expert splits), so sequences of one are the slowest way to train the same tokens."""
    sh, dev = st.shape, st.device
    gen = torch.Generator().manual_seed(st.seed + 1)
    tokens = torch.randint(0, sh.vocab, (st.global_batch, sh.seq + 1), generator=gen)
    start, stop = batch_slice(st.global_batch, ps.get_data_parallel_world_size(), ps.get_data_parallel_rank())
    count, size = micro_batch_split(stop - start, lay.pp)
    positions = torch.arange(sh.seq)
    if lay.cp > 1:
        positions = torch.tensor(cp_token_indices(sh.seq, lay.cp, ps.get_context_parallel_rank()))
    mask = None
    if lay.cp == 1:  # TE's causal attention makes its own mask; the local spec needs one
        mask = torch.triu(torch.ones(sh.seq, sh.seq, dtype=torch.bool), diagonal=1)[None, None].to(dev)
    out = []
    for i in range(count):
        rows = tokens[start + i * size: start + (i + 1) * size]
        out.append({
            "tokens": rows[:, :-1][:, positions].to(dev),
            "labels": rows[:, 1:][:, positions].to(dev),
            "position_ids": positions[None].expand(size, -1).to(dev),
            "attention_mask": mask,
        })
    return out


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


@dataclass
class Session:
    """One layout built and wrapped on this rank, ready to step: what train() and the checkpoint round trip
    share."""

    run: Run
    chunks: list[torch.nn.Module]
    opt: Any
    mbs: list[dict[str, Any]]
    last: bool
    dp_group: Any
    build_s: float

    def models(self) -> list[torch.nn.Module]:
        """The GPTModel chunks inside DDP (and Float16Module on GPUs): whose sharded state a checkpoint holds."""
        out = []
        for chunk in self.chunks:
            inner = chunk.module
            out.append(getattr(inner, "module", inner) if not isinstance(inner, GPTModel) else inner)
        return out


def start(run: Run, st: Settings) -> Session:
    """Parallel state for the run's layout, the model (name-seeded global init), DDP + optimizer, the batch."""
    t0 = time.perf_counter()
    lay = run.layout
    bootstrap.init_parallel(tp=lay.tp, pp=lay.pp, vpp=lay.vpp, cp=lay.cp, ep=lay.ep, cpu=st.cpu,
                           timeout_s=st.timeout_s, seed=st.seed)
    cfg = transformer_config(run, st)
    chunks, opt = bootstrap.wrap(build(run, st, cfg), cfg, dist_opt=st.dist_opt, cpu=st.cpu, lr=st.lr)
    mbs = micro_batches(st, lay)
    _sync(st)
    return Session(run, chunks, opt, mbs, ps.is_pipeline_last_stage(),
                   ps.get_data_parallel_group(with_context_parallel=True), time.perf_counter() - t0)


def steps(session: Session, st: Settings, count: int, first: int = 0) -> tuple[list[float], list[float], list[float]]:
    """Train ``count`` steps (numbered from ``first`` for planted faults); (losses, grad norms, seconds)."""
    losses: list[float] = []
    norms: list[float] = []
    step_s: list[float] = []
    for step in range(first, first + count):
        faults.maybe(st.fault, st.fault_rank, step)
        t = time.perf_counter()
        reduced, grad_norm = bootstrap.train_step(session.chunks, session.opt, session.mbs, seq=st.shape.seq,
                                                  micro_batch=session.mbs[0]["tokens"].shape[0])
        loss = bootstrap.reduced_loss(reduced, session.dp_group) if session.last else math.nan
        _sync(st)
        step_s.append(time.perf_counter() - t)
        losses.append(loss)
        norms.append(math.nan if grad_norm is None else grad_norm)
    return losses, norms, step_s


def train(run: Run, st: Settings) -> dict[str, Any]:
    """Build and train one run on this rank; returns this rank's record for rank 0 to judge."""
    session = start(run, st)
    losses, norms, step_s = steps(session, st, st.steps)
    dense, expert = _checksums(session.chunks)
    edp_group = ps.get_expert_data_parallel_group() if run.model == "moe" else session.dp_group
    record = {
        "rank": torch.distributed.get_rank(),
        "last_stage": session.last,
        "losses": losses,
        "grad_norms": norms,
        "step_s": step_s,
        "build_s": session.build_s,
        "dense_sum": dense,
        "expert_sum": expert,
        "dp_group": sorted(torch.distributed.get_process_group_ranks(session.dp_group)),
        "edp_group": sorted(torch.distributed.get_process_group_ranks(edp_group)),
    }
    del session
    ps.destroy_model_parallel()
    return record
