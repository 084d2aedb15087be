"""Command line of ``python -m mcore_images.smoke``: one entry that plans, launches, or runs as a torchrun rank."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from mcore_images import create_only
from mcore_images.errors import InputError
from mcore_images.smoke import layouts, projection
from mcore_images.smoke.args import COULD_NOT_RUN, OUTPUT_OWNER, build_parser, normalise
from mcore_images.smoke.kit import errors, lifetime


def _timings(args: argparse.Namespace) -> dict | None:
    """The measurement a dry run projects from: --timings, else env/smoke-timings.json where it exists."""
    path = Path(args.timings) if args.timings else projection.default_file()
    if not path.exists():
        if args.timings:
            raise errors.CouldNotRun(f"--timings {args.timings}: no such file; give a smoke certificate.json")
        return None
    try:
        return projection.load(path)
    except ValueError as exc:
        raise errors.CouldNotRun(f"--timings {exc}" if args.timings else str(exc)) from exc


def in_torchrun() -> bool:
    """True inside a rank started by torchrun (or any launcher that sets its env)."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    try:
        args = normalise(args)
        if args.dry_run:
            from mcore_images.smoke.kit.gpus import count_gpus
            from mcore_images.smoke.launcher import plan_from_args, te_installed

            available = args.nproc or int(os.environ.get("WORLD_SIZE", "0")) or (2 if args.cpu else count_gpus())
            if available == 0:  # a CPU-only machine: show what each GPU count would run
                print("no GPU visible; the plan on each machine size:")
                sizes = [n for n in sorted(layouts.CATALOGUE) if args.layouts is None or n >= max(
                    lay.size for lay in layouts.parse_layouts(args.layouts) or [])]
            else:
                sizes = [available]
            timings = _timings(args)
            # Without TE here (a host, not an image), --spec auto plans the local spec alone: say what an image adds.
            in_image = None if args.cpu or args.spec != "auto" or te_installed() else True
            for size in sizes:
                the_plan = plan_from_args(args, size)
                print(layouts.render_plan(the_plan))
                if timings and not args.cpu:
                    print(projection.render(projection.project(the_plan, timings, args.steps), timings, size))
                if in_image:
                    image_plan = plan_from_args(args, size, te_here=True)
                    added = len(image_plan.to_run) - len(the_plan.to_run)
                    print(f"this machine has no Transformer Engine, so the plan above is the local spec's alone; in an "
                          f"image, which carries TE, --spec auto adds the te spec: {added} more run(s), "
                          f"{len(image_plan.to_run)} of {len(image_plan.runs)} (`mcore-images smoke --image IMAGE -- "
                          "--dry-run` shows that plan)")
                    if timings:
                        print("in an image: " + projection.render(projection.project(image_plan, timings, args.steps),
                                                                  timings, size))
            return errors.PASSED
        if in_torchrun():
            from mcore_images.smoke import worker

            # A rank without its torchrun is an orphan: torchrun starts each rank in a session of its own, so
            # a SIGKILL to torchrun (the launcher's last resort, the OOM killer) reaches no rank unless the
            # kernel passes it on.
            lifetime.die_with_parent()
            code = worker.main(args, argv)
            # Leave at once: interpreter shutdown with megatron-core loaded took seconds, and every
            # rank has passed the final barrier, so every result is written.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        from mcore_images.smoke.launcher import launch

        # --out follows the wrapper's rule (`mcore-images smoke --out`): a new or empty folder, or one the smoke
        # wrote before, judged before anything runs; the ranks write into it and it is marked when the run ends.
        target = create_only.claim(Path(args.out), OUTPUT_OWNER) if args.out else None
        # SIGTERM (docker stop, Slurm, a timeout) and Ctrl-C stop the ranks before this process leaves: they run
        # in a session of their own, which no signal sent to this process reaches.
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, errors.raise_stopped)
        return launch(args, argv, target)
    except (errors.CouldNotRun, InputError) as exc:
        print(f"{COULD_NOT_RUN}{exc}", file=sys.stderr)
        return errors.COULD_NOT_RUN
    except (errors.Stopped, KeyboardInterrupt) as exc:
        stopped = exc if isinstance(exc, errors.Stopped) else errors.Stopped(signal.SIGINT)
        print(f"smoke: stopped by {signal.Signals(stopped.signum).name}: the ranks were stopped before the run "
              "was certified", file=sys.stderr)
        return stopped.exit_code
