"""The smoke's command line, shared: the parser, its normalisation and the round trips' folder. The entry (cli.py),
the launcher, the ranks (worker.py) and the Ray driver (on_ray.py) all read the same arguments."""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from mcore_images.options import OneLineParser, number
from mcore_images.smoke import faults, layouts
from mcore_images.smoke.kit import errors, folders, seeds

COULD_NOT_RUN = "smoke: could not run: "
"""How every line the smoke refuses to run with begins."""
OUTPUT_OWNER = "smoke"
"""The command the --out folder's marker names (create_only.py): the wrapper's, `mcore-images smoke`, so that a folder
either of them wrote may be written again by the other."""


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="python -m mcore_images.smoke", prefix=COULD_NOT_RUN,
        description="Train a small dense GPT and MoE with megatron-core on every parallel layout that fits, "
        "check loss, grads, rank agreement and cross-layout parity, and write a certificate. "
        "Exit 0 passed, 1 failed, 2 could not run.",
    )
    parser.add_argument("--layouts", help="comma-separated layouts, e.g. tp2,pp2-vpp2,tp2-ep2 (default: all that fit)")
    parser.add_argument("--models", default="dense,moe", help="comma-separated subset of: dense,moe")
    parser.add_argument("--spec", choices=("auto", *layouts.SPECS), default="auto",
                        help="layer spec: auto = local always, plus Transformer Engine when it imports")
    parser.add_argument("--steps", type=int, default=10, help="training steps per run (>= 2)")
    parser.add_argument("--nproc", type=int,
                        help="ranks available on this node (default: every visible GPU; 2 with --cpu)")
    parser.add_argument("--cpu", action="store_true", help="run on CPU with gloo (CI); fp32 unless --dtype")
    parser.add_argument("--ray", action="store_true",
                        help="run the ranks as Ray actors, the way verl runs its Megatron workers (a local Ray head, "
                        "or the cluster RAY_ADDRESS names); needs ray")
    parser.add_argument("--dtype", choices=("bf16", "fp32"), help="compute dtype (default: bf16 on GPU, fp32 on CPU)")
    parser.add_argument("--allow-tf32", action="store_true",
                        help="with --dtype fp32 on GPUs: let GEMMs run as TF32 and judge with TF32's tolerance "
                        "(default: TF32 off, fp32's tolerance)")
    parser.add_argument("--dist-opt", action=argparse.BooleanOptionalAction, default=None,
                        help="megatron distributed optimizer (default: on for GPU, off for CPU)")
    parser.add_argument("--deterministic", action=argparse.BooleanOptionalAction, default=None,
                        help="deterministic settings (TE, cuBLAS, NCCL, torch) and each dp baseline run twice, "
                        "its losses and grad norms compared bitwise (default: on for GPUs, off with --cpu)")
    parser.add_argument("--timeout", type=number(0, above=True, example="60"), default=60.0,
                        help="seconds a collective may take before its rank gives up and the run fails")
    parser.add_argument("--watchdog", type=number(0, above=True, example="900"), default=900.0,
                        help="seconds the whole run may take")
    parser.add_argument("--out", help="folder for certificate.json and certificate.md")
    parser.add_argument("--checkpoint", action=argparse.BooleanOptionalAction, default=True,
                        help="run the checkpoint round trips: save in one layout, resume in another (default: on)")
    parser.add_argument("--checkpoint-dir", metavar="DIR",
                        help="the folder the round trips save in: each makes a new folder inside it and removes "
                        "only that; every rank must see it (default: OUT/checkpoint, else the temporary folder)")
    parser.add_argument("--attention", action=argparse.BooleanOptionalAction, default=True,
                        help="after the runs, check every attention backend the image offers against an fp32 "
                        "reference (python -m mcore_images.smoke.attention; default: on)")
    parser.add_argument("--seed", type=int, default=seeds.DEFAULT_SEED,
                        help="base seed of the name-seeded global model and the batch")
    parser.add_argument("--lr", type=number(0, above=True, example="3e-3"), default=3e-3, help=argparse.SUPPRESS)
    parser.add_argument("--dry-run", action="store_true",
                        help="print the plan and its projected wall time, and exit (needs no GPU, torch or "
                        "megatron-core)")
    parser.add_argument("--timings", metavar="FILE",
                        help="a certificate (or env/smoke-timings.json, the default) to project --dry-run's wall "
                        "time from")
    parser.add_argument("--inject-fault", choices=faults.KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--fault-rank", type=int, default=-1, help=argparse.SUPPRESS)
    return parser


def normalise(args: argparse.Namespace) -> argparse.Namespace:
    """Fill device-dependent defaults and reject bad values before anything expensive starts."""
    models = tuple(m.strip() for m in args.models.split(",") if m.strip())
    bad = [m for m in models if m not in layouts.MODELS]
    if bad or not models:
        raise errors.CouldNotRun(f"unknown model(s) {bad or models}: use --models dense,moe or a subset")
    args.models = models
    if args.steps < 2:
        raise errors.CouldNotRun(f"--steps {args.steps} is too few: use >= 2 so the loss can fall")
    if problem := seeds.seed_problem(args.seed):
        raise errors.CouldNotRun(problem)
    if args.nproc is not None and args.nproc < 1:
        raise errors.CouldNotRun(f"--nproc {args.nproc} is not a count of ranks: give 1 or more, or leave it out "
                                 "for every visible GPU (2 with --cpu)")
    if args.fault_rank < -1 or (args.fault_rank != -1 and not args.inject_fault):
        raise errors.CouldNotRun(f"--fault-rank {args.fault_rank}: give a rank (0 or more) with --inject-fault")
    if args.nproc and args.layouts is None and args.nproc not in layouts.CATALOGUE:
        sizes = ", ".join(map(str, sorted(layouts.CATALOGUE)))
        raise errors.CouldNotRun(f"--nproc {args.nproc}: the smoke's layouts run on {sizes} ranks; pass one of "
                                 f"those, or --layouts naming layouts that fit {args.nproc}")
    if args.cpu and args.spec == "te":
        raise errors.CouldNotRun("--spec te needs GPUs: drop --cpu or use --spec local")
    args.dtype = args.dtype or ("fp32" if args.cpu else "bf16")
    if args.dist_opt is None:
        args.dist_opt = not args.cpu
    if args.deterministic is None:
        args.deterministic = not args.cpu
    if args.inject_fault and args.fault_rank < 0:
        args.fault_rank = int(os.environ.get("WORLD_SIZE", "1")) - 1
    layouts.parse_layouts(args.layouts)  # one-line error now, not in every rank
    return args


def checkpoint_dir(args: argparse.Namespace, out: Path | None) -> Path:
    """The folder the round trips save in: ``--checkpoint-dir``, else next to the certificate, else the
    temporary folder (every rank must see it: on several nodes, pass one on a shared file system)."""
    if args.checkpoint_dir:
        return Path(args.checkpoint_dir)
    return out / "checkpoint" if out else Path(tempfile.gettempdir())


def prepare_checkpoint_dir(args: argparse.Namespace, folder: Path) -> bool:
    """Check the round trips' folder before anything runs (there or creatable, writable); whether this
    made it (then, and only then, the run removes it again once it is empty)."""
    try:
        return folders.prepare(folder)
    except folders.FolderError as exc:
        named = f"--checkpoint-dir {folder}" if args.checkpoint_dir else f"the round trips' folder {folder} (--out)"
        raise errors.CouldNotRun(f"{named}: {exc}: pass a folder this user can write") from exc
