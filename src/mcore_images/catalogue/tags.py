"""The tag scheme: a tag tells what the image holds. Written once, here and in the catalogue: each component's
``in_tag`` (components.py) says how a tag names its pin, ``ORIGINS`` how a tag names where the base comes from,
``SEPARATOR`` what joins the parts; the immutable and candidate tags and how long each may grow are computed here
alone (the `tag-length` rule asks ``immutable_length`` and ``longest_candidate``). The bake file's tags are these
(docker-bake.json, written by image_build/bake_file.py)."""

from __future__ import annotations

import argparse
import datetime as dt
import re
from dataclasses import dataclass

from mcore_images.catalogue import components, platforms
from mcore_images.catalogue.components import LAYERS, Component
from mcore_images.catalogue.stacks import Stack, get_stack
from mcore_images.command import Command, print_json
from mcore_images.errors import InputError

DEFAULT_REPO = "mcore-images"

OCI_TAG_MAX = 128
"""The distribution spec's longest tag (``[A-Za-z0-9_][A-Za-z0-9._-]{0,127}``)."""
SEPARATOR = "-"
"""What joins a tag's parts (the layer, each pin it names, the origin) and the alias's (``<layer>-<stack>``)."""
DIGEST_SHOWN = 12
"""How many hex digits of the digest an immutable tag ends with."""


@dataclass(frozen=True)
class Origin:
    """How a tag ends for a flavor: ``prefix`` and the first group of ``pattern`` in the stack's ``field`` (bake's
    HCL evaluates the same pattern with its RE2 ``regex``, so it keeps to what both engines read alike)."""

    prefix: str
    field: str
    pattern: str
    example: str
    """What the field must look like (the fix an error names)."""


ORIGINS: dict[str, Origin] = {
    "ngc": Origin("ngc", "base_image", ":([0-9]+[.][0-9]+)", "nvcr.io/nvidia/pytorch:YY.MM-py3"),
    "cuda": Origin("cuda", "base_image", ":([0-9]+[.][0-9]+[.][0-9]+)", "nvidia/cuda:X.Y.Z-cudnn-devel-ubuntu24.04"),
    "debian": Origin("debian-", "debian_suite", "^([a-z]*)$", "a suite name such as trixie"),
}
"""Where the base comes from, as the end of every tag: ngc26.06 / cuda13.0.2 / debian-trixie (one per flavor)."""


def origin(stack: Stack) -> str:
    """Where the base comes from: ngc26.06 / cuda13.0.2 / debian-trixie."""
    rule = ORIGINS[stack.flavor]
    value = getattr(stack, rule.field)
    match = re.search(rule.pattern, value)
    if match is None:
        raise InputError(f"stack '{stack.name}': {rule.field} {value!r} does not give the release its tags end with "
                         f"(pattern {rule.pattern}); write it like {rule.example}")
    return rule.prefix + match.group(1)


def parts(layer: str) -> list[Component]:
    """The components a tag of ``layer`` names, in the order it names them (by ``in_tag.rank``)."""
    here = LAYERS.index(layer)
    named = [c for c in components.CATALOGUE
             if c.in_tag and LAYERS.index(c.layer) <= here <= LAYERS.index(c.in_tag.until)]
    return sorted(named, key=lambda c: c.in_tag.rank if c.in_tag else 0)


def part(component: Component, stack: Stack) -> str:
    """How a tag names one pin: ``te2.16.0``, ``apex6424da3b``; '' for an optional part the stack lacks."""
    assert component.in_tag is not None
    if component.in_tag.optional and not stack.has(component.key):
        return ""
    return component.in_tag.prefix + component.short(stack.pins[component.key])


def layer_tag(layer: str, stack: Stack) -> str:
    """The content tag: the layer, each part its tag names, the origin (``runtime-mcore…-te…-torch…-debian-trixie``).
    """
    named = [text for c in parts(layer) if (text := part(c, stack))]
    return SEPARATOR.join([layer, *named, origin(stack)])


IMMUTABLE_SUFFIX = re.compile(rf"{SEPARATOR}[0-9]{{8}}{SEPARATOR}([0-9a-f]{{{DIGEST_SHOWN}}})$")
"""How an immutable tag ends: ``-<YYYYMMDD>-<first 12 hex digits of the digest>`` (immutable_tag writes it)."""


def _immutable(content_tag: str, digest: str, created: dt.datetime) -> str:
    return SEPARATOR.join((content_tag, f"{created:%Y%m%d}", _short(digest)))


def immutable_tag(content_tag: str, digest: str, created: dt.datetime) -> str:
    """The tag a promotion writes next to the moving ones, which never moves: the content tag, the
    certificate's date and the first 12 hex digits of the digest (at most 128 characters, OCI's limit)."""
    tag = _immutable(content_tag, digest, created)
    if len(tag) > OCI_TAG_MAX:
        raise InputError(f"immutable tag {tag!r} is longer than {OCI_TAG_MAX} characters: shorten the stack's "
                         "versions")
    return tag


def immutable_length(content_tag: str) -> int:
    """How long the immutable tag of ``content_tag`` is, whatever its date and digest."""
    return len(_immutable(content_tag, "sha256:" + "0" * 64, dt.datetime(2000, 1, 1)))


def immutable_form(content_tag: str, digest: str) -> str:
    """The immutable tags of ``content_tag`` at ``digest``, as a message names them (``…-<date>-<digest>``)."""
    return SEPARATOR.join((content_tag, "<date>", _short(digest)))


def _short(digest: str) -> str:
    return digest.removeprefix("sha256:")[:DIGEST_SHOWN]


def is_immutable(tag: str) -> bool:
    """Whether ``tag`` has the form of an immutable tag (of any content tag and digest)."""
    return IMMUTABLE_SUFFIX.search(tag) is not None


def is_immutable_tag_of(tag: str, content_tag: str, digest: str) -> bool:
    """Whether ``tag`` is the immutable tag of ``content_tag`` promoted at ``digest`` (any date)."""
    match = IMMUTABLE_SUFFIX.search(tag)
    return (match is not None and tag[:match.start()] == content_tag and match.group(1) == _short(digest))


def is_candidate_tag_of(tag: str, target: str) -> bool:
    """Whether ``tag`` is a candidate tag (candidate_tag) of ``target``, from any commit, of its index or of one
    platform."""
    prefix, _, rest = tag.partition("-")
    sha, _, name = rest.partition("-")
    name, dot, arch = name.partition(PLATFORM_SEPARATOR)
    return (prefix == "candidate" and bool(_SHA.match(sha)) and name == target
            and (not dot or arch in platforms.BY_ARCH))


def split_candidate(tag: str) -> tuple[str, str, str | None] | None:
    """(sha, target, architecture or None) of a candidate tag (candidate_tag), None for another tag."""
    prefix, _, rest = tag.partition("-")
    sha, _, name = rest.partition("-")
    target, dot, arch = name.partition(PLATFORM_SEPARATOR)
    if prefix != "candidate" or not _SHA.match(sha) or not target or (dot and arch not in platforms.BY_ARCH):
        return None
    return sha, target, arch or None


def image(tag: str, registry: str = "", repo: str = DEFAULT_REPO) -> str:
    return f"{registry}/{repo}:{tag}" if registry else f"{repo}:{tag}"


def tags(layer: str, stack: Stack, registry: str = "", repo: str = DEFAULT_REPO) -> list[str]:
    """The full tag and its short alias (`runtime-debian`)."""
    return [image(layer_tag(layer, stack), registry, repo), image(target(layer, stack), registry, repo)]


TAG_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
"""A beginning that a tag may have (OCI tags: ``[A-Za-z0-9_][A-Za-z0-9._-]{0,127}``), leaving room for the rest."""


def target(layer: str, stack: Stack | str) -> str:
    """The bake target of a stack's layer, and its image's short alias (``runtime-debian``); ``stack`` or its name."""
    return SEPARATOR.join((layer, stack if isinstance(stack, str) else stack.name))


_SHA = re.compile(r"^[0-9a-f]{7,40}$")


PLATFORM_SEPARATOR = "."
"""Between a target and the architecture of one platform's candidate: stack names have no '.', so
``candidate-<sha>-runtime-debian.arm64`` cannot be another stack's tag."""


def candidate_tag(target: str, sha: str, option: str = "--sha", arch: str | None = None) -> str:
    """The tag a build pushes before certification: ``candidate-<git sha>-<target>``; with ``arch``, one platform's
    image of a multi-platform target (``…-<target>.arm64``), from which `mcore-images index` assembles the first."""
    if not _SHA.match(sha):
        raise InputError(f"{option} {sha!r} is not a git commit (7 to 40 lowercase hex digits): pass the commit "
                         "that built the image (e.g. $GITHUB_SHA)")
    return f"candidate-{sha}-{target}" + (f"{PLATFORM_SEPARATOR}{arch}" if arch else "")


def longest_candidate(target: str, multi_platform: bool) -> int:
    """How long a candidate tag of ``target`` can be: a full git commit, and for a multi-platform stack the longest
    architecture after it."""
    arch = max((p.arch for p in platforms.PLATFORMS), key=len) if multi_platform else None
    return len(candidate_tag(target, "0" * 40, arch=arch))


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


COMMANDS = (Command("tags", "Print the tags of a stack's images (public, or a build's candidates).", _arguments, _run,
                    prints_data=True),)
