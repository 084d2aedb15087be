"""`mcore-images promote`: give a certified candidate digest its public tags.

A candidate is pushed by a build under ``candidate-<git sha>-<target>`` and certified by digest
(`mcore-images certify`). `promote` refuses, before touching the registry, unless policy.py accepts
the certificate and the image (passed, this digest, fresh, GPUs, the stack's pins). Then it prints
(dry run, the default) or runs (``--execute``) exactly two commands:

1. ``oras attach`` the certificate (JSON and Markdown) to the digest as an OCI referrer, so whoever
   pulls a public tag can fetch the certificate of the very digest it resolves to;
2. ``docker buildx imagetools create --tag <public tags> REPO@DIGEST``, which points the public tags at
   the digest (the index, with its SBOM and provenance attestations, is copied as it is).

The certificate goes first: a public tag never points at a digest without its certificate. A refused
certificate runs neither command, so the public tags stay where they were.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shlex
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcore_images import images, policy, registry, schemas, tags
from mcore_images.command import Command
from mcore_images.errors import InputError
from mcore_images.images import ImageRef
from mcore_images.stacks import Stack, get_stack, load_stacks

Runner = Callable[..., subprocess.CompletedProcess]
Inspector = Callable[[ImageRef], dict[str, str]]


def parse_candidate(ref: str) -> ImageRef:
    """The candidate by digest (a tag written before ``@`` is dropped)."""
    try:
        parsed = images.parse(ref)
    except ValueError as exc:
        raise InputError(f"--image: {exc}; name the candidate as REPO@sha256:<64 hex>") from None
    if not parsed.digest:
        raise InputError(f"--image {ref!r} must name the candidate by digest (REPO@sha256:<64 hex>); "
                         "build.yml's summary and its bake-metadata artifact give it")
    return parsed.with_digest(parsed.digest)


@dataclass(frozen=True)
class Step:
    """One command promotion runs."""

    argv: tuple[str, ...]
    cwd: Path | None = None

    def __str__(self) -> str:
        line = shlex.join(self.argv)
        return f"(cd {shlex.quote(str(self.cwd))} && {line})" if self.cwd else line


def steps(image: ImageRef, public: Sequence[str], certificate: Path, cert: Mapping[str, Any]) -> list[Step]:
    """Attach the certificate to the digest, then point the public tags at it."""
    files = [f"{certificate.name}:application/json"]
    markdown = certificate.with_suffix(".md")
    if markdown.is_file():
        files.append(f"{markdown.name}:text/markdown")
    attach = Step((
        "oras", "attach", "--artifact-type", schemas.CERTIFICATE_ARTIFACT,
        "--annotation", f"io.mcore-images.certificate.status={cert['certify']['status']}",
        "--annotation", f"org.opencontainers.image.created={cert['created']}",
        image.ref, *files,
    ), certificate.resolve().parent)
    retag = Step(("docker", "buildx", "imagetools", "create",
                  *(arg for tag in public for arg in ("--tag", tag)), image.ref))
    return [attach, retag]


@dataclass
class Promotion:
    image: ImageRef
    stack: Stack
    layer: str
    public_tags: list[str]
    steps: list[Step]


def plan_promotion(certificate: Path, image: str, stack_name: str, layer: str | None = None,
                   max_age_days: float = policy.MAX_AGE_DAYS, now: dt.datetime | None = None,
                   inspect: Inspector | None = None, stacks: dict[str, Stack] | None = None) -> Promotion:
    """Every check, cheapest first; InputError listing every refusal. Nothing is changed here."""
    if max_age_days <= 0:
        raise InputError(f"--max-age-days {max_age_days:g} must be positive (default {policy.MAX_AGE_DAYS:g})")
    ref = parse_candidate(image)
    stack = get_stack(stack_name, stacks if stacks is not None else load_stacks())
    cert = policy.load_certificate(certificate)
    now = now or dt.datetime.now(dt.UTC)
    problems = policy.certificate_problems(cert, ref, now, max_age_days)
    labels = (inspect or registry.registry_labels)(ref)
    image_layer, more = policy.image_problems(labels, stack, cert, layer)
    problems += more
    if problems:
        raise InputError(f"refusing to promote {ref.ref}, public tags untouched: " + "; ".join(problems))
    public = tags.tags(image_layer, stack, ref.registry, ref.repo)
    return Promotion(ref, stack, image_layer, public, steps(ref, public, certificate, cert))


def execute(promotion: Promotion, run: Runner = subprocess.run) -> int:
    for i, step in enumerate(promotion.steps):
        print(f"+ {step}", flush=True)
        try:
            rc = run(list(step.argv), cwd=step.cwd).returncode
        except FileNotFoundError as exc:
            raise InputError(f"{step.argv[0]} not found: install it (.ci/registry.sh tools; docker with buildx)"
                             + ("" if i == 0 else "; the certificate is attached, the tags did not move")) from exc
        if rc != 0:
            state = ("nothing changed" if i == 0
                     else "the certificate is attached, the public tags did not move; run promote again")
            print(f"error: {step.argv[0]} exited {rc}: {state}", file=sys.stderr)
            return 1
    print(f"promoted {promotion.image.ref} to {', '.join(promotion.public_tags)}")
    return 0


def _promote(args: argparse.Namespace) -> int:
    inspect: Inspector = registry.local_labels if args.local else registry.registry_labels
    promotion = plan_promotion(Path(args.certificate), args.image, args.stack, args.layer, args.max_age_days,
                               inspect=inspect)
    print(f"certificate {args.certificate}: passed for {promotion.image.ref} "
          f"(stack {promotion.stack.name}, layer {promotion.layer})")
    print("public tags:\n" + "\n".join(f"  {t}" for t in promotion.public_tags))
    if not args.execute:
        print("dry run; with --execute these run:\n" + "\n".join(f"  {c}" for c in promotion.steps))
        return 0
    return execute(promotion)


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--certificate", required=True, help="certificate.json written by `mcore-images certify`")
    p.add_argument("--image", required=True, help="the candidate by digest: REPO@sha256:…")
    p.add_argument("--stack", required=True, help="the stack the image was built for (checked against its labels)")
    p.add_argument("--layer", default=None, help="assert the image's layer (default: read from its labels)")
    p.add_argument("--max-age-days", type=float, default=policy.MAX_AGE_DAYS,
                   help=f"refuse certificates older than this (default {policy.MAX_AGE_DAYS:g})")
    p.add_argument("--local", action="store_true", help="read labels with docker image inspect (pulled image)")
    p.add_argument("--execute", action="store_true", help="run the commands (default: print them)")


COMMANDS = (Command("promote", "give a certified candidate digest its public tags (dry run unless --execute)",
                    _arguments, _promote,
                    description="Refuse unless CERTIFICATE passed for IMAGE's digest, is fresh, and the image is the "
                    "stack's pins; then attach the certificate (oras attach) and retag (docker buildx imagetools "
                    "create)."),)
