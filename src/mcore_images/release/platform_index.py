"""`mcore-images index`: one multi-platform index per candidate target, from the candidates each platform's build
pushed (``candidate-<sha>-<target>.<arch>``, one build per platform on a machine of that platform, or under QEMU).

With the docker driver of buildx 0.13 a build loads or pushes one platform; the index is assembled in the registry:
``docker buildx imagetools create -t …:candidate-<sha>-<target> REPO@<amd64 digest> REPO@<arm64 digest>``, which
refers to the platforms' manifests as they are (their digests stay the ones each platform's certificate binds; an
index a platform's build pushed with attestations is merged, attestations included). What it made, the index's digest
and each platform's manifest digest, goes to DIR/index.json, from which `matrix --candidates` makes one
certification per platform and promotion takes the index.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from mcore_images import create_only, docker_cli, reading, tools
from mcore_images.catalogue import images, platforms, tags
from mcore_images.catalogue.stacks import Stack, load_stacks
from mcore_images.command import Command, print_json
from mcore_images.errors import InputError
from mcore_images.release import registry
from mcore_images.release.registry import Runner

INDEX_FILE = "index.json"
COMMAND = "index"
"""The command whose ``written_by`` index.json carries (create_only.py): it replaces only an index.json it wrote."""
"""What `index` writes beside the bake metadata it read: target → the index and its platforms' digests."""


def bake_records(candidates: Path, fix: str) -> list[tuple[Path, str, dict[str, Any]]]:
    """(file, target, record) of every target in the bake metadata files under ``candidates`` (what `build
    --candidate` or bake-action wrote; the index file and buildx's own keys left out). None is bad input: ``fix``."""
    files = sorted(p for p in candidates.glob("*.json") if p.name != INDEX_FILE) if candidates.is_dir() else []
    if not files:
        raise InputError(f"no bake metadata (*.json) under {candidates}: {fix}")
    found = []
    for path in files:
        metadata = reading.read_json(path, "the bake metadata", "save the build's bake metadata unchanged")
        if not isinstance(metadata, dict):
            raise InputError(f"{path} is not bake metadata (a JSON object of targets): save the build's bake metadata "
                             "unchanged")
        found += [(path, target, record) for target, record in metadata.items()
                  if not target.startswith("buildx.") and isinstance(record, dict)]
    return found


def candidate_image(record: dict[str, Any]) -> tuple[str, str, tuple[str, str, str | None] | None]:
    """(its first image name, its pushed digest, its tag read as a candidate tag) of one bake record; empty
    strings and None where the record lacks them."""
    name = next((n for n in str(record.get("image.name", "")).split(",") if n), "")
    digest = str(record.get("containerimage.digest", ""))
    return name, digest, (tags.split_candidate(images.parse(name).tag or "") if name else None)


def per_platform(candidates: Path, sha: str, stacks: dict[str, Stack]) -> dict[str, dict[str, str]]:
    """target → {platform: REPO@digest} of every per-platform candidate of commit ``sha`` that the bake metadata
    files under ``candidates`` name (each what a platform's build wrote: `mcore-images build --candidate`, or
    bake-action's metadata output)."""
    records = bake_records(candidates, "build each platform's candidates first (mcore-images build --candidate "
                           "SHA --platform …), or download the build jobs' artifacts")
    known = {tags.target(layer, s): s for s in stacks.values() for layer in s.built_layers}
    found: dict[str, dict[str, str]] = {}
    for path, target, record in records:
        name, digest, parsed = candidate_image(record)
        if parsed is None or parsed[2] is None:
            continue  # a single-platform stack's candidate is its own tag already
        if parsed[0] != sha:
            raise InputError(f"{path}: {target} is a candidate of commit {parsed[0]}, not {sha}; index the "
                             "candidates of one commit")
        if target not in known:
            raise InputError(f"{path}: target '{target}' is not in env/stacks.json; index from the commit that "
                             "built it")
        if not images.is_digest(digest):
            raise InputError(f"{path}: target '{target}' has no pushed digest; build it with --candidate")
        platform = platforms.BY_ARCH[parsed[2]].name
        if platform not in known[target].platforms:
            raise InputError(f"{path}: {target} was built for {platform}, which stack '{known[target].name}' "
                             "does not list")
        found.setdefault(target, {})[platform] = f"{images.repository(name)}@{digest}"
    return found  # none: every stack built is of one platform, whose candidates are their own tags


def create_command(index_ref: str, sources: dict[str, str]) -> list[str]:
    """The `docker buildx imagetools create` that joins the platforms' manifests under ``index_ref``."""
    return docker_cli.argv("buildx", "imagetools", "create", "-t", index_ref, *(sources[p] for p in sorted(sources)))


def assemble(found: dict[str, dict[str, str]], sha: str, stacks: dict[str, Stack], dry_run: bool = False,
             run: Runner = tools.run) -> dict[str, dict[str, Any]]:
    """Create each target's index and read back what it holds; with ``dry_run``, only the commands."""
    known = {tags.target(layer, s): s for s in stacks.values() for layer in s.built_layers}
    out: dict[str, dict[str, Any]] = {}
    for target, sources in sorted(found.items()):
        repository = images.repository(next(iter(sources.values())))
        index_ref = f"{repository}:{tags.candidate_tag(target, sha)}"
        command = create_command(index_ref, sources)
        missing = [p for p in known[target].platforms if p not in sources]
        entry: dict[str, Any] = {"image.name": index_ref, "sources": dict(sorted(sources.items())), "command": command,
                                 "missing": missing}
        if not dry_run:
            done = run(command, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                why = ((done.stderr or done.stdout or "").strip().splitlines() or [f"exit {done.returncode}"])[-1]
                raise InputError(f"docker buildx imagetools create -t {index_ref} failed ({why}); check the registry "
                                 "and `docker login`")
            index = registry.resolve(images.parse(index_ref), run=run)
            children = registry.platform_children(index, run=run) or {}
            lost = [p for p in sources if p not in children]
            if lost:
                raise InputError(f"{index_ref} holds no {', '.join(lost)} manifest after imagetools create; assemble "
                                 "it again")
            entry.update({"containerimage.digest": index.digest,
                          "platforms": {p: child.digest for p, child in children.items() if p in sources}})
        out[target] = entry
    return out


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--candidates", required=True, metavar="DIR", type=Path,
                   help="folder of the per-platform builds' bake metadata (*.json); index.json is written there")
    p.add_argument("--sha", required=True, help="the commit the candidates were built from")
    p.add_argument("--dry-run", action="store_true", help="print the imagetools commands; create nothing")


def _run(args: argparse.Namespace) -> int:
    tags.candidate_tag("x", args.sha, "--sha")  # a git commit, or one line naming the fix
    if problem := reading.folder_problem(args.candidates, "--candidates"):
        raise InputError(f"{problem}: give the folder of the per-platform builds' bake metadata")
    index = None if args.dry_run else create_only.claim_file(args.candidates / INDEX_FILE, COMMAND, "--candidates")
    stacks = load_stacks()
    made = assemble(per_platform(args.candidates, args.sha, stacks), args.sha, stacks, args.dry_run)
    if not made and not args.json:
        print(f"no per-platform candidate (candidate-{args.sha}-<target>.<arch>) under {args.candidates}: no "
              "multi-platform stack was built, nothing to index")
    if index is not None:
        create_only.write_file(index, COMMAND, made, "--candidates")
    if args.json:
        print_json(made)
        return 0
    for target, entry in made.items():
        held = ", ".join(entry["sources"])
        verb = "would index" if args.dry_run else f"indexed {entry['containerimage.digest']}:"
        print(f"{target}: {verb} {held} as {entry['image.name']}"
              + (f" (not built: {', '.join(entry['missing'])}; the release policy refuses it)"
                 if entry["missing"] else ""))
        if args.dry_run:
            print("  " + " ".join(entry["command"]))
    if not args.dry_run:
        print(f"wrote {args.candidates / INDEX_FILE}", file=sys.stderr)
    return 0


COMMANDS = (Command(COMMAND, "Join each multi-platform target's per-platform candidates into one index.",
                    _arguments, _run, prints_data=True),)
