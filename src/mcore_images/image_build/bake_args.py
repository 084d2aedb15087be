"""The docker buildx bake arguments a user may add after `mcore-images build --`, judged by parsing them.

Pushing is decided by the tool alone (candidate tags with ``--candidate``; public tags only by
``promote``), and what is built is decided by the stack's pins and locks. So the pass-through is an
allow-list, not a search for bad words: every argument is parsed as bake would parse it, and anything
that could push (``--push``, an ``output`` or ``tags`` override, a registry cache export), read another
bake file, name other targets, or change a build argument behind the rules is refused in one line.

A build that pushes candidates is judged once more on what bake resolves, not on how the arguments are
spelled: bake prints the definition with and without the user's arguments (``docker buildx bake --print``),
and any target whose inputs or outputs differ (contexts, args, secrets, outputs, platforms, tags, the
Dockerfile, the cache it imports) is refused, whatever pattern or spelling the arguments used (``changed``). The
environment reaches bake too: each variable the bake files declare can be set from it, so a build that pushes
candidates refuses every one that is set but those ``CANDIDATE_ENV`` names (``judge_environment``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from mcore_images.errors import InputError, shown

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

SAME_BUILD = frozenset({"no-cache", "no-cache-filter", "pull"})
"""Keys of a resolved bake target that change how it is built, not what: everything else must stay as the
stack defines it in a build that pushes. A cache import is not among them: BuildKit takes an imported cache's
layer for any step whose key it matches, without running the step, so a cache of someone else's can stand in for
what the locks install; a cache export writes outside the candidate tags."""

CANDIDATE_ENV = {
    "REGISTRY": "judged as a registry; the candidate tags are the tool's own (--registry)",
    "IMAGE_REPO": "judged as a repository name; it names where the candidate tags go",
    "MAX_JOBS": "a build secret of the compile steps, outside their cache key: how many jobs, not what they make",
    "NVCC_THREADS": "a build secret of the compile steps, like MAX_JOBS",
    "CA_BUNDLE": "a build secret pip trusts to reach the index; what it installs is held by the locks' hashes",
    "PIP_INDEX_URL_FILE": "a build secret naming the index; what pip installs is held by the locks' hashes",
    "NO_CACHE_FILTER": "stages that run again without the cache: how, not what",
}
"""The bake variables a build that pushes candidates takes from the environment, and why none of them changes
what a candidate is made from. Every other variable docker-bake.hcl declares can be set from the environment too,
and is refused when set: the locks (LOCKS), the revision label (GIT_SHA), the cache (CACHE_FROM, CACHE_TO) come from
the checkout, as the stacks and the catalogue do (docker-bake.json, generated from them, declares no variable)."""

READ_BY_BUILDX = {"SOURCE_DATE_EPOCH": "a candidate is dated by its commit (`mcore-images reproduce` rebuilds it at "
                                       "that date)"}
"""What buildx takes into every build from the environment besides the bake files' variables."""

REFUSED_WHY = {
    "LOCKS": "a candidate installs the stack's committed locks",
    "GIT_SHA": "a candidate's revision label is the checkout's commit",
    "CACHE_FROM": "an imported cache can stand in for any step's output",
    "CACHE_TO": "a cache export writes outside the candidate tags",
    **READ_BY_BUILDX,
}
"""Why a variable that is not in CANDIDATE_ENV is refused, where there is more to say than the default."""


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


def declared(root: Path) -> list[str]:
    """The variables the bake files of the checkout ``root`` declare (docker-bake.hcl's ``variable`` blocks; the
    generated docker-bake.json declares none): bake sets each from an environment variable of that name."""
    names = re.findall(r'^variable\s+"([A-Za-z_][A-Za-z0-9_]*)"', (root / "docker-bake.hcl").read_text(), re.M)
    return sorted(set(names))


def judge_environment(env: Mapping[str, str], root: Path) -> None:
    """Refuse, for a build that pushes candidates, every environment variable that bake or buildx would take into
    the build, but those CANDIDATE_ENV allows (InputError: one line naming the variable and the fix)."""
    for name in [*declared(root), *READ_BY_BUILDX]:
        if name in env and name not in CANDIDATE_ENV:
            why = REFUSED_WHY.get(name, "the stacks and the catalogue come from the checkout")
            raise InputError(f"{name}={shown(env[name])} is set in the environment, and bake would take it into the "
                             f"pushed candidates ({why}): unset {name}, or build without --candidate")
