"""mcore-images: build, certify and diagnose Megatron-Core training images.

Every command is declared once, in its module's COMMANDS (command.py says the contract). Every bad
input ends with one line naming the fix and exit code 2, before anything runs.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from mcore_images import __version__
from mcore_images.command import Command, Parser, configure, dispatch

MODULES = (
    "mcore_images.plan", "mcore_images.jobs", "mcore_images.lock", "mcore_images.generated",
    "mcore_images.debian_base", "mcore_images.build", "mcore_images.doctor", "mcore_images.programs",
    "mcore_images.run", "mcore_images.certify", "mcore_images.promote", "mcore_images.verify", "mcore_images.ledger",
    "mcore_images.tags",
    "mcore_images.release_matrix", "mcore_images.platform_index", "mcore_images.outdated", "mcore_images.reproduce",
    "mcore_images.build_timing", "mcore_images.report", "mcore_images.kube",
    "mcore_images.make_vars",
)
"""Modules that declare commands, in the order `mcore-images --help` lists them."""


def commands() -> list[Command]:
    return [c for name in MODULES for c in importlib.import_module(name).COMMANDS]


def parser() -> argparse.ArgumentParser:
    top = Parser(prog="mcore-images", description=__doc__.splitlines()[0])
    top.add_argument("--version", action="version", version=f"mcore-images {__version__}")
    sub = top.add_subparsers(dest="command", required=True, parser_class=Parser, metavar="COMMAND")
    for command in commands():
        configure(sub.add_parser(command.name, help=command.help, description=command.description or command.help),
                  command)
    return top


INTERRUPTED = 130
"""The exit code of a command stopped by Ctrl-C (SIGINT), as a shell reports one: 128 + 2."""


def main(argv: list[str] | None = None) -> int:
    try:
        return dispatch(parser(), list(sys.argv[1:] if argv is None else argv))
    except KeyboardInterrupt:  # Ctrl-C: one line, no traceback; programs it started got the signal too
        print("\ninterrupted (Ctrl-C): stopped; what it was writing is left unfinished, not replaced", file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:  # the reader went away (`… | head`): stop quietly, as a shell tool does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush at exit
        return 141
