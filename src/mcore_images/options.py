"""Values on a command line: numbers finite and in range, no value empty, every parser's error one line.

argparse's ``type=float`` takes ``nan``, ``inf`` and ``-5`` alike, and NaN then passes every comparison a later
check makes (``change < -nan`` is never true: a gate that cannot fail; a timeout of NaN never fires). Every float
option of the tool and of the programs that run inside the images (the smoke, the bridge check, the bench, the verl
step) is read through ``number``, every count through ``whole``, and a number read from a file through ``problem``.

An empty value is never a choice: ``--key ""`` (an unset shell variable) once skipped the key check, ``--refresh ""``
became a plain read and ``run --out ""`` mounted the current folder. OneLineParser, the parser of the tool's commands
and of every program, refuses an empty value for any option or argument in one line. Standard library only: the
smoke imports it.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any, NoReturn


def _wanted(low: float | None, high: float | None, above: bool) -> str:
    """The range in words: ``a number greater than 0``, ``a number from 0 to 100``."""
    if low is not None and high is not None:
        return f"a number above {low:g}, up to {high:g}" if above else f"a number from {low:g} to {high:g}"
    if low is not None:
        return f"a number greater than {low:g}" if above else f"a number of {low:g} or more"
    if high is not None:
        return f"a number of {high:g} or less"
    return "a finite number"


def problem(value: float, low: float | None = None, high: float | None = None, above: bool = False) -> str | None:
    """Why ``value`` is not a finite number in [low, high] (``above``: greater than ``low``); None when it is."""
    wanted = _wanted(low, high, above)
    if not math.isfinite(value):
        return f"{value} is not a finite number: give {wanted}"
    too_low = low is not None and (value <= low if above else value < low)
    if too_low or (high is not None and value > high):
        return f"{value:g} is out of range: give {wanted}"
    return None


def number(low: float | None = None, high: float | None = None, *, above: bool = False,
           example: str) -> Callable[[str], float]:
    """An argparse ``type``: the text as a float that is finite and in range, else argparse's error (one line
    where the parser reduces its errors to one, as every parser of the tool and of the programs does)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number: give {_wanted(low, high, above)}, e.g. "
                                             f"{example}") from None
        if found := problem(value, low, high, above):
            raise argparse.ArgumentTypeError(f"{found}, e.g. {example}")
        return value

    parse.__name__ = "number"  # what argparse names in its own messages
    return parse


def whole(low: int | None = None, high: int | None = None, *, example: str) -> Callable[[str], int]:
    """An argparse ``type``: the text as a whole number in [low, high], else argparse's error (one line)."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number: give {_whole_wanted(low, high)}, e.g. "
                                             f"{example}") from None
        if (low is not None and value < low) or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"{value} is out of range: give {_whole_wanted(low, high)}, e.g. "
                                             f"{example}")
        return value

    parse.__name__ = "whole number"
    return parse


def _whole_wanted(low: int | None, high: int | None) -> str:
    if low is not None and high is not None:
        return f"a whole number from {low} to {high}"
    if low is not None:
        return f"a whole number of {low} or more"
    return f"a whole number of {high} or less" if high is not None else "a whole number"


class OneLineParser(argparse.ArgumentParser):
    """argparse whose errors are one line on stderr naming the fix, with exit code 2, instead of a usage block, and
    which refuses an empty value: the parser of the tool's commands (cli.py, `python -m mcore_images.doctor`) and of
    each program that runs inside the images, ``prefix`` leading the line (``smoke: could not run: ``). command.Parser,
    of the same shape, is left to the build's job planner alone (command.py is one of the few files the Dockerfile's
    compile steps mount: an edit there would compile them again)."""

    def __init__(self, *args: Any, prefix: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.prefix = prefix

    def error(self, message: str) -> NoReturn:
        prefix = f"error: {self.prog}: " if self.prefix is None else self.prefix
        self.exit(2, f"{prefix}{message}; see `{self.prog} --help`\n")

    def _get_values(self, action: argparse.Action, arg_strings: list[str]) -> Any:
        # Every value given on the command line passes here, before its ``type`` converts it: the one place an
        # empty value is refused, whatever the option (a subcommand's own parser judges its own arguments).
        if "" in arg_strings and action.nargs not in (argparse.PARSER, argparse.REMAINDER):
            name = "/".join(action.option_strings) or (action.metavar if isinstance(action.metavar, str)
                                                      else action.dest.upper())
            self.error(f"{name} is empty (an unset shell variable?): give it a value, or leave the option out")
        return super()._get_values(action, arg_strings)
