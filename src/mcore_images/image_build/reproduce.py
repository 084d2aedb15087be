"""Rebuild an image from a clean clone of the commit it names, and compare the digests.

A certificate vouches for one digest. Whoever holds the source can check that the digest is what that
source builds: the image's labels name its stack, layer and commit (org.opencontainers.image.revision);
this clones that commit from the local checkout into a temporary folder, builds the same layer there with
that commit's own tool under tags of its own (the stack's tags do not move), and compares. The layer's own
stage runs again without the build cache (bake's no-cache-filter): a digest taken from the cache shows only
that the inputs are the same, a stage that runs again that its steps give the same bytes. A step that runs
again writes its files with new times, and this engine's image exporter cannot rewrite them (its option for that
conflicts with unpacking into the image store), so when the digests differ both images' file systems are compared
by content (path, type, mode, owner, size, sha256, link target; times left out, the source time in a .pyc's header
too): the same content is reproduced,
and said so; otherwise the first paths that differ are named, with the first layer that differs and its step.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mcore_images import docker_cli, tools
from mcore_images.catalogue import images, tags
from mcore_images.catalogue.components import LAYERS
from mcore_images.catalogue.stacks import checkout_root
from mcore_images.command import Command, print_json
from mcore_images.errors import InputError
from mcore_images.launch.container import ensure_local
from mcore_images.progress import Progress

REVISION = "org.opencontainers.image.revision"


@dataclass(frozen=True)
class Image:
    """What `docker image inspect` says of one local image that a comparison needs."""

    ref: str
    digest: str  # the image's own digest in the containerd store (its manifest or index)
    labels: dict[str, str]
    layers: list[str]  # diff IDs, bottom first
    steps: list[str]  # the build step of each layer, bottom first

    def label(self, key: str) -> str:
        value = self.labels.get(key, "")
        if not value:
            raise InputError(f"{self.ref} has no {key} label: only images built by `mcore-images build` name "
                             "the stack, layer and commit to rebuild")
        return value


def inspect(ref: str) -> Image:
    """The image's digest, labels, layers and the steps that made them (from its history)."""
    out = docker_cli.run("image", "inspect", ref, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise InputError(f"cannot inspect {ref} ({out.stderr.strip()[-200:]}); pull or build it first")
    data = json.loads(out.stdout)[0]
    history = docker_cli.run("image", "history", "--no-trunc", "--format", "{{json .}}", ref,
                             capture_output=True, text=True, check=False)
    rows = [json.loads(line) for line in history.stdout.splitlines() if line.strip()]
    # history lists the newest step first and includes steps that add no layer (ENV, LABEL): size 0.
    steps = [r.get("CreatedBy", "") for r in reversed(rows) if r.get("Size") not in ("0B", "0")]
    layers = list(data.get("RootFS", {}).get("Layers") or [])
    if len(steps) != len(layers):
        steps = [""] * len(layers)  # an empty RUN step's layer has size 0 too; do not guess which is which
    return Image(ref, data["Id"], dict(data.get("Config", {}).get("Labels") or {}), layers, steps)


def first_difference(original: Image, rebuilt: Image) -> dict[str, Any] | None:
    """The bottom-most layer where the two differ (index, diff IDs, the rebuilt step), or None when all
    layers agree (then only the image config or the index differs: labels, dates or attestations)."""
    for i in range(max(len(original.layers), len(rebuilt.layers))):
        a = original.layers[i] if i < len(original.layers) else None
        b = rebuilt.layers[i] if i < len(rebuilt.layers) else None
        if a != b:
            step = rebuilt.steps[i] if i < len(rebuilt.steps) else ""
            return {"layer": i, "original": a, "rebuilt": b, "step": step[:300]}
    return None


MANIFEST = r'''
import hashlib, json, os, stat, sys
ROOT = sys.argv[1] if len(sys.argv) > 1 else "/"
SKIP = {os.path.join(ROOT, p) for p in ("proc", "sys", "dev", "tmp", "run", "var/tmp")}
SET_BY_DOCKER = {os.path.join(ROOT, p) for p in ("etc/hostname", "etc/hosts", "etc/resolv.conf", ".dockerenv")}
for root, dirs, files in os.walk(ROOT, followlinks=False):
    dirs[:] = sorted(d for d in dirs if os.path.join(root, d) not in SKIP)
    for name in sorted(dirs + files):
        path = os.path.join(root, name)
        if path in SET_BY_DOCKER:
            continue
        st = os.lstat(path)
        entry = ["/" + os.path.relpath(path, ROOT), stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_uid,
                 st.st_gid]
        if stat.S_ISREG(st.st_mode):
            h = hashlib.sha256()
            with open(path, "rb") as handle:
                head = handle.read(16)
                # A timestamp-based .pyc (flags 0) holds its source's mtime in bytes 8-12: a file time, copied.
                if path.endswith(".pyc") and len(head) == 16 and head[4:8] == bytes(4):
                    head = head[:8] + head[12:]
                h.update(head)
                for block in iter(lambda: handle.read(1 << 20), b""):
                    h.update(block)
            entry += [st.st_size, h.hexdigest()]
        elif stat.S_ISLNK(st.st_mode):
            entry.append(os.readlink(path))
        sys.stdout.write(json.dumps(entry) + "\n")
'''
"""Run in an image (argument: the root, "/" by default): one line per file system entry, by content, in walk
order. Times are left out, and so is the source time a timestamp-based .pyc copies into its header: pip writes
each installed file with the install's time and compiles it, so a step that runs again changes every .pyc there by
those four bytes alone (the magic, the flags, the source size and the code are compared)."""


def content(ref: str) -> list[str]:
    """The image's file system as MANIFEST lists it, run in a container with no network."""
    done = docker_cli.run("run", "--rm", "--network", "none", "--entrypoint", "python3", ref, "-c", MANIFEST,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise InputError(f"cannot list the files of {ref} ({(done.stderr.strip().splitlines() or ['no output'])[-1]})")
    return done.stdout.splitlines()


def content_difference(original: Image, rebuilt: Image) -> list[str]:
    """The first paths whose content differs between the two images (empty: the same files, times aside)."""
    a, b = content(original.ref), content(rebuilt.ref)
    if a == b:
        return []
    only_a, only_b = set(a) - set(b), set(b) - set(a)
    paths = sorted({json.loads(line)[0] for line in only_a | only_b})
    return paths[:10] + ([f"… and {len(paths) - 10} more"] if len(paths) > 10 else [])


def clone(root: Path, revision: str, into: Path) -> None:
    """A clean clone of ``revision`` from the checkout at ``root`` (no untracked or ignored file)."""
    known = tools.run(["git", "-C", str(root), "cat-file", "-e", f"{revision}^{{commit}}"],
                      capture_output=True, check=False)
    if known.returncode != 0:
        raise InputError(f"the checkout {root} has no commit {revision}: fetch it (git fetch origin {revision}) "
                         "or run from a checkout that has it")
    tools.run(["git", "clone", "--quiet", "--no-checkout", str(root), str(into)], check=True)
    tools.run(["git", "-C", str(into), "checkout", "--quiet", "--detach", revision], check=True)


def rebuild(checkout: Path, stack: str, layer: str, local_tag: str) -> int:
    """Build ``layer`` of ``stack`` in ``checkout`` with that checkout's own tool, the layer's own stage run again
    without the cache; returns its exit code."""
    env = {k: v for k, v in os.environ.items() if k not in ("GIT_SHA", "SOURCE_DATE_EPOCH", "MCORE_IMAGES_ROOT")}
    env.update(PYTHONPATH=str(checkout / "src"), NO_CACHE_FILTER=layer)  # docker-bake.hcl: the stage runs again
    cmd = [sys.executable, "-m", "mcore_images", "build", "--stack", stack, "--layer", layer,
           "--local-tag", local_tag]
    return subprocess.run(cmd, cwd=checkout, env=env, check=False).returncode


def built_tags(local_tag: str, stack: str, layer: str) -> list[str]:
    """The local tags the rebuild gave, one per layer up to ``layer`` (what this command removes again)."""
    repo = os.environ.get("IMAGE_REPO", tags.DEFAULT_REPO)
    return [tags.image(f"{local_tag}-{name}-{stack}", "", repo) for name in LAYERS[:LAYERS.index(layer) + 1]]


@dataclass(frozen=True)
class Outcome:
    image: str
    revision: str
    stack: str
    layer: str
    digest: str
    rebuilt: str
    reproduced: bool
    first_difference: dict[str, Any] | None
    uncached_stage: str = ""
    """The Dockerfile stage that ran again without the build cache (the layer's own)."""
    seconds: float = 0.0
    same_content: bool = False
    """The digests differ, but every file is the same by content (only times differ)."""
    differing_paths: tuple[str, ...] = ()


def reproduce(ref: str, keep: bool = False) -> Outcome:
    if problem := ensure_local(ref, progress=Progress("reproduce")):
        raise InputError(problem)
    original = inspect(ref)
    revision = original.label(REVISION)
    stack, layer = original.label(images.label("stack")), original.label(images.label("layer"))
    if layer not in LAYERS:
        raise InputError(f"{ref} says layer {layer!r}; reproduce rebuilds base, kernels, runtime or app images")
    local_tag = f"reproduce-{revision[:12]}"
    work = Path(tempfile.mkdtemp(prefix="mcore-reproduce-"))
    made = built_tags(local_tag, stack, layer)
    try:
        clone(checkout_root("reproduce"), revision, work / "src")
        started = time.monotonic()
        code = rebuild(work / "src", stack, layer, local_tag)
        seconds = round(time.monotonic() - started, 1)
        if code != 0:
            raise InputError(f"the rebuild of {layer}-{stack} at {revision[:12]} failed (exit {code}); its log "
                             "is above")
        rebuilt = inspect(made[-1])
        same = rebuilt.digest == original.digest
        paths = [] if same else content_difference(original, rebuilt)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # the folder mkdtemp made for this run, nothing else
    if not keep:
        present = [t for t in made if docker_cli.run("image", "inspect", t, capture_output=True,
                                                     check=False).returncode == 0]
        if present:
            docker_cli.run("image", "rm", *present, capture_output=True, check=False)
    return Outcome(ref, revision, stack, layer, original.digest, rebuilt.digest, same or not paths,
                   None if same else first_difference(original, rebuilt), layer, seconds,
                   same_content=not same and not paths, differing_paths=tuple(paths))


def describe(o: Outcome) -> str:
    if o.same_content:
        return (f"REPRODUCED (by content): {o.layer}-{o.stack} rebuilt from a clean clone of {o.revision[:12]}, its "
                f"{o.uncached_stage} stage run again without the cache ({o.seconds:.0f} s), holds the same files as "
                f"{o.image} (path, mode, owner, size, sha256); its digest {o.rebuilt} differs from {o.digest} by the "
                "file times the rerun wrote (and the source times its .pyc files hold)")
    if o.reproduced:
        return (f"REPRODUCED: {o.layer}-{o.stack} rebuilt from a clean clone of {o.revision[:12]}, its "
                f"{o.uncached_stage} stage run again without the cache ({o.seconds:.0f} s), is {o.rebuilt}, the "
                f"digest of {o.image}")
    lines = [f"DIFFERS: {o.image} is {o.digest}; rebuilt from a clean clone of {o.revision[:12]}: {o.rebuilt}"]
    d = o.first_difference
    if d is None:
        lines.append("  every layer is the same: the image config or the index differs (labels, dates, attestations)")
    else:
        lines.append(f"  first differing layer: #{d['layer']} ({d['original']} vs {d['rebuilt']})")
        if d["step"]:
            lines.append(f"  made by: {d['step']}")
    if o.differing_paths:
        lines.append(f"  files that differ by content: {', '.join(o.differing_paths)}")
    return "\n".join(lines)


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("image", help="a local or pullable image built by `mcore-images build` (e.g. "
                   "127.0.0.1:5000/mcore-images:runtime-debian)")
    p.add_argument("--keep", action="store_true", help="keep the rebuilt images' reproduce-<commit>-* tags")


def _run(args: argparse.Namespace) -> int:
    outcome = reproduce(args.image, keep=args.keep)
    if args.json:
        print_json(asdict(outcome))
    else:
        print(describe(outcome))
    return 0 if outcome.reproduced else 1


COMMANDS = (Command("reproduce", "Rebuild an image from a clean clone of its commit and compare the digests.",
                    _arguments, _run, prints_data=True),)
