"""`mcore-images from-make COMMAND VAR…`: what the Makefile runs, so that make variables reach a command as
data, never as shell text.

make pastes ``$(VAR)`` into a shell line before the shell parses it, so a value such as
``MAX_JOBS='1; rm -rf ~'`` would run a command, and its exit code could hide bake's. Instead the Makefile
exports its variables and names, for each target, which ones the command takes; this module turns each
set one into the command's own option (one meaning per variable, in ``OPTIONS``) and calls the command in
this process, where its parser and validators judge the value like any other argument. ``BAKE_ARGS`` is
split with shell-like quoting (shlex, no expansion, no command substitution) into the arguments after
``--``, which build judges too.
"""

from __future__ import annotations

import argparse
import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mcore_images.command import Command, RunInstead, print_json
from mcore_images.errors import InputError


@dataclass(frozen=True)
class MakeVar:
    """How one make variable reaches a command."""

    option: str | None
    """The command's option (``--stack``); None: a positional argument."""
    flag: bool = False
    """A switch: any non-empty value other than 0/no/false adds ``option`` alone."""


OPTIONS: dict[str, MakeVar] = {
    "STACK": MakeVar("--stack"),
    "GROUP": MakeVar("--group"),
    "LAYER": MakeVar("--layer"),
    "PLATFORM": MakeVar("--platform"),
    "MAX_JOBS": MakeVar("--max-jobs"),
    "NVCC_THREADS": MakeVar("--nvcc-threads"),
    "FORCE": MakeVar("--force", flag=True),
    "REGISTRY": MakeVar("--registry"),
    "SHA": MakeVar("--candidate"),
    "KEY": MakeVar("--key"),
    "SIGN_KEY": MakeVar("--sign-key"),
    "POLICY": MakeVar("--policy"),
    "EXECUTE": MakeVar("--execute", flag=True),
    "IMAGE": MakeVar(None),
    "TIMING_MCORE": MakeVar("--mcore"),
    "TIMING_TE": MakeVar("--te"),
}
"""Every make variable a command takes, with its one meaning."""

PASSTHROUGH = "BAKE_ARGS"
"""Split into the arguments after ``--`` (for docker buildx bake, judged by build)."""

OFF = {"", "0", "no", "false", "off"}


def argv_for(command: str, names: Sequence[str], env: Mapping[str, str], fixed: Sequence[str] = ()) -> list[str]:
    """The command's argv from the named make variables in ``env`` (unset or empty: left out), then the
    recipe's own ``fixed`` arguments."""
    positional: list[str] = []
    options: list[str] = []
    rest: list[str] = []
    for name in names:
        value = env.get(name, "")
        if name == PASSTHROUGH:
            try:
                rest = shlex.split(value)
            except ValueError as exc:
                raise InputError(f"{PASSTHROUGH}: {exc} in {value!r}; quote each bake argument once, e.g. "
                                 f"{PASSTHROUGH}='--set kernels-cuda.contexts.apex=/src/apex'") from None
            continue
        var = OPTIONS.get(name)
        if var is None:
            raise InputError(f"make variable {name} is not one a command takes; known: "
                             f"{', '.join([*OPTIONS, PASSTHROUGH])}")
        if var.flag:
            if value.strip().lower() not in OFF:
                options.append(str(var.option))
        elif value:
            if var.option is None:
                positional.append(value)
            else:
                options += [var.option, value]
    return [command, *positional, *options, *fixed, *(["--", *rest] if rest else [])]


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", metavar="COMMAND", help="the mcore-images command to run (build, plan, promote, …)")
    p.add_argument("variables", nargs="*", metavar="VAR",
                   help=f"make variables it takes, read from the environment: {', '.join([*OPTIONS, PASSTHROUGH])}")
    p.add_argument("--print", dest="print_only", action="store_true",
                   help="print the argv the command would get (JSON) instead of running it")


def _run(args: argparse.Namespace) -> int:
    argv = argv_for(args.target, args.variables, os.environ, args.passthrough)
    if args.target == "from-make":
        raise InputError("from-make runs another command: name it (e.g. `from-make build STACK`)")
    if args.print_only:
        print_json(argv)
        return 0
    raise RunInstead(argv)  # the command line's own parser runs it


COMMANDS = (Command("from-make", "Run a command with its options taken from make variables (the Makefile's way in).",
                    _arguments, _run,
                    description="Turn each make variable the Makefile names into the command's own option (its value "
                    "arrives as data, never as shell text) and run the command.",
                    passthrough="COMMAND, as they are (the recipe's own fixed arguments, e.g. --pretty)"),)
