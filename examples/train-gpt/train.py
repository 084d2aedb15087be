"""Train a small GPT with megatron-core: flags or a TOML config, a synthetic token stream, loss and
throughput logged, distributed checkpoints every N steps, and resume, also in another parallel layout.

    torchrun --nproc-per-node 2 train.py --config config.toml --tp 2 --save ckpt
    torchrun --nproc-per-node 2 train.py --config config.toml --pp 2 --load ckpt --save ckpt

The data is a stream of arithmetic sequences modulo the vocabulary (a pattern the model can learn, so
the loss falls): sample ``i`` is a function of the seed and ``i`` alone, so a resumed run sees exactly the
samples the interrupted one would have. Checkpoints are megatron-core's ``torch_dist`` format (the image's
``smoke.kit.checkpointing``: model and optimizer, checked before anything is loaded); ``DIR/latest`` names
the newest complete one and is written only once its files are.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import tomllib

DEFAULTS: dict[str, Any] = {
    "tp": 1, "pp": 1, "ep": 1, "layers": 4, "hidden": 64, "heads": 4, "ffn": 128, "vocab": 128, "seq": 64,
    "experts": 0, "global_batch": 8, "steps": 20, "lr": 3e-3, "seed": 1234, "save": None, "load": None,
    "save_interval": 0, "async_save": False, "log_interval": 1, "log_file": None, "cpu": False,
}


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, help="TOML file with any of the options below (flags win)")
    for name, default in DEFAULTS.items():
        flag = "--" + name.replace("_", "-")
        if isinstance(default, bool):
            parser.add_argument(flag, action="store_true", default=None)
        else:
            parser.add_argument(flag, type=type(default) if default is not None else str, default=None)
    args = parser.parse_args(argv)
    values = dict(DEFAULTS)
    if args.config:
        if not args.config.is_file():
            fail(f"no config file {args.config}")
        try:
            config = tomllib.loads(args.config.read_text())
        except tomllib.TOMLDecodeError as exc:
            fail(f"{args.config} is not valid TOML: {exc}")
        unknown = sorted(set(config) - set(DEFAULTS))
        if unknown:
            fail(f"{args.config}: unknown option(s) {', '.join(unknown)}; known: {', '.join(DEFAULTS)}")
        values.update(config)
    values.update({k: v for k, v in vars(args).items() if k in DEFAULTS and v is not None})
    return argparse.Namespace(**values)


def fail(message: str) -> None:
    """One line naming the problem, exit 2: nothing was trained or loaded."""
    print(f"train-gpt: {message}", file=sys.stderr, flush=True)
    os._exit(2)


def batch(args: argparse.Namespace, step: int, dp_rank: int, dp_size: int, device: Any) -> dict[str, Any]:
    """This data-parallel rank's share of the global batch of ``step``."""
    import torch

    per_rank = args.global_batch // dp_size
    rows = []
    for i in range(step * args.global_batch + dp_rank * per_rank, step * args.global_batch + (dp_rank + 1) * per_rank):
        gen = torch.Generator().manual_seed(args.seed * 1_000_003 + i)
        start, stride = torch.randint(0, args.vocab, (2,), generator=gen).tolist()
        rows.append((start + (stride % 7 + 1) * torch.arange(args.seq + 1)) % args.vocab)
    tokens = torch.stack(rows)
    mask = torch.triu(torch.ones(args.seq, args.seq, dtype=torch.bool), diagonal=1)[None, None]
    return {"tokens": tokens[:, :-1].to(device), "labels": tokens[:, 1:].to(device),
            "position_ids": torch.arange(args.seq)[None].expand(per_rank, -1).to(device),
            "attention_mask": mask.to(device)}


def layout_problem(args: argparse.Namespace, world: int) -> str | None:
    """Why this layout cannot hold the model on ``world`` ranks (checked before anything is built)."""
    if world % (args.tp * args.pp * args.ep):
        return f"--tp {args.tp} × --pp {args.pp} × --ep {args.ep} must divide the {world} rank(s)"
    dp = world // (args.tp * args.pp)
    for what, size, by in (("--heads", args.heads, args.tp), ("--vocab", args.vocab, args.tp),
                           ("--ffn", args.ffn, args.tp), ("--layers", args.layers, args.pp),
                           ("--global-batch", args.global_batch, dp), ("--experts", args.experts, args.ep)):
        if size % by:
            return f"{what} {size} does not divide into {by} parts: choose another layout"
    if args.ep > 1 and not args.experts:
        return "--ep needs --experts"
    if args.experts and args.tp > 1 and args.cpu:
        return "MoE with --tp > 1 needs sequence parallelism, which needs Transformer Engine: not on --cpu"
    return None


def build(args: argparse.Namespace) -> list[Any]:
    import torch
    import torch.nn.functional as F
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt import gpt_layer_specs
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.transformer.transformer_config import TransformerConfig

    moe = {} if not args.experts else {
        "num_moe_experts": args.experts, "moe_router_topk": 2, "moe_token_dispatcher_type": "allgather",
        "moe_aux_loss_coeff": 0.0, "moe_router_load_balancing_type": "none", "moe_grouped_gemm": False}
    config = TransformerConfig(
        num_layers=args.layers, hidden_size=args.hidden, num_attention_heads=args.heads, ffn_hidden_size=args.ffn,
        gated_linear_unit=True, activation_func=F.silu, add_bias_linear=False, hidden_dropout=0.0,
        attention_dropout=0.0, tensor_model_parallel_size=args.tp, pipeline_model_parallel_size=args.pp,
        expert_model_parallel_size=args.ep, pipeline_dtype=torch.float32 if args.cpu else torch.bfloat16,
        bf16=not args.cpu, params_dtype=torch.float32, use_cpu_initialization=args.cpu,
        calculate_per_token_loss=True, batch_p2p_comm=not args.cpu, sequence_parallel=args.tp > 1 and not args.cpu,
        **moe)
    spec = gpt_layer_specs.get_gpt_decoder_block_spec(config, use_transformer_engine=not args.cpu)
    model = GPTModel(config=config, transformer_layer_spec=spec, vocab_size=args.vocab, max_sequence_length=args.seq,
                     pre_process=ps.is_pipeline_first_stage(), post_process=ps.is_pipeline_last_stage(),
                     position_embedding_type="learned_absolute" if args.cpu else "rope")
    if not args.cpu:
        model.cuda(torch.cuda.current_device())
    return [model], config


def main(argv: list[str]) -> int:
    args = parse(argv)
    if args.cpu:  # gloo and CPU tensors: megatron-core assumes CUDA in a few places the image's shim covers
        from smoke.kit import cpu_shim

        cpu_shim.install()
        cpu_shim.hide_transformer_engine()
    import megatron.core  # noqa: F401  (the shim patches it)
    import torch

    if args.cpu:
        cpu_shim.patch_megatron()
    from megatron.core import parallel_state as ps
    from smoke.kit import bootstrap, checkpointing

    rank, world = bootstrap.init_process_group(args.cpu, 120)
    problem = layout_problem(args, world)
    if problem:
        fail(problem)
    bootstrap.init_parallel(tp=args.tp, pp=args.pp, ep=args.ep, cpu=args.cpu, timeout_s=120, seed=args.seed)
    models, config = build(args)
    chunks, opt = bootstrap.wrap(models, config, dist_opt=not args.cpu, cpu=args.cpu, lr=args.lr)
    step = 0
    if args.load:
        folder = Path(args.load)
        latest = folder / "latest"
        if latest.is_file():
            folder = folder / latest.read_text().strip()
        try:
            if not (folder / "train_state.json").is_file():
                raise checkpointing.CheckpointError(f"{folder} has no train_state.json: not a checkpoint this "
                                                    "script saved (pass the --save folder of an earlier run)")
            checkpointing.load(models, opt, folder)
        except checkpointing.CheckpointError as exc:
            fail(str(exc))
        step = json.loads((folder / "train_state.json").read_text())["step"]
        if rank == 0:
            print(f"resumed from {folder} at step {step}", flush=True)
    dp_rank, dp_size = ps.get_data_parallel_rank(), ps.get_data_parallel_world_size()
    device = torch.device("cpu") if args.cpu else torch.device("cuda", torch.cuda.current_device())
    log = open(args.log_file, "a") if args.log_file and rank == 0 else None  # noqa: SIM115
    pending = None
    last = ps.is_pipeline_last_stage()
    while step < args.steps:
        t0 = time.perf_counter()
        reduced, grad_norm = bootstrap.train_step(chunks, opt, [batch(args, step, dp_rank, dp_size, device)],
                                                  seq=args.seq, micro_batch=args.global_batch // dp_size)
        pair = bootstrap.reduced_pair(reduced, ps.get_data_parallel_group()) if last else torch.zeros(2, device=device)
        if args.pp > 1:  # the loss lives on the last pipeline stage; rank 0 logs it
            torch.distributed.all_reduce(pair, group=ps.get_pipeline_model_parallel_group())
        loss = float(pair[0] / pair[1])
        seconds = time.perf_counter() - t0
        step += 1
        if rank == 0 and step % args.log_interval == 0:
            entry = {"step": step, "loss": loss, "grad_norm": grad_norm, "tokens_per_s": args.global_batch * args.seq
                     / seconds, "layout": f"tp{args.tp}-pp{args.pp}-ep{args.ep}-dp{dp_size}"}
            print(f"step {step:5d} | loss {loss:.5f} | grad norm {grad_norm:.4f} | "
                  f"{entry['tokens_per_s']:.0f} tokens/s", flush=True)
            if log:
                log.write(json.dumps(entry) + "\n")
                log.flush()
        if pending and pending(blocking=False):  # a background save completed: name it in `latest`
            pending = None
        if args.save and args.save_interval and (step % args.save_interval == 0 or step == args.steps):
            if pending:
                pending(blocking=True)
            pending = save(args, step, models, opt, checkpointing, rank)
            if not args.async_save:
                pending = pending(blocking=True) and None
    if pending:
        pending(blocking=True)
    torch.distributed.barrier()
    bootstrap.teardown()
    return 0


def save(args: argparse.Namespace, step: int, models: list[Any], opt: Any, checkpointing: Any, rank: int) -> Any:
    """Start the save of ``step``; returns what finishes it (waits for a background save, then names it
    in ``latest``: a run killed before that resumes from the previous checkpoint)."""
    import torch

    root = Path(args.save)
    name = f"iter_{step:07d}"
    if rank == 0:
        (root / name).mkdir(parents=True, exist_ok=True)
    torch.distributed.barrier()
    saving = checkpointing.Save(models, opt, root / name, background=args.async_save)

    def finish(blocking: bool) -> bool:
        if not saving.finish(blocking):
            return False
        torch.distributed.barrier()
        if rank == 0:
            (root / name / "train_state.json").write_text(json.dumps({"step": step, "seed": args.seed}))
            tmp = root / "latest.tmp"
            tmp.write_text(name)
            tmp.replace(root / "latest")
            print(f"checkpoint {root / name} saved at step {step}", flush=True)
        return True

    return finish


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
