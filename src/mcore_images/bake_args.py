"""The docker buildx bake arguments a user may add after `mcore-images build --`, judged by parsing them.

Pushing is decided by the tool alone (candidate tags with ``--candidate``; public tags only by
``promote``), and what is built is decided by the stack's pins and locks. So the pass-through is an
allow-list, not a search for bad words: every argument is parsed as bake would parse it, and anything
that could push (``--push``, an ``output`` or ``tags`` override, a registry cache export), read another
bake file, name other targets, or change a build argument behind the rules is refused in one line.
"""

from __future__ import annotations

from collections.abc import Sequence

from mcore_images.errors import InputError

FLAGS = frozenset({"--no-cache", "--pull", "--load", "--print"})
"""Switches that change how, not what, is built (and none of them pushes)."""

VALUED = {"--progress": frozenset({"auto", "plain", "tty", "quiet", "rawjson"}), "--builder": None}
"""Options with a value (None: any value)."""

SET_KEYS = ("contexts.", "cache-from", "no-cache", "pull")
"""What ``--set TARGET.KEY=VALUE`` may override: named contexts (an air-gapped apex source), cache
imports and cache switches."""

ALLOWED = ("--no-cache, --pull, --load, --print, --progress MODE, --builder NAME, --set TARGET.contexts.NAME=DIR, "
           "--set TARGET.cache-from=…")


def _refuse(arg: str, reason: str) -> InputError:
    return InputError(f"`build -- {arg}` {reason}; allowed after --: {ALLOWED}")


def _judge_set(value: str) -> None:
    target_key, sep, _ = value.partition("=")
    target, dot, key = target_key.partition(".")
    if not sep or not dot or not target or not key:
        raise _refuse(f"--set {value}", "is not TARGET.KEY=VALUE")
    if not key.startswith(SET_KEYS) or (key.startswith("contexts.") and len(key) == len("contexts.")):
        raise _refuse(f"--set {value}", f"overrides {key!r}: outputs, tags and build args come from the stack")


def judge(args: Sequence[str]) -> None:
    """Refuse any argument outside the allow-list (InputError: one line, exit 2)."""
    items = list(args)
    i = 0
    while i < len(items):
        arg = items[i]
        name, eq, inline = arg.partition("=")
        if not arg.startswith("-"):
            raise _refuse(arg, "names a bake target or group; choose what to build with --stack, --group, --layer")
        if arg in FLAGS:
            i += 1
            continue
        if name in (*VALUED, "--set"):
            if eq:
                value = inline
            elif i + 1 < len(items):
                value = items[i + 1]
                i += 1
            else:
                raise _refuse(arg, "needs a value")
            if name == "--set":
                _judge_set(value)
            elif (allowed := VALUED[name]) is not None and value not in allowed:
                raise _refuse(f"{name} {value}", f"is not one of {', '.join(sorted(allowed))}")
            i += 1
            continue
        reason = ("would push uncertified images (push candidate tags with --candidate SHA --registry R; public "
                  "tags come only from `mcore-images promote`)" if name == "--push"
                  else "would read another bake file" if name in ("-f", "--file")
                  else "is not an argument this build lets through")
        raise _refuse(arg, reason)
