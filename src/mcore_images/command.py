"""The contract every `mcore-images` command follows, and the one way to declare one.

A module that offers commands lists them in ``COMMANDS`` (a tuple of ``Command``); cli.py's table names the module
of each command, imports it when that command runs and builds the parser from the tuple. The contract, checked by
tests/unit/mcore_images/test_cli.py for every command:

- every option has help text;
- a command that prints data (``prints_data``) takes ``--json`` and then prints one JSON document;
- a bad input is one line on stderr that names the fix, and exit code 2, before anything runs
  (``InputError`` anywhere below a command; argparse's own errors are reduced to one line too);
- a command that runs another program takes that program's arguments after ``--`` (``passthrough``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

from mcore_images.errors import InputError

Handler = Callable[[argparse.Namespace], int]


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Handler
    description: str | None = None
    prints_data: bool = False
    """Adds ``--json``: the command then prints one JSON document on stdout."""
    passthrough: str | None = None
    """What the arguments after ``--`` are for (e.g. 'python -m mcore_images.smoke'); they land in
    ``args.passthrough``."""


class RunInstead(Exception):
    """Raised by a command that stands for another (``from-make``): dispatch runs ``argv`` with the parser the
    command line makes for it, so that such a command needs no import of the command table."""

    def __init__(self, argv: list[str]) -> None:
        super().__init__(argv)
        self.argv = argv


class Parser(argparse.ArgumentParser):
    """argparse with the contract's error shape: one line naming the fix, exit 2."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {self.prog}: {message}; see `{self.prog} --help`", file=sys.stderr)
        raise SystemExit(2)


def configure(parser: argparse.ArgumentParser, command: Command) -> None:
    """Give a parser the command's arguments and the contract's common ones."""
    command.arguments(parser)
    if command.prints_data:
        parser.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    parser.set_defaults(func=command.run, passthrough_for=command.passthrough, command=command.name)
    if command.passthrough:
        parser.epilog = f"Arguments after -- go to {command.passthrough}."


def split_passthrough(argv: list[str]) -> tuple[list[str], list[str]]:
    """Our arguments, and those after the first ``--`` (for the program a command runs)."""
    if "--" in argv:
        cut = argv.index("--")
        return argv[:cut], argv[cut + 1:]
    return argv, []


def dispatch(parser_for: Callable[[list[str]], argparse.ArgumentParser], argv: list[str]) -> int:
    """Parse and run under the contract: InputError anywhere is one line on stderr and its exit code. ``parser_for``
    gives the parser for a command line (the command table imports only the module of the command it names)."""
    parser = parser_for(argv)
    own, rest = split_passthrough(argv)
    try:
        try:
            args = parser.parse_args(own)
        except SystemExit as done:  # --help, --version, or argparse's one-line error (Parser.error)
            return int(done.code or 0)
        if rest and not args.passthrough_for:
            raise InputError(f"`{parser.prog} {args.command}` takes no arguments after --: drop "
                             f"'-- {' '.join(rest)}'")
        args.passthrough = rest
        return args.func(args)
    except RunInstead as instead:
        return dispatch(parser_for, instead.argv)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code


def standalone(command: Command, argv: list[str] | None = None) -> int:
    """Run one command as its own program (``python -m mcore_images.image_build.jobs``)."""
    parser = Parser(prog=f"mcore-images {command.name}", description=command.description or command.help)
    configure(parser, command)
    return dispatch(lambda _: parser, list(sys.argv[1:] if argv is None else argv))


def print_json(data: Any, compact: bool = False) -> None:
    """The one way a command prints JSON: indented, or on one line (``compact``: $GITHUB_OUTPUT, a log line)."""
    text = json.dumps(data, default=str, separators=(",", ":")) if compact else json.dumps(data, indent=2, default=str)
    print(text, flush=True)
