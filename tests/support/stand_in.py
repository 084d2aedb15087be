"""A stand-in for a command the lent GPU machine runs and this CPU machine cannot (a GPU program, nvidia-smi, a
CUDA compile, a download): it writes its command line as one JSON line and exits 0, so a test can say that a step
reached that command and with what, and the step goes on as it would after it.

Each stand-in runs ``python -I -S stand_in.py RULES RECORDS PROGRAM ARG…`` (the standard library only). RULES is a
JSON list of ``[pattern, kind]``: a pattern is the leading arguments it matches (shell-style, element by element;
``[]`` matches any), the first matching rule decides, and a ``null`` kind means "run the real program". Exit 0:
recorded; exit 3: not a command it stands in for (the caller runs the real one).

A record holds the program and its arguments, the working folder, the environment, the program a ``python -`` read
on stdin, and, for every absolute path in the arguments and the environment, whether it existed at that moment
(``exists``, ``parent`` when only its folder did, ``absent``): a path one level off shows there.
"""

from __future__ import annotations

import fnmatch
import json
import os
import sys

NOT_MINE = 3


def kind_of(rules: list[list], args: list[str]) -> str | None:
    """The kind of the first rule whose pattern leads ``args`` (None: run the real program)."""
    for pattern, kind in rules:
        if len(args) >= len(pattern) and all(fnmatch.fnmatchcase(a, p) for p, a in zip(pattern, args, strict=False)):
            return kind
    return None


def paths_in(values: list[str]) -> set[str]:
    """Every absolute path in ``values``, whole or as an entry of a colon-separated list or an ``--opt=`` value."""
    found = set()
    for value in values:
        for part in value.split(os.pathsep):
            part = part.split("=", 1)[1] if part.startswith("-") and "=" in part else part
            if part.startswith("/"):
                found.add(part.rstrip("/") or "/")
    return found


def state(path: str) -> str:
    if os.path.exists(path):
        return "exists"
    return "parent" if os.path.isdir(os.path.dirname(path)) else "absent"


def main(argv: list[str]) -> int:
    rules_file, records, program, *args = argv
    with open(rules_file, encoding="utf-8") as handle:
        kind = kind_of(json.load(handle), args)
    if kind is None:
        return NOT_MINE
    env = dict(os.environ)
    entry = {"kind": kind, "argv": [program, *args], "cwd": os.getcwd(), "env": env,
             "stdin": sys.stdin.read() if args[:1] == ["-"] else None,
             "paths": {p: state(p) for p in sorted(paths_in(args) | paths_in(list(env.values())))}}
    with open(records, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(entry) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
