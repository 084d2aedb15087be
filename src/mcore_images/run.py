"""`mcore-images run IMAGE [-- CMD]`: start a container of an image the way NVIDIA's containers ask.

GPUs (``--gpus all``), ``--ipc=host`` (NCCL's shared-memory transport and DataLoader workers need more
than Docker's 64 MiB /dev/shm), ``--ulimit memlock=-1`` (RDMA pins memory; left out, and said, where
this engine's own limit refuses it) and ``--ulimit stack=67108864``, NVLink multicast off, and a
folder of this checkout mounted at /out for certificates and reports. ``--print`` prints the
``docker run`` line (the README's) instead of running it.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path

from mcore_images import container
from mcore_images.command import Command
from mcore_images.errors import InputError

OUT = "/out"


def command_for(image: str, cmd: list[str], *, cpu: bool, out: Path, memlock: bool, tty: bool) -> list[str]:
    """The ``docker run`` argv; without ``cmd`` an interactive shell."""
    extra = ["-it"] if tty and not cmd else []
    return container.run_command(image, cmd or ["bash"], gpus=not cpu, mounts={out: OUT}, memlock=memlock,
                                 extra=[*extra, "-w", "/workspace"])


def printable(argv: list[str], out: Path) -> str:
    """The command as a shell line to copy: a relative --out shown as "$PWD/..." rather than this machine's path."""
    mount = f"{out.resolve()}:{OUT}"
    words = [f'"$PWD/{out}":{OUT}' if word == mount and not out.is_absolute() else shlex.quote(word) for word in argv]
    return " ".join(words)


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("image", help="an image reference, e.g. mcore-images:runtime-debian or REPO@sha256:…")
    p.add_argument("--cpu", action="store_true", help="no GPUs (--gpus is left out)")
    p.add_argument("--out", default="out", help="this folder is mounted at /out (default: ./out)")
    p.add_argument("--print", dest="print_only", action="store_true",
                   help="print the docker run line instead of running it")


def _run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    cmd = list(args.passthrough)
    if args.print_only:
        print(printable(command_for(args.image, cmd, cpu=args.cpu, out=out, memlock=True, tty=True), out))
        return 0
    if problem := container.ensure_local(args.image):
        raise InputError(problem)
    out.mkdir(parents=True, exist_ok=True)
    argv = command_for(args.image, cmd, cpu=args.cpu, out=out, memlock=container.memlock_unlimited(args.image),
                       tty=sys.stdin.isatty())
    print("[run] " + shlex.join(argv), file=sys.stderr, flush=True)
    return subprocess.run(argv, check=False).returncode


COMMANDS = (Command("run", "start a container of an image with the flags NVIDIA recommends (GPUs, --ipc=host, "
                    "memlock, stack), NVLink multicast off and ./out mounted at /out", _arguments, _run,
                    passthrough="the command to run in the container (default: an interactive shell)"),)
