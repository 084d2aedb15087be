"""The docker buildx bake arguments a user may add after `mcore-images build --`, judged by parsing them.

Pushing is decided by the tool alone (candidate tags with ``--candidate``; public tags only by
``promote``), and what is built is decided by the stack's pins and locks. So the pass-through is an
allow-list, not a search for bad words: every argument is parsed as bake would parse it, and anything
that could push (``--push``, an ``output`` or ``tags`` override, a registry cache export), read another
bake file, name other targets, or change a build argument behind the rules is refused in one line.

A build that pushes candidates is judged once more on what bake resolves, not on how the arguments are
spelled: bake prints the definition with and without the user's arguments (``docker buildx bake --print``),
and any target whose inputs or outputs differ (contexts, args, secrets, outputs, platforms, tags, the
Dockerfile) is refused, whatever pattern or spelling the arguments used (``changed``).
"""

from __future__ import annotations

from collections.abc import Sequence

from mcore_images.errors import InputError

FLAGS = frozenset({"--no-cache", "--pull", "--load", "--print"})
"""Switches that change how, not what, is built (and none of them pushes)."""

VALUED = {"--progress": frozenset({"auto", "plain", "tty", "quiet", "rawjson"}), "--builder": None}
"""Options with a value (None: any value)."""

SET_KEYS = ("contexts.apex", "cache-from", "no-cache", "pull")
"""What ``--set TARGET.KEY=VALUE`` may override: the apex source (an air-gapped site's checkout at the pinned
commit), cache imports and cache switches. The other named contexts (the locks, the base image, the layer
below) are what makes the image the stack's: its tags would name something else."""

ALLOWED = ("--no-cache, --pull, --load, --print, --progress MODE, --builder NAME, --set TARGET.contexts.apex=DIR, "
           "--set TARGET.cache-from=…")

SAME_BUILD = frozenset({"cache-from", "cache-to", "no-cache", "no-cache-filter", "pull"})
"""Keys of a resolved bake target that change how it is built, not what: everything else must stay as the
stack defines it in a build that pushes."""


def _refuse(arg: str, reason: str) -> InputError:
    return InputError(f"`build -- {arg}` {reason}; allowed after --: {ALLOWED}")


def _judge_set(value: str) -> None:
    target_key, sep, _ = value.partition("=")
    target, dot, key = target_key.partition(".")
    if not sep or not dot or not target or not key:
        raise _refuse(f"--set {value}", "is not TARGET.KEY=VALUE")
    if key not in SET_KEYS and not key.startswith("contexts.apex::"):  # apex::os/arch: one platform's source
        what = ("the locks, the base and the layers below come from the stack" if key.startswith("contexts.")
                else "outputs, tags and build args come from the stack")
        raise _refuse(f"--set {value}", f"overrides {key!r}: {what}")


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


def changed(stack_defined: dict, with_user_args: dict) -> list[str]:
    """``target.key`` for every key of a resolved bake definition (``docker buildx bake --print``'s JSON) that
    the user's arguments changed beyond the cache settings, and every target they added or dropped."""
    before, after = stack_defined.get("target", {}), with_user_args.get("target", {})
    found = [f"{name} (added)" for name in sorted(set(after) - set(before))]
    found += [f"{name} (dropped)" for name in sorted(set(before) - set(after))]
    for name in sorted(set(before) & set(after)):
        keys = (set(before[name]) | set(after[name])) - SAME_BUILD
        found += [f"{name}.{key}" for key in sorted(keys) if before[name].get(key) != after[name].get(key)]
    return found
