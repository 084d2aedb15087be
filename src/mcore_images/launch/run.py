"""`mcore-images run IMAGE [-- CMD]`: start a container of an image the way NVIDIA's containers ask.

GPUs (``--gpus all``), ``--ipc=host`` (NCCL's shared-memory transport and DataLoader workers need more
than Docker's 64 MiB /dev/shm), ``--ulimit memlock=-1`` (RDMA pins memory; left out, and said, where
this engine's own limit refuses it) and ``--ulimit stack=67108864``, NVLink multicast off, and a
folder of this checkout mounted at /out for certificates and reports: the smoke, the bridge check and the bench,
run without an ``--out`` of their own, write theirs there (/out/smoke, …), where the container's removal cannot take
them. ``--print`` prints the ``docker run`` line (the README's) instead of running it.

``--gpus`` takes what docker's does, with one meaning for a number: a count of GPUs (``2``: any two); devices are
named by a list (``0,1``) or ``device=3``. Before anything is made or run, a container of the image is started with
those GPUs: an engine without the NVIDIA runtime is one line naming the toolkit, or ``--cpu``.

Anything else ``docker run`` takes (``-v``, ``-e``, ``--shm-size``, ``--device``, ``--cap-add``) goes in
``--docker-args`` and reaches docker unchanged, after the defaults, so it wins where docker keeps the last
value. ``--multinode`` adds what Ray and torchrun across nodes need: the host's network (Ray's and NCCL's
ports, the rendezvous), the InfiniBand devices with IPC_LOCK, and the host's NCCL/Gloo interface settings
passed through by name.
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from pathlib import Path

from mcore_images import tools
from mcore_images.catalogue import images
from mcore_images.command import Command
from mcore_images.errors import InputError
from mcore_images.launch import container, programs
from mcore_images.progress import Progress

OUT = "/out"
MULTINODE_FLAGS = ("--network", "host", "--device", "/dev/infiniband", "--cap-add", "IPC_LOCK")
"""Across nodes: Ray's and NCCL's ports and the rendezvous on the host's network; RDMA devices and the
right to pin memory for NCCL's IB transport."""
MULTINODE_PASSTHROUGH = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_IB_GID_INDEX",
                         "NCCL_NET_PLUGIN", "MASTER_ADDR", "MASTER_PORT", "RAY_ADDRESS")
"""Site settings forwarded by name (``-e NAME``: docker copies the host's value, and sets nothing when the
host has none), so the container talks on the interface the site chose."""


def docker_args(text: str) -> list[str]:
    """``--docker-args``'s words (shell quoting understood, nothing expanded); one line naming the fix when
    they cannot be split or would end the options early."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise InputError(f"--docker-args {text!r} cannot be split ({exc}); quote it as one shell word, e.g. "
                         "--docker-args '-v /data:/data -e HF_HOME=/data/hf'") from None
    if words and not words[0].startswith("-"):
        raise InputError(f"--docker-args takes docker run's options, not {words[0]!r}: the image is the first "
                         "argument and the command goes after --")
    return words


DEVICE = re.compile(r"[0-9]+|GPU-[0-9a-fA-F-]+|MIG-[0-9a-zA-Z/-]+")
"""One GPU as NVIDIA's container toolkit names it: an index, a GPU UUID or a MIG device."""


def gpus_value(given: str) -> str:
    """``--gpus`` as docker's own parser takes it. A number is a count of GPUs, as in docker (``1``: one GPU, not
    GPU 1); devices are a list (``0,1``) or ``device=N[,M]``. Docker reads the value as CSV, so ``device=0,1`` is two
    fields and gives GPU 0 alone; a device list must reach it quoted: ``"device=0,1"``."""
    text = given.strip()
    if text.isdigit():
        if int(text) == 0:
            raise InputError(f"--gpus {given!r} asks for no GPU: pass --cpu to run without GPUs, or device=0 for "
                             "GPU 0 (a number is a count of GPUs)")
        return str(int(text))
    if text == "all":
        return text
    listed = text.strip('"').removeprefix("device=").strip('"')
    devices = [d.strip() for d in listed.split(",")]
    if listed and all(DEVICE.fullmatch(d) for d in devices) and len(set(devices)) == len(devices):
        return f'"device={",".join(devices)}"'
    raise InputError(f"--gpus {given!r} is not a GPU selection: give all, a count (2), or the devices (0,1 or "
                     "device=3); --cpu for none")


def requested_gpus(cpu: bool, gpus: str, extra: tuple[str, ...]) -> str | None:
    """The ``--gpus`` value the container gets (the user's own in --docker-args wins, the last one as docker takes
    it); None without GPUs."""
    if cpu:
        return None
    own = [extra[i + 1] for i, word in enumerate(extra[:-1]) if word == "--gpus"]
    own += [word.split("=", 1)[1] for word in extra if word.startswith("--gpus=")]
    return own[-1] if own else gpus


PROGRAM_MODULES = {p.module: p for p in programs.PROGRAMS}
"""The programs by their module (`mcore_images.smoke`, `mcore_images.smoke.bridge`, …)."""


def with_program_out(cmd: list[str]) -> list[str]:
    """``cmd``, with ``--out /out/<program>`` added when it runs the smoke, the bridge check or the bench
    (``python -m …``) without an --out of its own: its report then lands in the host folder mounted at /out, not
    inside the container that --rm removes. A dry run or help writes nothing and is left as it is."""
    for i, word in enumerate(cmd[:-2]):
        if Path(word).name.startswith("python") and cmd[i + 1] == "-m" and cmd[i + 2] in PROGRAM_MODULES:
            args = cmd[i + 3:]
            if any(a in ("--out", "--dry-run", "-h", "--help") or a.startswith("--out=") for a in args):
                return cmd
            return [*cmd, "--out", f"{OUT}/{PROGRAM_MODULES[cmd[i + 2]].name}"]
    return cmd


def out_problem(out: Path) -> str | None:
    """Why ``out`` cannot be mounted at /out (None when it is a folder, or can be made one)."""
    where = Path(out).absolute()
    if where.exists() and not where.is_dir():
        return f"--out {out} is a file: give a folder to mount at {OUT}"
    ancestor = next((p for p in [where, *where.parents] if p.exists()), where)
    if not ancestor.is_dir():
        return f"--out {out} cannot be created: {ancestor} is a file; give a folder to mount at {OUT}"
    return container.mount_problem(out, "--out")


def command_for(image: str, cmd: list[str], *, cpu: bool, out: Path, memlock: bool, tty: bool,
                gpus: str = "all", multinode: bool = False, extra: tuple[str, ...] = ()) -> list[str]:
    """The ``docker run`` argv; without ``cmd`` an interactive shell. ``extra`` (the user's docker options)
    comes last before the image; a ``--gpus`` there replaces ours."""
    own_gpus = any(word == "--gpus" or word.startswith("--gpus=") for word in extra)
    flags = ["-it"] if tty and not cmd else []
    if multinode:
        flags += [*MULTINODE_FLAGS, *(a for name in MULTINODE_PASSTHROUGH for a in ("-e", name))]
    flags += ["-w", "/workspace", *extra]
    return container.run_command(image, cmd or ["bash"], gpus=False if cpu or own_gpus else gpus,
                                 mounts={out: OUT}, memlock=memlock, extra=flags)


def printable(argv: list[str], out: Path) -> str:
    """The command as a shell line to copy: a relative --out shown as "$PWD/..." rather than this machine's path."""
    mount = f"{out.resolve()}:{OUT}"
    words = [f'"$PWD/{out}":{OUT}' if word == mount and not out.is_absolute() else shlex.quote(word) for word in argv]
    return " ".join(words)


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("image", help="an image reference, e.g. mcore-images:runtime-debian or REPO@sha256:…")
    p.add_argument("--cpu", action="store_true", help="no GPUs (--gpus is left out)")
    p.add_argument("--out", default="out", help="this folder is mounted at /out (default: ./out); the smoke, bridge "
                   "and bench write their reports in it (/out/smoke, …) unless given an --out of their own")
    p.add_argument("--print", dest="print_only", action="store_true",
                   help="print the docker run line instead of running it")
    p.add_argument("--gpus", default="all", help="the GPUs: all (default), a number is a count (2: any two GPUs), "
                   "devices by a list (0,1) or device=3 (passed to docker quoted, as its --gpus needs)")
    p.add_argument("--multinode", action="store_true", help="for Ray or torchrun across nodes: host network, "
                   "/dev/infiniband with IPC_LOCK, the host's NCCL_SOCKET_IFNAME and similar passed through")
    p.add_argument("--docker-args", default="", metavar="ARGS", help="more docker run options as one quoted "
                   "string, passed unchanged after the defaults, e.g. '-v /data:/data --shm-size 16g' (a single "
                   "option with =: --docker-args=--privileged)")


def _run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    cmd = with_program_out(list(args.passthrough))
    if problem := images.reference_problem(args.image):
        raise InputError(problem)
    extra = tuple(docker_args(args.docker_args))
    gpus = gpus_value(args.gpus)
    if problem := out_problem(out):
        raise InputError(problem)
    options = {"cpu": args.cpu, "out": out, "gpus": gpus, "multinode": args.multinode, "extra": extra}
    if args.print_only:
        print(printable(command_for(args.image, cmd, memlock=True, tty=True, **options), out))
        return 0
    container.preflight(args.image, requested_gpus(args.cpu, gpus, extra), progress=Progress("run"))
    out.mkdir(parents=True, exist_ok=True)
    argv = command_for(args.image, cmd, memlock=container.memlock_unlimited(args.image), tty=sys.stdin.isatty(),
                       **options)
    print("[run] " + shlex.join(argv), file=sys.stderr, flush=True)
    return tools.run(argv, check=False).returncode


COMMANDS = (Command("run", "Start a container of an image, with GPUs and the flags NVIDIA's containers ask for.",
                    _arguments, _run,
                    description="Start a container of IMAGE (pulled first when it is not here, with progress) with "
                    "GPUs, --ipc=host, memlock and stack limits, NVLink multicast off and ./out mounted at /out; "
                    "--print shows the docker run line instead.",
                    passthrough="the command to run in the container (default: an interactive shell)"),)
