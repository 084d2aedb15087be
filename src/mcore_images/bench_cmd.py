"""Host side of `mcore-images bench`: run ``python -m smoke.bench`` here or inside an image.

Like `mcore-images smoke`, the host never imports the suite, torch or megatron-core: it runs the bench
as a separate program (``docker run --gpus all`` with ``--image``) and the bench writes bench.json and
bench.md. In an image the host's ``env/bench-baselines.json`` is mounted where the bench looks for it
(``/opt/mcore-images/env/bench-baselines.json``), so the regression gate uses this checkout's baselines.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from mcore_images import certify, smoke_cmd
from mcore_images.errors import InputError

BASELINES = certify.ROOT / "env" / "bench-baselines.json"
IMAGE_BASELINES = "/opt/mcore-images/env/bench-baselines.json"


def _own_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--image", help="run inside this image (docker run --gpus all ...)")
    parser.add_argument("--out", help="folder for bench.json and bench.md (default: out/bench)")
    parser.add_argument("--cert", help="folder of a smoke certificate.json to add the bench section to")


def _passthrough(args: argparse.Namespace) -> list[str]:
    """Arguments for the bench: those after ``--`` (argparse keeps the ``--`` itself in the remainder)."""
    extra = list(args.bench_args or [])
    return extra[1:] if extra[:1] == ["--"] else extra


def docker_bench_command(ref: str, out_dir: Path, bench_args: Sequence[str], cert_dir: Path | None = None,
                         baselines: Path | None = BASELINES) -> list[str]:
    """``docker run`` that runs the bench in the image, writing to ``out_dir`` (and ``cert_dir``)."""
    env = [item for pair in certify.NO_MULTICAST for item in ("-e", pair)]
    mounts = ["-v", f"{out_dir.resolve()}:/bench"]
    tail = ["--out", "/bench"]
    if cert_dir is not None:
        mounts += ["-v", f"{cert_dir.resolve()}:/cert"]
        tail += ["--cert", "/cert"]
    if baselines is not None and baselines.is_file() and "--baselines" not in bench_args:
        mounts += ["-v", f"{baselines.resolve()}:{IMAGE_BASELINES}:ro"]
    return [
        "docker", "run", "--rm", "--gpus", "all", "--ipc=host", "--ulimit", "memlock=-1",
        "--ulimit", "stack=67108864", *env, *mounts, ref, "python", "-m", "smoke.bench", *tail, *bench_args,
    ]


def local_bench_command(out_dir: Path, bench_args: Sequence[str], cert_dir: Path | None = None) -> list[str]:
    cert = ["--cert", str(cert_dir)] if cert_dir is not None else []
    return [sys.executable, "-m", "smoke.bench", "--out", str(out_dir), *cert, *bench_args]


def run_bench(args: argparse.Namespace) -> int:
    """Run the bench here, or in ``--image`` through docker; returns its exit code (0/1/2)."""
    extra = _passthrough(args)  # first: it may fill args.out / args.image / args.cert
    out = Path(args.out or "out/bench")
    cert = Path(args.cert) if args.cert else None
    if cert is not None and not (cert / "certificate.json").is_file():
        raise InputError(f"{cert}/certificate.json not found: run `mcore-images smoke --out {cert}` first, "
                         "or drop --cert")
    env = None
    if args.image:
        out.mkdir(parents=True, exist_ok=True)
        cmd = docker_bench_command(args.image, out, extra, cert)
    else:
        cmd = local_bench_command(out, extra, cert)
        env = smoke_cmd.local_env()
    return smoke_cmd.execute("bench", cmd, env)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``bench`` subcommand to the CLI's subparsers."""
    p = sub.add_parser(
        "bench", help="training throughput (tokens/s, TFLOP/s, MFU) of reference models, here or in an image",
        description="Run `python -m smoke.bench` (arguments after --) on this machine, or in IMAGE with docker: "
        "dense ~1B GPT and a small MoE, local and Transformer Engine specs, gated against "
        "env/bench-baselines.json. Exit 0 passed, 1 failed or regressed, 2 could not run.",
    )
    _own_options(p)
    p.add_argument("bench_args", nargs=argparse.REMAINDER, help="arguments for python -m smoke.bench, after --")
    p.set_defaults(func=run_bench, command_name="bench")
