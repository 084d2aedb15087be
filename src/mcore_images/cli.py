"""mcore-images: build, certify and diagnose Megatron-Core training images.

The command table: each command's name, the module that declares it (in that module's COMMANDS, where its help and
its options live; command.py says the contract) and the group `--help` lists it under. A command line imports the
module of the command it runs and no other: `mcore-images doctor` never loads the build or release code, and one
package's import error cannot stop another's commands. `--help` reads every module to list them all. Every bad
input ends with one line naming the fix and exit code 2, before anything runs.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import sys
import textwrap
from collections.abc import Callable, Collection
from dataclasses import dataclass

from mcore_images import __version__
from mcore_images.command import Command, configure, dispatch
from mcore_images.options import OneLineParser


@dataclass(frozen=True)
class Entry:
    name: str
    module: str
    """The module whose COMMANDS declares it (imported when the command runs)."""


GROUPS: tuple[tuple[str, tuple[Entry, ...]], ...] = (
    ("use an image", (
        Entry("run", "mcore_images.launch.run"),
        Entry("doctor", "mcore_images.doctor.command"),
        Entry("smoke", "mcore_images.launch.programs"),
        Entry("bridge", "mcore_images.launch.programs"),
        Entry("bench", "mcore_images.launch.programs"),
        Entry("verify", "mcore_images.release.verify"),
        Entry("tags", "mcore_images.catalogue.tags"),
        Entry("kube-manifest", "mcore_images.launch.kube"),
    )),
    ("build images", (
        Entry("plan", "mcore_images.resolve.plan"),
        Entry("build", "mcore_images.image_build.bake"),
        Entry("base", "mcore_images.image_build.debian_base"),
        Entry("jobs", "mcore_images.image_build.jobs"),
        Entry("lock", "mcore_images.resolve.lock"),
        Entry("update", "mcore_images.image_build.regions"),
        Entry("validate", "mcore_images.image_build.regions"),
        Entry("outdated", "mcore_images.resolve.outdated"),
        Entry("reproduce", "mcore_images.image_build.reproduce"),
    )),
    ("release images", (
        Entry("certify", "mcore_images.release.certify"),
        Entry("attach", "mcore_images.release.promote"),
        Entry("promote", "mcore_images.release.promote"),
        Entry("ledger", "mcore_images.release.authority"),
        Entry("report", "mcore_images.report.command"),
    )),
    ("internal (what the Makefile and the workflows run)", (
        Entry("matrix", "mcore_images.release.release_matrix"),
        Entry("index", "mcore_images.release.platform_index"),
        Entry("build-timing", "mcore_images.image_build.timing"),
        Entry("from-make", "mcore_images.image_build.make_vars"),
    )),
)
"""Every command, by group, in the order `mcore-images --help` lists them."""

ENTRIES = {entry.name: entry for _, entries in GROUPS for entry in entries}


def load(name: str) -> Command:
    """The command ``name``, its module imported now."""
    module = importlib.import_module(ENTRIES[name].module)
    return next(command for command in module.COMMANDS if command.name == name)


def commands() -> list[Command]:
    """Every command (every module imported), in the table's order."""
    return [load(name) for name in ENTRIES]


def listing(width: int | None = None) -> str:
    """The commands by group, each with its help (what `--help` shows under the usage line)."""
    width = width or min(shutil.get_terminal_size().columns, 100)
    column = max(len(name) for name in ENTRIES) + 4
    out = []
    for title, entries in GROUPS:
        out.append(f"{title}:")
        for entry in entries:
            lines = textwrap.wrap(load(entry.name).help, max(width - column, 40)) or [""]
            out.append(f"  {entry.name:<{column - 2}}{lines[0]}")
            out.extend(" " * column + line for line in lines[1:])
        out.append("")
    out.append("`mcore-images COMMAND --help` says what a command takes.")
    return "\n".join(out)


class _Top(OneLineParser):
    """The top-level parser: its help lists the commands by group (argparse lists subcommands in one flat group)."""

    def format_help(self) -> str:
        return f"{self.format_usage()}\n{self.description}\n\n{listing()}\n\noptions:\n" \
               "  -h, --help  show this help message and exit\n  --version   show the version and exit\n"


def parser(only: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The command line's parser: every command configured, or only those named in ``only`` (the others are names
    argparse knows, their modules not imported)."""
    top = _Top(prog="mcore-images", description=__doc__.splitlines()[0])
    top.add_argument("--version", action="version", version=f"mcore-images {__version__}")
    sub = top.add_subparsers(dest="command", required=True, parser_class=OneLineParser, metavar="COMMAND")
    for name in ENTRIES:
        if only is None or name in only:
            command = load(name)
            configure(sub.add_parser(name, help=command.help, description=command.description or command.help),
                      command)
        else:
            sub.add_parser(name)
    return top


def named(argv: list[str]) -> tuple[str, ...]:
    """The command a command line runs, when its first word names one (none: --help, --version, a typo)."""
    return (argv[0],) if argv and argv[0] in ENTRIES else ()


def main(argv: list[str] | None = None, ready: Callable[[], None] = lambda: None) -> int:
    """Run one command; ``ready`` is called once its module is imported, before it runs (__main__.py hands Ctrl-C
    back to Python there). Ctrl-C (a KeyboardInterrupt) goes on to the entry point, which says so in one line and
    exits 130."""
    words = list(sys.argv[1:] if argv is None else argv)
    try:
        first = parser(named(words))
        ready()
        return dispatch(lambda line: first if line is words else parser(named(line)), words)
    except BrokenPipeError:  # the reader went away (`… | head`): stop quietly, as a shell tool does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush at exit
        return 141
