"""`python -m mcore_images.smoke.bench`: training throughput of reference models — tokens/s, TFLOP/s per GPU, MFU.

Runs inside images (standard library + torch + megatron-core, Transformer Engine when present). For
each config (``dense-1b``, ``moe-small``; src/mcore_images/smoke/bench/model.py) and layer spec (local; TE when it
imports) it builds the model through the kit's GPT builder (src/mcore_images/smoke/kit/gpt_builder.py, the smoke's too)
with megatron's own initialisation, wraps it in megatron DDP with
megatron's optimizer (TE's FusedAdam when TE is installed, torch's Adam otherwise — the result names
which), runs warm-up steps, then times steps with CUDA events and reports the median. FLOPs formula,
peaks and MFU: src/mcore_images/smoke/bench/model.py; regression gate against env/bench-baselines.json:
src/mcore_images/smoke/bench/gate.py. One process (one GPU) by default; ``torchrun --nproc-per-node N -m
mcore_images.smoke.bench`` for data parallelism over N GPUs (``--tp`` for tensor parallelism, with sequence parallelism
under TE).

Exit codes: 0 every result passed the gate (or had no baseline), 1 a run failed or regressed,
2 nothing could run (bad flags, no torch / megatron-core / GPU).
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import os
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcore_images import SOURCE_TREE, create_only, reading
from mcore_images.catalogue import flash_attention
from mcore_images.errors import InputError
from mcore_images.options import OneLineParser, number
from mcore_images.smoke import certificate
from mcore_images.smoke.bench import data as bench_data
from mcore_images.smoke.bench import gate as bench_gate
from mcore_images.smoke.bench import graphs
from mcore_images.smoke.bench import model as bench_model
from mcore_images.smoke.bench.model import BenchConfig
from mcore_images.smoke.kit import accumulation, errors, gpt_builder, seeds
from mcore_images.smoke.kit import transformer_engine as te


def default_baselines() -> Path:
    """env/bench-baselines.json of $MCORE_IMAGES_ROOT (images set it), else of the checkout holding smoke/."""
    root = os.environ.get("MCORE_IMAGES_ROOT") or SOURCE_TREE
    return Path(root) / "env" / "bench-baselines.json"
COULD_NOT_RUN = "bench: could not run: "
"""How every line the bench refuses to run with begins."""
OUTPUT_OWNER = "bench"
"""The command the --out folder's marker names (create_only.py): the wrapper's, `mcore-images bench`."""
PROFILED_STEPS = 2
FORMULA = "6·N·T + 12·L·h·s·T + 6·h·V·T (N: active matmul parameters of the layers; no causal halving)"


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m mcore_images.smoke.bench", description=__doc__.split("\n\n")[0],
                      prefix=COULD_NOT_RUN)
    p.add_argument("--configs", default=",".join(bench_model.DEFAULT_CONFIGS),
                   help=f"comma-separated, of: {', '.join(bench_model.CONFIGS)}")
    p.add_argument("--specs", default="auto", help="auto (local, plus te when TE imports), local, te, or local,te")
    p.add_argument("--variants", default=",".join(bench_model.DEFAULT_VARIANTS),
                   help="comma-separated settings to train with, of: "
                        + "; ".join(f"{v.name} ({v.why})" for v in bench_model.VARIANTS.values()))
    p.add_argument("--precisions", default=None,
                   help="comma-separated, of: " + ", ".join(bench_model.PRECISIONS) + " (default: bf16 on GPUs, "
                        "fp32 with --cpu; FP8 rows need the te spec and an FP8 GPU, and each is compared with the "
                        "bf16 row of the same model, which runs too)")
    p.add_argument("--cuda-graphs", default="", metavar="IMPL[,IMPL]",
                   help="beside each TE row, the same row with CUDA graphs captured by each of: "
                        + ", ".join(f"{k} (cuda_graph_impl={v})" for k, v in bench_model.GRAPH_IMPLS.items())
                        + "; each is compared with its eager row (speed-up, loss), and records what was captured")
    p.add_argument("--attention-backend", choices=bench_model.ATTENTION_BACKENDS, default="auto",
                   help="megatron-core's attention_backend for the TE rows (default auto: TE chooses); flash is "
                        "refused where no FlashAttention TE can run is installed, or the one installed was measured "
                        "wrong (catalogue/flash_attention.py)")
    p.add_argument("--dispatcher", choices=("allgather", "alltoall"), default="allgather",
                   help="MoE token dispatcher (default allgather: the bench runs no expert parallelism, and on one "
                        "H200 it stepped moe-small 14 %% faster than alltoall, docs/bench.md)")
    p.add_argument("--profile", action="store_true",
                   help="after the timed steps, profile 2 more (torch profiler) and table where the step time goes")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (kernel selection, allocator)")
    p.add_argument("--steps", type=int, default=10, help="timed steps of each window (median reported)")
    p.add_argument("--repeats", type=int, default=3,
                   help="timed windows of --steps steps, one after another in this process; a row's step time is "
                        "the median of the windows' medians, and their spread is reported (default 3)")
    p.add_argument("--micro-batch", type=int, default=0, help="override the config's micro-batch size")
    p.add_argument("--micro-batches", type=int, default=0, help="override the config's micro-batches per step")
    p.add_argument("--tp", type=int, default=1, help="tensor parallel size (sequence parallel under TE)")
    p.add_argument("--dist-opt", action=argparse.BooleanOptionalAction, default=True,
                   help="megatron distributed optimizer (default on)")
    p.add_argument("--stack", default=None,
                   help="stack name for the baseline key (default: $MCORE_IMAGES_STACK in an image; elsewhere the "
                        "stack of env/stacks.json whose torch, TE and megatron-core pins are installed, else ad hoc "
                        "and ungated)")
    p.add_argument("--baselines", default=None,
                   help="baselines file (default: env/bench-baselines.json of $MCORE_IMAGES_ROOT or of this checkout)")
    p.add_argument("--max-drop-pct", type=number(*bench_gate.MAX_DROP_RANGE, example="5"), default=None,
                   help=f"fail when TFLOP/s drops more than this %% below the baseline "
                        f"(default: the file's, else {bench_gate.DEFAULT_MAX_DROP_PCT:g})")
    p.add_argument("--out", help="folder for bench.json and bench.md")
    p.add_argument("--certificate", metavar="DIR", help="a smoke certificate folder to add the bench section to")
    p.add_argument("--seed", type=int, default=seeds.DEFAULT_SEED,
                   help="base seed of megatron's initialisation and the training tokens (the same for every row)")
    p.add_argument("--timeout", type=number(0, above=True, example="600"), default=600.0,
                   help="seconds before a collective gives up")
    p.add_argument("--write-baselines", metavar="PATH",
                   help="store this run's results as baselines in PATH (merged; existing keys replaced)")
    p.add_argument("--cpu", action="store_true", help="gloo on CPU, fp32 (tests of this code; no numbers)")
    p.add_argument("--dry-run", action="store_true", help="print configs and FLOPs per step; needs no torch")
    return p


def normalise(args: argparse.Namespace) -> argparse.Namespace:
    """Reject bad flags in one line before anything expensive starts."""
    names = [c.strip() for c in args.configs.split(",") if c.strip()]
    bad = [c for c in names if c not in bench_model.CONFIGS]
    if bad or not names:
        raise errors.CouldNotRun(f"unknown config(s) {bad or names}: choose from {', '.join(bench_model.CONFIGS)}")
    args.configs = names
    specs = [s.strip() for s in args.specs.split(",") if s.strip()]
    if not specs or any(s not in ("auto", *gpt_builder.SPECS) for s in specs) or ("auto" in specs and len(specs) > 1):
        raise errors.CouldNotRun(f"bad --specs {args.specs!r}: use auto, local, te or local,te")
    args.specs = specs
    if args.cpu and "te" in specs:
        raise errors.CouldNotRun("--specs te needs a GPU: drop --cpu")
    args.cuda_graphs = _choose(args.cuda_graphs, bench_model.GRAPH_IMPLS, "--cuda-graphs") if args.cuda_graphs else []
    te_only = [flag for flag, on in (("--cuda-graphs", args.cuda_graphs),
                                     ("--attention-backend", args.attention_backend != "auto")) if on]
    if te_only and (args.cpu or specs == ["local"]):
        raise errors.CouldNotRun(f"{te_only[0]} applies to the TE rows, and {'--cpu' if args.cpu else '--specs local'} "
                                 f"runs the local spec only: drop one of them")
    if args.cuda_graphs and args.warmup < graphs.WARMUP_NEEDED:
        raise errors.CouldNotRun(f"--cuda-graphs needs --warmup {graphs.WARMUP_NEEDED} or more (a step that captures "
                                 "and one that replays before the timed steps)")
    if args.attention_backend == "flash" and (problem := te.flash_problem()):
        raise errors.CouldNotRun(problem)
    asked = flash_attention.requested({**os.environ, flash_attention.ASKED: args.attention_backend})
    if asked.conflict:
        raise errors.CouldNotRun(f"{asked.conflict}: unset them, and choose with --attention-backend")
    args.variants = _choose(args.variants, bench_model.VARIANTS, "--variants")
    if needs := sorted({v.dispatcher for n in args.variants if (v := bench_model.VARIANTS[n]).dispatcher}
                       - {args.dispatcher}):
        raise errors.CouldNotRun(f"--variants {','.join(args.variants)} needs the {needs[0]} MoE dispatcher: add "
                                 f"--dispatcher {needs[0]}")
    args.precisions = _choose(args.precisions or ("fp32" if args.cpu else "bf16"), bench_model.PRECISIONS,
                              "--precisions")
    if args.cpu and args.precisions != ["fp32"]:
        raise errors.CouldNotRun("--cpu runs compute in fp32 only: drop --precisions or --cpu")
    if not args.cpu and "fp32" in args.precisions:
        raise errors.CouldNotRun("fp32 is the CPU runs' precision: on GPUs choose bf16 and the fp8 ones")
    if any(bench_model.PRECISIONS[p].fp8 for p in args.precisions) and "bf16" not in args.precisions:
        args.precisions = ["bf16", *args.precisions]  # the FP8 rows are judged against it
    if (args.steps < 1 or args.repeats < 1 or args.warmup < 0 or args.tp < 1 or args.micro_batch < 0
            or args.micro_batches < 0):
        raise errors.CouldNotRun("--steps >= 1, --repeats >= 1, --warmup >= 0, --tp >= 1, micro-batch overrides >= 0")
    if problem := seeds.seed_problem(args.seed):
        raise errors.CouldNotRun(problem)
    if args.baselines is None and default_baselines().is_file():
        args.baselines = str(default_baselines())
    args.baseline_data = None
    if args.baselines:
        if not os.path.lexists(args.baselines):
            raise errors.CouldNotRun(f"baselines file {args.baselines} not found: give an existing --baselines file")
        try:
            args.baseline_data = bench_gate.load_baselines(Path(args.baselines))
        except ValueError as exc:
            raise errors.CouldNotRun(f"{exc}: fix the file or pass another --baselines") from exc
    if args.out:  # the wrapper's rule (`mcore-images bench --out`): a new or empty folder, or one the bench wrote;
        create_only.claim(Path(args.out), OUTPUT_OWNER)  # judged now, claimed again when the results are written
    if args.certificate:
        from mcore_images.smoke import certificate

        if (problem := reading.folder_problem(args.certificate, "--certificate")) and os.path.lexists(args.certificate):
            raise errors.CouldNotRun(f"{problem}: name a smoke certificate folder")
        if not os.path.lexists(Path(args.certificate) / "certificate.json"):
            raise errors.CouldNotRun(f"{args.certificate}/certificate.json not found: run `python -m "
                                     f"mcore_images.smoke --out {args.certificate}` first, or drop --certificate")
        try:
            certificate.read(Path(args.certificate) / "certificate.json")
        except ValueError as exc:
            raise errors.CouldNotRun(f"--certificate: {exc}") from None
    if args.write_baselines:
        _writable_baselines(Path(args.write_baselines))
    return args


def _writable_baselines(path: Path) -> None:
    """--write-baselines judged before anything runs: a new file in a folder that exists, or a baselines file (which
    is merged into): anything else of anyone's (a certificate, a folder, a FIFO) is refused, nothing touched."""
    if os.path.lexists(path):
        if problem := reading.file_problem(path, "--write-baselines"):
            raise errors.CouldNotRun(f"{problem}: give a baselines file to merge into, or a new path")
        try:
            bench_gate.load_baselines(path)
        except ValueError as exc:
            raise errors.CouldNotRun(f"--write-baselines {path} is not a baselines file to merge into ({exc}): give "
                                     "a new path, or an existing baselines file; nothing was changed") from None
    elif problem := reading.folder_problem(path.parent or Path("."), f"--write-baselines {path}: its folder"):
        raise errors.CouldNotRun(f"{problem}: give a path in an existing folder")


def _choose(text: str, known: dict[str, Any], flag: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in known]
    if bad or not names:
        raise errors.CouldNotRun(f"unknown {flag} {bad or names}: choose from {', '.join(known)}")
    return names


def configs_for(args: argparse.Namespace) -> list[BenchConfig]:
    from dataclasses import replace

    out = []
    for name in args.configs:
        cfg = bench_model.CONFIGS[name]
        if args.micro_batch:
            cfg = replace(cfg, micro_batch=args.micro_batch)
        if args.micro_batches:
            cfg = replace(cfg, micro_batches=args.micro_batches)
        out.append(cfg)
    return out


def dry_run(args: argparse.Namespace) -> int:
    for cfg in configs_for(args):
        terms = cfg.flops_terms()
        print(f"{cfg.name}: N={cfg.size.active_params() / 1e9:.3f} B active, "
              f"{cfg.size.total_params() / 1e9:.3f} B total, "
              f"T={cfg.tokens_per_step()} tokens/step, FLOPs/step={sum(terms.values()):.4e} "
              f"(dense {terms['dense']:.3e}, attention {terms['attention']:.3e}, logits {terms['logits']:.3e}); "
              f"{cfg.size.layers} layers, micro-batch {cfg.micro_batch} × {cfg.micro_batches}, predicted peak on one "
              f"GPU {cfg.predicted_peak_gib():.1f} GiB bf16, {cfg.predicted_peak_gib(fp8=True):.1f} GiB FP8")
    graphs = f" × eager and graphs-{', graphs-'.join(args.cuda_graphs)} (TE rows)" if args.cuda_graphs else ""
    print(f"rows per config and spec: variants {', '.join(args.variants)} × precisions {', '.join(args.precisions)}"
          f" (FP8 on the te spec only){graphs}; attention backend {args.attention_backend}")
    return errors.PASSED


# --------------------------------------------------------------------------------------------- torch side


def _optimizer_name(opt: Any) -> str:
    inner = getattr(opt, "chained_optimizers", None) or [opt]
    names = set()
    for o in inner:
        base = getattr(o, "optimizer", o)
        names.add(f"{type(base).__module__.split('.')[0]}.{type(base).__name__}")
    return ",".join(sorted(names))


def gpt(cfg: BenchConfig, spec: str, args: argparse.Namespace) -> gpt_builder.Gpt:
    """The kit's GPT of one config and spec: parameters in bf16 on GPUs, as Megatron-LM keeps them with --bf16;
    MoE routing as Megatron-LM trains (aux loss), grouped GEMMs where TE runs them."""
    routing = None
    if cfg.size.moe:
        routing = gpt_builder.Routing(args.dispatcher, load_balancing="aux_loss", aux_loss_coeff=1e-2,
                                      grouped_gemm=spec == "te")
    dtype = "fp32" if args.cpu else "bf16"
    return gpt_builder.Gpt(cfg.size, spec=spec, cpu=args.cpu, dtype=dtype, params_dtype=dtype, routing=routing,
                           tp=args.tp)


@dataclass(frozen=True)
class Case:
    """One measured row: a config, a layer spec, a variant of settings and a precision."""

    cfg: BenchConfig
    spec: str
    variant: str
    precision: str
    graphs: str | None = None  # a --cuda-graphs name; None: eager
    attention: str = "auto"  # --attention-backend of the TE rows

    @property
    def row_variant(self) -> str:
        return bench_model.row_variant(self.variant, self.graphs, self.attention)

    @property
    def label(self) -> str:
        return f"{self.cfg.name}/{self.spec}/{self.row_variant}/{self.precision}"


def cases(configs: list[BenchConfig], specs: list[str], args: argparse.Namespace) -> list[Case]:
    """Every row to measure, bf16 before the FP8 rows it is compared with, each eager row before its graphed ones;
    FP8, graphs and the attention backend only where TE runs."""
    return [Case(cfg, spec, variant, precision, graphs, args.attention_backend if spec == "te" else "auto")
            for cfg in configs for spec in specs for variant in args.variants for precision in args.precisions
            if spec == "te" or not bench_model.PRECISIONS[precision].fp8
            for graphs in [None, *(args.cuda_graphs if spec == "te" else [])]]


def run_one(case: Case, args: argparse.Namespace, world: int, wgrad_fusion: bool) -> dict[str, Any]:
    """Build, warm up, time (and profile); returns the measured record (raises on failure)."""
    import torch
    from megatron.core import parallel_state as ps

    from mcore_images.smoke.kit import bootstrap

    cfg, spec, cpu = case.cfg, case.spec, args.cpu
    variant = bench_model.VARIANTS[case.variant]
    precision = bench_model.PRECISIONS[case.precision]
    settings, dropped = bench_model.resolve_variant(variant, moe=cfg.size.moe, te=spec == "te", cpu=cpu,
                                                     wgrad_fusion=wgrad_fusion)
    settings.update(precision.settings)
    if case.graphs:
        settings.update(bench_model.graph_settings(case.graphs, moe=cfg.size.moe, te=spec == "te"))
    if case.attention != "auto":
        from megatron.core.transformer.enums import AttnBackend

        settings["attention_backend"] = AttnBackend[case.attention]
    # megatron-core sets the NVTE variables from attention_backend and asserts that those already set agree: each row
    # starts from the process's own, and TE chooses its backend again.
    for name, value in NVTE_AT_START.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    if spec == "te":
        te.forget_attention_choice()
    gc.collect()  # what an earlier run in this process left must not count towards this run's memory
    before_gib = None
    if not cpu:
        torch.cuda.empty_cache()
        before_gib = torch.cuda.memory_allocated() / 2**30
    t0 = time.perf_counter()
    # The same base seed for every row: each row of a config starts from the same weights (FP8 is compared with bf16).
    bootstrap.init_parallel(tp=args.tp, cpu=cpu, timeout_s=args.timeout, seed=args.seed, graphs=bool(case.graphs),
                            te_rng_tracker=bool(case.graphs) and spec == "te")
    dp = ps.get_data_parallel_world_size()
    model = gpt(cfg, spec, args)
    config, unknown = gpt_builder.transformer_config(model, **settings)
    if missing := [k for k in unknown if k in ("cuda_graph_impl", "attention_backend")]:
        raise RuntimeError(f"this megatron-core has no {missing[0]} setting: the row cannot run as named")
    dropped += [f"{k} (not in this megatron-core)" for k in unknown]
    chunks, opt = bootstrap.wrap(gpt_builder.build(model, config), config, dist_opt=args.dist_opt and not cpu,
                                 cpu=cpu, lr=1e-4, weight_decay=0.01, check_for_nan=False)
    device = torch.device("cpu") if cpu else torch.device("cuda", torch.cuda.current_device())
    # A fresh batch every step (src/mcore_images/smoke/bench/data.py); the same ones for every row of a config.
    n_steps = args.warmup + args.steps * args.repeats + (PROFILED_STEPS if args.profile else 0)
    per_step = cfg.micro_batches * cfg.micro_batch
    tokens = bench_data.markov_tokens(cfg.size.vocab, n_steps * per_step, cfg.size.seq + 1, seed=seeds.data_seed(
        "bench-tokens", args.seed, stream=ps.get_data_parallel_rank())).to(device)
    tokens = tokens.view(n_steps, cfg.micro_batches, cfg.micro_batch, cfg.size.seq + 1)
    positions = torch.arange(cfg.size.seq, device=device)[None].expand(cfg.micro_batch, -1)
    mask = gpt_builder.causal_mask(cfg.size.seq, device) if spec == "local" else None
    steps_data = [[{"tokens": tokens[s, i, :, :-1].contiguous(), "labels": tokens[s, i, :, 1:].contiguous(),
                    "position_ids": positions, "attention_mask": mask} for i in range(cfg.micro_batches)]
                  for s in range(n_steps)]
    dp_group = ps.get_data_parallel_group()
    taken = iter(steps_data)

    def step() -> Any:
        reduced, _ = bootstrap.train_step(chunks, opt, next(taken), seq=cfg.size.seq, micro_batch=cfg.micro_batch)
        return bootstrap.reduced_pair(reduced, dp_group)

    capture = graphs.Capture(str(settings["cuda_graph_impl"])) if case.graphs else None
    try:
        return _measure_row(case, args, world, step, chunks, config, opt, dp, capture, t0, before_gib, settings,
                            unknown, dropped)
    finally:
        if capture is not None:
            graphs.release(capture)
        ps.destroy_model_parallel()  # the model and optimizer go with this frame; the next run collects them first


NVTE_AT_START = {name: os.environ.get(name) for name in flash_attention.NVTE_VARIABLES}
"""The NVTE attention variables as this process was given them (megatron-core sets them for each row)."""


def _measure_row(case: Case, args: argparse.Namespace, world: int, step: Any, chunks: list[Any], config: Any,
                 opt: Any, dp: int, capture: Any, t0: float, before_gib: float | None, settings: dict[str, Any],
                 unknown: list[str], dropped: list[str]) -> dict[str, Any]:
    """Warm up (capturing graphs where asked), time the steps, read what ran; the record of one row."""
    import torch

    cfg, spec, cpu = case.cfg, case.spec, args.cpu
    if not cpu:
        torch.cuda.synchronize()
    build_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    for i in range(args.warmup):
        step()
        if capture is not None and i == 0:
            graphs.after_first_step(capture, chunks, config, opt, seq=cfg.size.seq, micro_batch=cfg.micro_batch,
                                    micro_batches=cfg.micro_batches, dp=dp)
    if not cpu:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    warmup_s = time.perf_counter() - t1
    marks: list[tuple[Any, Any]] = []
    pairs = []
    for _ in range(args.steps * args.repeats):  # CUDA events: the host runs ahead as a training loop's does
        if cpu:
            start = time.perf_counter()
            pairs.append(step())
            marks.append((start, time.perf_counter()))
        else:
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            pairs.append(step())
            end.record()
            marks.append((begin, end))
    if cpu:
        step_s = [b - a for a, b in marks]
        peak_gib = reserved_gib = None
    else:
        torch.cuda.synchronize()
        step_s = [a.elapsed_time(b) / 1000.0 for a, b in marks]
        peak_gib = torch.cuda.max_memory_allocated() / 2**30
        reserved_gib = torch.cuda.max_memory_reserved() / 2**30
    loss = [float(p[0] / p[1]) for p in pairs]
    windows = [bench_model.median(step_s[i * args.steps:(i + 1) * args.steps]) for i in range(args.repeats)]
    chosen = te.attention_backend(spec)
    if case.attention != "auto" and not chosen.startswith(f"te {case.attention}"):
        raise RuntimeError(f"attention_backend={case.attention} was asked, and TE ran {chosen}")
    record = {
        "config": cfg.name, "spec": spec, "variant": case.row_variant, "precision": case.precision,
        "base_variant": case.variant, "attention_asked": case.attention, "cuda_graphs": case.graphs,
        "status": "ok", "error": None,
        "settings": {k: getattr(v, "name", v) for k, v in settings.items() if k not in unknown},  # enums by name
        "dropped": dropped, "dispatcher": config.moe_token_dispatcher_type if cfg.size.moe else None,
        "world_size": world, "dp": dp, "tp": args.tp, "sequence_parallel": bool(config.sequence_parallel),
        "micro_batch": cfg.micro_batch, "micro_batches": cfg.micro_batches, "seq": cfg.size.seq,
        "tokens_per_step": cfg.tokens_per_step(dp),
        "step_ms": [round(t * 1000, 3) for t in step_s],
        "step_ms_median": bench_model.median(windows) * 1000,
        "window_ms_medians": [round(w * 1000, 3) for w in windows],
        "window_spread_pct": (max(windows) - min(windows)) / bench_model.median(windows) * 100,
        "step_ms_min": min(step_s) * 1000, "step_ms_max": max(step_s) * 1000,
        "build_s": build_s, "warmup_s": warmup_s,
        "peak_mem_gib": peak_gib, "peak_reserved_gib": reserved_gib, "allocated_before_gib": before_gib,
        "loss": loss, "loss_first": loss[0], "loss_last": loss[-1],
        "attention_backend": chosen, "optimizer": _optimizer_name(opt),
        "predicted_peak_gib": cfg.predicted_peak_gib(fp8=bench_model.PRECISIONS[case.precision].fp8)
        if world == 1 and not cpu else None,
    }
    if capture is not None:
        record["cuda_graphs_captured"] = graphs.captured(capture, chunks)
    if args.profile:
        from mcore_images.smoke.bench import profile

        record["profile"] = profile.steps(step, steps=PROFILED_STEPS, cpu=cpu, step_ms=record["step_ms_median"])
    return record


def _fp8_problem() -> str | None:
    import torch

    major, minor = torch.cuda.get_device_capability()
    if (major, minor) < (8, 9):
        return (f"{torch.cuda.get_device_name()} (sm_{major}{minor}) has no FP8: drop the fp8 precisions "
                f"(FP8 needs sm_89 or newer)")
    return None


def measure(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    t_start = time.time()
    os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    if args.cpu:
        os.environ.setdefault("TORCH_COMPILE_DISABLE", "1")  # megatron's jit fusions: no compiler on CPU runs
    try:
        import torch

        from mcore_images.smoke.kit import collectives

        collectives.install(args.timeout)  # before megatron-core binds any collective
        if args.cpu:
            from mcore_images.smoke.kit import cpu_shim

            cpu_shim.install()
            cpu_shim.hide_transformer_engine()  # megatron's optimizer would pick TE's FusedAdam (CUDA only)
        import megatron.core  # noqa: F401  (fails early and clearly when megatron-core is missing)

        if args.cpu:
            cpu_shim.patch_megatron()
        from mcore_images.smoke.kit import bootstrap, envinfo
    except ImportError as exc:
        raise errors.CouldNotRun(f"{exc}: run in an image with torch and megatron-core") from exc

    te_ok, te_error = te.state(not args.cpu)
    specs = (["local", "te"] if te_ok else ["local"]) if args.specs == ["auto"] else args.specs
    if "te" in specs and not te_ok:
        raise errors.CouldNotRun(te_error or "--specs te needs Transformer Engine: it is not installed")
    if "te" not in specs and (args.cuda_graphs or args.attention_backend != "auto"):
        raise errors.CouldNotRun("--cuda-graphs and --attention-backend apply to the TE rows, and Transformer Engine "
                                 "is not installed here: drop them")
    if any(bench_model.PRECISIONS[p].fp8 for p in args.precisions):
        if "te" not in specs:
            raise errors.CouldNotRun("FP8 rows run through Transformer Engine: add te to --specs or drop the fp8 ones")
        if problem := _fp8_problem():
            raise errors.CouldNotRun(problem)
    packages = envinfo.packages()
    stack, stack_how = bench_gate.resolve_stack(args.stack, packages, bench_gate.stacks_file(args.baselines))
    if args.write_baselines and bench_gate.is_adhoc(stack):
        raise errors.CouldNotRun(f"{stack_how}: baselines are stored per stack, so pass --stack NAME to write them")
    fusion = accumulation.gradient_accumulation_fusion(args.cpu)
    rank, world = bootstrap.init_process_group(args.cpu, args.timeout)
    t_ready = time.time()
    gpu = "CPU (gloo)" if args.cpu else torch.cuda.get_device_name()
    peak, peak_source = (None, "CPU run: no peak") if args.cpu else bench_model.peak_tflops(gpu)
    if rank == 0:
        print(f"[bench] stack {stack}: {stack_how}", flush=True)
    results = []
    for case in cases(configs_for(args), specs, args):
        key = {"gpu": gpu, "stack": stack, "config": case.cfg.name, "spec": case.spec, "variant": case.row_variant,
               "precision": case.precision, "world_size": world}
        try:
            rec = run_one(case, args, world, fusion["on"])
            rec.update(bench_model.throughput(case.cfg, rec["step_ms_median"] / 1000, world, rec["dp"], peak))
        except Exception as exc:  # record and go on: one failing row must not hide the others
            if rank == 0:
                traceback.print_exc()
            rec = {"status": "error", "error": f"{type(exc).__name__}: {exc}".splitlines()[0][:300]}
            if not args.cpu:
                torch.cuda.empty_cache()
        rec = {**key, **rec}
        results.append(rec)
        if rank == 0:
            print(_line(rec), flush=True)
    results = bench_model.compare_graphs(bench_model.compare_precisions(results))
    status, judged = bench_gate.gate(results, args.baseline_data, args.max_drop_pct)
    if te_error:
        status = "failed"
    bench = {
        "schema": bench_gate.RESULT_SCHEMA, "status": status, "error": te_error,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": ["python", "-m", "mcore_images.smoke.bench", *sys.argv[1:]],
        "gpu": gpu, "world_size": world, "stack": stack, "stack_how": stack_how, "packages": packages,
        "cudnn_loaded": te.cudnn_libraries(), "cudnn_torch": None if args.cpu else te.torch_cudnn(),
        "cudnn_home": os.environ.get("CUDNN_HOME") or os.environ.get("CUDNN_PATH"),
        "te_available": te_ok, "gradient_accumulation_fusion": fusion, "specs": specs, "variants": args.variants,
        "cuda_graphs": args.cuda_graphs, "attention_backend": args.attention_backend,
        "graph_loss_rtol": bench_model.GRAPH_LOSS_RTOL,
        "precisions": args.precisions, "warmup": args.warmup, "steps": args.steps, "repeats": args.repeats,
        "peak_tflops": peak, "peak_source": peak_source, "formula": FORMULA,
        "fp8_loss_rtol": bench_model.FP8_LOSS_RTOL,
        "configs": {cfg.name: cfg.to_dict() for cfg in configs_for(args)},
        "baselines_file": args.baselines, "results": judged,
        "timing": {"imports_init_s": t_ready - t_start, "total_s": time.time() - t_start},
    }
    bootstrap.teardown()
    return (rank, bench)


def _line(rec: dict[str, Any]) -> str:
    name = f"{rec['config']}/{rec['spec']}/{rec['variant']}/{rec['precision']}"
    if rec.get("status") == "error":
        return f"[bench] {name}: ERROR {rec['error']}"
    mfu = rec.get("mfu")
    text = (f"[bench] {name}: {rec['step_ms_median']:.1f} ms/step (min {rec['step_ms_min']:.1f}, max "
            f"{rec['step_ms_max']:.1f}), {rec['tokens_per_s']:,.0f} tokens/s, {rec['tflops_per_gpu']:.1f} TFLOP/s/GPU, "
            f"MFU {'–' if mfu is None else f'{mfu * 100:.1f} %'}, peak {rec['peak_mem_gib'] or 0:.1f} GiB, "
            f"attention {rec['attention_backend']}, opt {rec['optimizer']}")
    if rec.get("dropped"):
        text += f"; not applied: {', '.join(rec['dropped'])}"
    if rec.get("profile"):
        from mcore_images.smoke.bench import profile

        text += "\n" + profile.render(rec["profile"])
    return text


def write_outputs(bench: dict[str, Any], args: argparse.Namespace) -> None:
    text = bench_gate.render_markdown(bench)
    print(text, flush=True)
    if args.out:
        with create_only.filled(create_only.claim(Path(args.out), OUTPUT_OWNER)) as out:
            create_only.replace_text(out / "bench.json", json.dumps(bench, indent=2, default=str) + "\n")
            create_only.replace_text(out / "bench.md", text)
    if args.certificate:
        cert_dir = Path(args.certificate)
        cert = certificate.read(cert_dir / "certificate.json")
        certificate.write(bench_gate.attach(cert, bench), cert_dir)
    if args.write_baselines:
        path = Path(args.write_baselines)
        _writable_baselines(path)  # again: it may have changed while the bench ran
        current = bench_gate.load_baselines(path) if path.exists() else None
        merged = bench_gate.merge_baselines(current, bench)
        create_only.replace_text(path, json.dumps(merged, indent=2) + "\n")
        print(f"[bench] baselines written to {path}", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        args = normalise(args)
        if args.dry_run:
            return dry_run(args)
        rank, bench = measure(args)
    except (errors.CouldNotRun, InputError) as exc:
        print(f"{COULD_NOT_RUN}{exc}", file=sys.stderr)
        return errors.COULD_NOT_RUN
    if rank == 0:
        try:
            write_outputs(bench, args)
        except (errors.CouldNotRun, InputError, ValueError, OSError) as exc:
            print(f"bench: could not write the results: {exc}", file=sys.stderr)
            return errors.COULD_NOT_RUN
    return errors.FAILED if bench["status"] == "failed" else errors.PASSED

