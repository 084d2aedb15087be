"""One smoke run: a layout, a model (dense or MoE) and a layer spec, trained for N real steps.

The bootstrap (parallel state, DDP + optimizer + hooks, the step) and the GPT builder (config, spec, chunks)
are the kit's (smoke.kit.bootstrap, smoke.kit.gpt_builder); here: what the smoke chooses for its small GPT,
its name-seeded global initialisation, the fixed batch, and what each rank records for rank 0 to judge.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import torch
from megatron.core import parallel_state as ps
from megatron.core.models.gpt.gpt_model import GPTModel
from megatron.core.transformer.transformer_config import TransformerConfig

from mcore_images.smoke import faults, globalinit
from mcore_images.smoke.kit import bootstrap, gpt_builder, seeds
from mcore_images.smoke.kit.model_size import ModelSize
from mcore_images.smoke.layouts import Layout, Run
from mcore_images.smoke.shards import batch_slice, cp_token_indices, micro_batch_split


@dataclass(frozen=True)
class Settings:
    """What every run of one invocation shares."""

    cpu: bool
    dtype: str
    steps: int
    global_batch: int
    shape: ModelSize
    seed: int
    lr: float
    timeout_s: float
    dist_opt: bool
    fault: str | None = None
    fault_rank: int = -1
    deterministic: bool = False
    wgrad_fusion: bool = False

    @property
    def device(self) -> torch.device:
        return torch.device("cpu") if self.cpu else torch.device("cuda", torch.cuda.current_device())


def gpt(run: Run, st: Settings) -> gpt_builder.Gpt:
    """The small GPT of one run: the run's layout and spec, MoE routing that keeps the parity comparison exact."""
    lay = run.layout
    size, routing = st.shape.dense(), None
    if run.model == "moe":
        # alltoall creates a CUDA stream when built; gloo runs use the allgather dispatcher. No aux loss: it
        # would add a routing-dependent term to the parity comparison.
        size, routing = st.shape, gpt_builder.Routing("allgather" if st.cpu else "alltoall")
    return gpt_builder.Gpt(size, spec=run.spec, cpu=st.cpu, dtype=st.dtype, routing=routing, tp=lay.tp, pp=lay.pp,
                           vpp=lay.vpp, cp=lay.cp, ep=lay.ep)


def transformer_config(model: gpt_builder.Gpt, st: Settings) -> TransformerConfig:
    """The GPT's config with the smoke's settings, every one of which this megatron-core must have."""
    cfg, missing = gpt_builder.transformer_config(
        model,
        # megatron sets the tensor-parallel attributes (which dim is split) only while it
        # initialises; globalinit then overwrites the values from the global model.
        perform_initialization=True,
        # gloo's batched isend/irecv does not keep the pairwise order NCCL's grouped calls keep, so
        # interleaved pipelines swapped activations on CPU (caught by the parity check); unbatch there.
        batch_p2p_comm=not st.cpu,
        deterministic_mode=st.deterministic,
        gradient_accumulation_fusion=st.wgrad_fusion,
    )
    if missing:
        raise RuntimeError(f"this megatron-core's TransformerConfig lacks {', '.join(missing)}, which the smoke sets")
    return cfg


def build(run: Run, st: Settings) -> tuple[list[torch.nn.Module], TransformerConfig]:
    """This rank's model chunks (several with vpp), initialised from the name-seeded global model, and their
    config."""
    model = gpt(run, st)
    cfg = transformer_config(model, st)
    chunks = gpt_builder.build(model, cfg)
    for chunk in chunks:
        globalinit.apply(chunk, base_seed=st.seed, shape=st.shape, gated=cfg.gated_linear_unit)
    return chunks, cfg


def micro_batches(st: Settings, lay: Layout) -> list[dict[str, Any]]:
    """This rank's share of the fixed global batch every layout trains on, in as few micro-batches as its
    pipeline needs (one per stage): an MoE step is bound by the host per micro-batch (router, permutation,
    per-expert splits), so sequences of one are the slowest way to train the same tokens."""
    sh, dev = st.shape, st.device
    gen = torch.Generator().manual_seed(seeds.data_seed("smoke-batch", st.seed))
    tokens = torch.randint(0, sh.vocab, (st.global_batch, sh.seq + 1), generator=gen)
    start, stop = batch_slice(st.global_batch, ps.get_data_parallel_world_size(), ps.get_data_parallel_rank())
    count, size = micro_batch_split(stop - start, lay.pp)
    positions = torch.arange(sh.seq)
    if lay.cp > 1:
        positions = torch.tensor(cp_token_indices(sh.seq, lay.cp, ps.get_context_parallel_rank()))
    mask = gpt_builder.causal_mask(sh.seq, dev) if lay.cp == 1 else None
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
    models, cfg = build(run, st)
    chunks, opt = bootstrap.wrap(models, cfg, dist_opt=st.dist_opt, cpu=st.cpu, lr=st.lr)
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
