"""The release matrices GitHub Actions fans out over, derived from env/stacks.json at run time.

`build.yml` asks `mcore-images matrix --group release` for one entry per stack and platform (the bake targets of
its layers, their candidate tags, its build cache; each platform builds on a runner of its own architecture);
after the builds and `mcore-images index`, `mcore-images matrix --candidates DIR` turns the bake metadata and the
indexes into one entry per certifiable candidate and platform, named by digest, and `--promotions` into one entry
per certifiable target (its index, or its one image), promoted once every platform is certified.
No list of stacks is ever written in YAML: change env/ and the next run's matrix changes with it.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from mcore_images import create_only, reading
from mcore_images.catalogue import images, platforms, tags
from mcore_images.catalogue.stacks import Stack, load_stacks
from mcore_images.catalogue.tags import candidate_tag
from mcore_images.command import Command, print_json
from mcore_images.errors import InputError
from mcore_images.release.platform_index import INDEX_FILE, bake_records, candidate_image
from mcore_images.release.policy import CERTIFIED_LAYERS
from mcore_images.resolve.plan import make_plan, select


def build_matrix(group: str, registry: str = "", repo: str = tags.DEFAULT_REPO, sha: str = "",
                 stacks: dict[str, Stack] | None = None) -> dict[str, Any]:
    """One entry per stack of the group: its bake targets and, with registry and sha, candidate tags and cache.

    The group's rules are checked first (as `make build` does), so a broken pin fails the matrix job,
    before any runner starts a build.
    """
    stacks = stacks if stacks is not None else load_stacks()
    selected = select(stacks, None, group)
    if not selected:
        raise InputError(f"group '{group}' has no stacks; add the group to a stack's `groups` in env/stacks.json")
    violations = [v for p in make_plan(selected, group) for v in p.violations]
    if violations:
        raise InputError(f"{violations[0]} ({len(violations)} rule(s) broken; `make plan GROUP={group}` lists them)")
    if bool(registry) != bool(sha):
        raise InputError("give --registry and --sha together (candidate tags need both), or neither")
    include = []
    for stack in selected:
        targets = [tags.target(layer, stack) for layer in stack.built_layers]
        for name in stack.platforms:
            platform = platforms.BY_NAME[name]
            entry: dict[str, Any] = {
                "stack": stack.name,
                "platform": platform.name,
                "arch": platform.arch,
                "targets": ",".join(targets),
                "certify": ",".join(tags.target(layer, stack) for layer in stack.built_layers
                                    if layer in CERTIFIED_LAYERS),
                "archs": len(stack.cuda_archs.split(";")),
            }
            if registry:
                # A multi-platform stack's platforms push <target>.<arch> candidates (`mcore-images index` joins
                # them) and keep their own build caches; a stack of one platform pushes its plain candidate tags.
                arch = platform.arch if stack.multi_platform else None
                sets = [f"{t}.tags={tags.image(candidate_tag(t, sha, arch=arch), registry, repo)}" for t in targets]
                entry["set"] = "\n".join([*sets, *([f"*.platform={platform.name}"] if arch else [])])
                suffix = "" if platform == platforms.DEFAULT else f"{tags.PLATFORM_SEPARATOR}{platform.arch}"
                entry["cache_ref"] = tags.image(f"buildcache-{stack.name}{suffix}", registry, repo)
            include.append(entry)
    return {"include": include}


def targets_by_name(stacks: dict[str, Stack]) -> dict[str, tuple[Stack, str]]:
    """Bake target name → (stack, layer), for every layer of every stack."""
    return {tags.target(layer, s): (s, layer) for s in stacks.values() for layer in s.built_layers}


def certify_matrix(candidates: Path, stacks: dict[str, Stack] | None = None, top_only: bool = False) -> dict[str, Any]:
    """One entry per certifiable candidate and platform found in the bake metadata files under ``candidates``
    (``top_only``: one target per stack, its highest layer: an app image holds its runtime layer, and its image tests
    run the runtime tests too, so a CPU-bound CI certifies that one alone).

    Each file is what docker/bake-action printed as its ``metadata`` output: target name →
    ``containerimage.digest`` and ``image.name`` (the candidate tag); a multi-platform target's index and its
    platforms' manifest digests come from the index.json `mcore-images index` wrote there. Entries name the image
    by digest: a platform's own manifest, with the index it belongs to.
    """
    stacks = stacks if stacks is not None else load_stacks()
    known = targets_by_name(stacks)
    found = _candidates(candidates, known)
    order = list(known)
    if top_only:
        tops = {e["stack"]: e["target"] for e in sorted(found, key=lambda e: order.index(e["target"]))}
        found = [e for e in found if e["target"] == tops[e["stack"]]]
    return {"include": sorted(found, key=lambda e: (order.index(e["target"]), e["platform"]))}


def promotion_matrix(candidates: Path, stacks: dict[str, Stack] | None = None,
                     top_only: bool = False) -> dict[str, Any]:
    """One entry per certifiable target: what `promote` is given once each of its platforms is certified (the
    index of a multi-platform target, else its one image), and the platforms it holds."""
    entries = certify_matrix(candidates, stacks, top_only)["include"]
    targets: dict[str, dict[str, Any]] = {}
    for entry in entries:
        into = targets.setdefault(entry["target"], {
            "stack": entry["stack"], "layer": entry["layer"], "target": entry["target"],
            "image": entry["index"] or entry["image"], "platforms": []})
        into["platforms"].append(entry["platform"])
    return {"include": [{**e, "platforms": ",".join(e["platforms"])} for e in targets.values()]}


def _candidates(candidates: Path, known: dict[str, tuple[Stack, str]]) -> list[dict[str, str]]:
    """Every certifiable candidate of the bake metadata and index under ``candidates``, one entry per platform."""

    records = bake_records(candidates, "download the build jobs' bake-metadata-* artifacts there first")
    indexed = _indexes(candidates / INDEX_FILE, known)
    found: dict[tuple[str, str], dict[str, str]] = {(e["target"], e["platform"]): e for e in indexed}
    for path, target, record in records:
        if (certifiable := _certifiable(path, target, known)) is None:
            continue
        stack, layer = certifiable
        name, digest, parsed = candidate_image(record)
        if not images.is_digest(digest) or not name:
            raise InputError(f"{path}: target '{target}' has no pushed digest/image name; build it with push")
        platform = (platforms.BY_ARCH[parsed[2]] if parsed and parsed[2]
                    else platforms.BY_NAME[stack.platforms[0]])
        if any(e["target"] == target for e in indexed):
            continue  # one platform of an index: certified by the manifest digest the index holds
        found.setdefault((target, platform.name), {
            "stack": stack.name, "layer": layer, "target": target, "platform": platform.name,
            "arch": platform.arch, "image": f"{images.repository(name)}@{digest}", "index": ""})
    return list(found.values())


def _certifiable(path: Path, target: str, known: dict[str, tuple[Stack, str]]) -> tuple[Stack, str] | None:
    """The stack and layer of a target ``path`` names, None for a layer that is not certified; a target of
    another commit's stacks is bad input."""
    if target not in known:
        raise InputError(f"{path}: target '{target}' is not in env/stacks.json; build and certify from the same "
                         "commit")
    stack, layer = known[target]
    return (stack, layer) if layer in CERTIFIED_LAYERS else None


def _indexes(path: Path, known: dict[str, tuple[Stack, str]]) -> list[dict[str, str]]:
    """One entry per platform of each certifiable index `mcore-images index` recorded in ``path`` (none without)."""
    if not path.exists():
        return []
    recorded = reading.read_json(path, "", "run `mcore-images index` again")
    if not isinstance(recorded, dict):
        raise InputError(f"{path} is not what `mcore-images index` writes (a JSON object): run it again")
    out = []
    for target, record in recorded.items():
        if target == create_only.WRITTEN_BY:
            continue
        if (certifiable := _certifiable(path, target, known)) is None:
            continue
        stack, layer = certifiable
        repository = images.repository(record["image.name"])
        for name, digest in sorted(record.get("platforms", {}).items()):
            platform = platforms.BY_NAME[name]
            out.append({"stack": stack.name, "layer": layer, "target": target, "platform": name,
                        "arch": platform.arch, "image": f"{repository}@{digest}",
                        "index": f"{repository}@{record['containerimage.digest']}"})
    return out


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--group", default=None, help="bake group (default: release)")
    p.add_argument("--registry", default="", help="with --sha: add candidate tags and the build cache ref")
    p.add_argument("--repo", default=tags.DEFAULT_REPO, help=f"repository name (default {tags.DEFAULT_REPO})")
    p.add_argument("--sha", default="", help="the git commit being built")
    p.add_argument("--candidates", default=None, metavar="DIR",
                   help="folder of bake metadata JSON: print one entry per certifiable candidate instead")
    p.add_argument("--top-only", action="store_true",
                   help="with --candidates: one entry per stack, its highest certifiable layer (the app when built)")
    p.add_argument("--promotions", action="store_true",
                   help="with --candidates: one entry per target to promote (its index, or its one image) instead of "
                        "one per platform to certify")
    p.add_argument("--pretty", action="store_true", help="indent (default: one line, for $GITHUB_OUTPUT)")


def _run(args: argparse.Namespace) -> int:
    if args.candidates:
        if args.group or args.registry or args.sha:
            raise InputError("--candidates reads the build's metadata; drop --group/--registry/--sha")
        pick = promotion_matrix if args.promotions else certify_matrix
        matrix = pick(Path(args.candidates), top_only=args.top_only)
    elif args.top_only or args.promotions:
        raise InputError(f"{'--top-only' if args.top_only else '--promotions'} picks among built candidates: give "
                         "--candidates DIR too")
    else:
        matrix = build_matrix(args.group or "release", args.registry, args.repo, args.sha)
    print_json(matrix, compact=not args.pretty)
    return 0


COMMANDS = (Command("matrix", "Print the GitHub Actions matrix of a group's targets, or of built candidates.",
                    _arguments, _run, description="Always prints JSON (one line for $GITHUB_OUTPUT, or --pretty)."),)
