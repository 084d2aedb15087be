"""The tag scheme: a tag tells what the image holds. Mirrors the functions in docker-bake.hcl
(tests/unit/mcore_images/test_bake.py compares both on every stack)."""

from __future__ import annotations

import argparse
import datetime as dt
import re

from mcore_images.command import Command, print_json
from mcore_images.components import BY_KEY
from mcore_images.engines import ENGINES as ROLLOUT_ENGINES
from mcore_images.errors import InputError
from mcore_images.stacks import Stack, get_stack

DEFAULT_REPO = "mcore-images"


def origin(stack: Stack) -> str:
    """Where the base comes from: ngc26.06 / cuda13.0.2 / debian-trixie."""
    if stack.flavor == "ngc":
        return "ngc" + re.search(r":([0-9]+[.][0-9]+)", stack.base_image).group(1)
    if stack.flavor == "cuda":
        return "cuda" + re.search(r":([0-9]+[.][0-9]+[.][0-9]+)", stack.base_image).group(1)
    return f"debian-{stack.debian_suite}"


def platform(stack: Stack) -> str:
    return f"torch{stack.torch}-cu{stack.cuda}-py{stack.python}-{origin(stack)}"


def engine(stack: Stack) -> str:
    """The rollout engine in an app tag (``-vllm0.25.0``), empty without one."""
    return "".join(f"-{c.key}{stack.pins[c.key]}" for c in ROLLOUT_ENGINES if stack.has(c.key))


def layer_tag(layer: str, stack: Stack) -> str:
    apex = BY_KEY["apex"].short(stack.apex)
    return {
        "base": f"base-{platform(stack)}",
        "kernels": f"kernels-te{stack.te}-apex{apex}-{platform(stack)}",
        "runtime": f"runtime-mcore{stack.mcore}-te{stack.te}-{platform(stack)}",
        "app": f"app-verl{stack.verl}{engine(stack)}-mcore{stack.mcore}-te{stack.te}-{platform(stack)}",
    }[layer]


IMMUTABLE_SUFFIX = re.compile(r"-[0-9]{8}-([0-9a-f]{12})$")
"""How an immutable tag ends: ``-<YYYYMMDD>-<first 12 hex digits of the digest>`` (immutable_tag writes it)."""


def immutable_tag(content_tag: str, digest: str, created: dt.datetime) -> str:
    """The tag a promotion writes next to the moving ones, which never moves: the content tag, the
    certificate's date and the first 12 hex digits of the digest (at most 128 characters, OCI's limit)."""
    tag = f"{content_tag}-{created:%Y%m%d}-{_short(digest)}"
    if len(tag) > 128:
        raise InputError(f"immutable tag {tag!r} is longer than 128 characters: shorten the stack's versions")
    return tag


def _short(digest: str) -> str:
    return digest.removeprefix("sha256:")[:12]


def is_immutable(tag: str) -> bool:
    """Whether ``tag`` has the form of an immutable tag (of any content tag and digest)."""
    return IMMUTABLE_SUFFIX.search(tag) is not None


def is_immutable_tag_of(tag: str, content_tag: str, digest: str) -> bool:
    """Whether ``tag`` is the immutable tag of ``content_tag`` promoted at ``digest`` (any date)."""
    match = IMMUTABLE_SUFFIX.search(tag)
    return (match is not None and tag[:match.start()] == content_tag and match.group(1) == _short(digest))


def is_candidate_tag_of(tag: str, target: str) -> bool:
    """Whether ``tag`` is a candidate tag (candidate_tag) of ``target``, from any commit."""
    prefix, _, rest = tag.partition("-")
    sha, _, name = rest.partition("-")
    return prefix == "candidate" and bool(_SHA.match(sha)) and name == target


def image(tag: str, registry: str = "", repo: str = DEFAULT_REPO) -> str:
    return f"{registry}/{repo}:{tag}" if registry else f"{repo}:{tag}"


def tags(layer: str, stack: Stack, registry: str = "", repo: str = DEFAULT_REPO) -> list[str]:
    """The full tag and its short alias (`runtime-debian`)."""
    return [image(layer_tag(layer, stack), registry, repo), image(f"{layer}-{stack.name}", registry, repo)]


TAG_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
"""A beginning that a tag may have (OCI tags: ``[A-Za-z0-9_][A-Za-z0-9._-]{0,127}``), leaving room for the rest."""


def target(layer: str, stack: Stack) -> str:
    return f"{layer}-{stack.name}"


_SHA = re.compile(r"^[0-9a-f]{7,40}$")


def candidate_tag(target: str, sha: str, option: str = "--sha") -> str:
    """The tag a build pushes before certification: ``candidate-<git sha>-<target>``."""
    if not _SHA.match(sha):
        raise InputError(f"{option} {sha!r} is not a git commit (7 to 40 lowercase hex digits): pass the commit "
                         "that built the image (e.g. $GITHUB_SHA)")
    return f"candidate-{sha}-{target}"


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--stack", required=True, help="the stack (see `mcore-images plan`)")
    p.add_argument("--layer", default=None, help="one layer (default: every layer of the stack)")
    p.add_argument("--registry", default="", help="prefix the tags with this registry, e.g. ghcr.io/acme")
    p.add_argument("--repo", default=DEFAULT_REPO, help=f"repository name under the registry (default {DEFAULT_REPO})")
    p.add_argument("--candidate", default="", metavar="SHA",
                   help="print the candidate tags candidate-<SHA>-<target> a build of commit SHA pushes")


def _run(args: argparse.Namespace) -> int:
    stack = get_stack(args.stack)
    if args.layer and args.layer not in stack.built_layers:
        raise InputError(f"stack '{stack.name}' has no layer '{args.layer}'; "
                         f"choose one of: {', '.join(stack.built_layers)}")
    out: dict[str, list[str]] = {}
    for layer in [args.layer] if args.layer else list(stack.built_layers):
        name = target(layer, stack)
        out[name] = ([image(candidate_tag(name, args.candidate, "--candidate"), args.registry, args.repo)]
                     if args.candidate else tags(layer, stack, args.registry, args.repo))
    if args.json:
        print_json(out)
    else:
        print("\n".join(tag for target_tags in out.values() for tag in target_tags))
    return 0


COMMANDS = (Command("tags", "print the public (or candidate) tags of a stack's layers", _arguments, _run,
                    prints_data=True),)
