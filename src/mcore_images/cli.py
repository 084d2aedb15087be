"""`mcore-images` command line. Every bad input ends with one line naming the fix and exit code 2."""

from __future__ import annotations

import argparse
import json
import sys

from mcore_images import __version__, bench_cmd, build, debian_base, doctor, jobs, lock, plan, promote, smoke_cmd
from mcore_images.errors import InputError
from mcore_images.stacks import get_stack, load_stacks


def _plan(args: argparse.Namespace) -> int:
    text, code = plan.run(args.stack, args.group, args.format, args.registry)
    print(text)
    return code


def _jobs(args: argparse.Namespace) -> int:
    result = jobs.plan(jobs.detect(), component=args.component, archs=args.archs,
                       max_jobs=args.max_jobs, nvcc_threads=args.nvcc_threads)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    elif args.env:
        print("\n".join(f"{k}={v}" for k, v in result.env().items()))
    else:
        print(" ".join(f"{k}={v}" for k, v in result.env().items()))
        print(f"reason: {result.reason}")
        print(f"resources: {result.resources.cpu_source}; {result.resources.memory_source}")
    return 0


def _lock(args: argparse.Namespace) -> int:
    stacks = load_stacks()
    names = [args.stack] if args.stack else list(stacks)
    problems = []
    for name in names:
        stack = get_stack(name, stacks)
        if args.check:
            problems += lock.check_locks(stack)
        else:
            for path in lock.write_locks(stack, keep_below=args.from_layer):
                print(f"wrote {path}")
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    return 1 if problems else 0


def _base(args: argparse.Namespace) -> int:
    print(debian_base.ensure(get_stack(args.stack), force=args.force, mirror=args.mirror))
    return 0


def _build(args: argparse.Namespace) -> int:
    return build.build(args.stack or None, args.group or None, args.layer or None, args.max_jobs,
                       args.nvcc_threads, args.dry_run, args.bake_args, args.set)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="mcore-images", description=__doc__)
    top.add_argument("--version", action="version", version=f"mcore-images {__version__}")
    sub = top.add_subparsers(dest="command", required=True)

    p = sub.add_parser("plan", help="list stacks, targets, tags and rule verdicts")
    p.add_argument("--stack")
    p.add_argument("--group")
    p.add_argument("--registry", default="")
    p.add_argument("--format", choices=("text", "json", "markdown", "names"), default="text")
    p.set_defaults(func=_plan)

    p = sub.add_parser("jobs", help="plan MAX_JOBS / NVCC_THREADS for CUDA extension builds here")
    p.add_argument("--component", default="te", choices=sorted(jobs.PROFILES))
    p.add_argument("--archs", type=int, default=1, help="number of CUDA architectures compiled")
    p.add_argument("--max-jobs", default=None, help="explicit MAX_JOBS (validated)")
    p.add_argument("--nvcc-threads", default=None, help="explicit NVCC_THREADS (validated)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--env", action="store_true", help="print KEY=VALUE lines")
    p.set_defaults(func=_jobs)

    p = sub.add_parser("lock", help="compute (or --check) the hashed per-layer locks in env/locks")
    p.add_argument("--stack")
    p.add_argument("--check", action="store_true", help="verify locks against env/stacks.json, offline")
    p.add_argument("--from-layer", choices=lock.LOCK_LAYERS[1:], default=None,
                   help="keep the committed locks below this layer byte for byte; re-resolve from it up")
    p.set_defaults(func=_lock)

    p = sub.add_parser("base", help="build a debian stack's base image with debootstrap")
    p.add_argument("--stack", default="debian")
    p.add_argument("--force", action="store_true")
    p.add_argument("--mirror", default=None)
    p.set_defaults(func=_base)

    p = sub.add_parser("build", help="check rules and jobs, then docker buildx bake")
    p.add_argument("--stack", default=None)
    p.add_argument("--group", default=None)
    p.add_argument("--layer", default=None, help="with --stack: build up to this layer")
    p.add_argument("--max-jobs", default=None)
    p.add_argument("--nvcc-threads", default=None)
    p.add_argument("--dry-run", action="store_true", help="validate and print the bake command only")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override one pin of --stack for this build (re-resolves the locks it touches)")
    p.add_argument("bake_args", nargs=argparse.REMAINDER, help="after --: extra arguments for bake")
    p.set_defaults(func=_build)

    doctor.add_parser(sub)
    smoke_cmd.add_parsers(sub)
    promote.add_parsers(sub)
    bench_cmd.add_parser(sub)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if getattr(args, "bake_args", None) and args.bake_args[0] == "--":
        args.bake_args = args.bake_args[1:]
    try:
        return args.func(args)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
