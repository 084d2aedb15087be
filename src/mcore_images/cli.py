"""mcore-images: build, certify and diagnose Megatron-Core training images.

Every command is declared once, in its module's COMMANDS (command.py says the contract). Every bad
input ends with one line naming the fix and exit code 2, before anything runs.
"""

from __future__ import annotations

import argparse
import os
import sys
from types import ModuleType

from mcore_images import __version__
from mcore_images.catalogue import tags
from mcore_images.command import Command, configure, dispatch
from mcore_images.doctor import command as doctor
from mcore_images.image_build import bake, debian_base, jobs, make_vars, regions, reproduce, timing
from mcore_images.launch import kube, programs, run
from mcore_images.options import OneLineParser
from mcore_images.release import authority, certify, platform_index, promote, release_matrix, verify
from mcore_images.report import command as report
from mcore_images.resolve import lock, outdated, plan

MODULES: tuple[ModuleType, ...] = (
    plan, jobs, lock, regions, debian_base, bake, doctor, programs, run, certify, promote, verify, authority, tags,
    release_matrix, platform_index, outdated, reproduce, timing, report, kube, make_vars,
)
"""Modules that declare commands, in the order `mcore-images --help` lists them."""


def commands() -> list[Command]:
    return [c for module in MODULES for c in module.COMMANDS]


def parser() -> argparse.ArgumentParser:
    top = OneLineParser(prog="mcore-images", description=__doc__.splitlines()[0])
    top.add_argument("--version", action="version", version=f"mcore-images {__version__}")
    sub = top.add_subparsers(dest="command", required=True, parser_class=OneLineParser, metavar="COMMAND")
    for command in commands():
        configure(sub.add_parser(command.name, help=command.help, description=command.description or command.help),
                  command)
    return top


def main(argv: list[str] | None = None) -> int:
    """Run one command; Ctrl-C (a KeyboardInterrupt) goes on to the entry point, __main__.py, which says so in one
    line and exits 130."""
    try:
        return dispatch(parser(), list(sys.argv[1:] if argv is None else argv))
    except BrokenPipeError:  # the reader went away (`… | head`): stop quietly, as a shell tool does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush at exit
        return 141
