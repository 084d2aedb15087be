"""Build-time pin overrides (`mcore-images build --stack S --set mcore=0.16.0`) without editing env/.

An override writes a workspace under build/override/<stack>/: a bake variable file with the changed
stack and that stack's locks, copied unchanged for the layers below the first one the change
touches and re-resolved from there up. Bake then reads that file instead of docker-bake.json and
the `locks` context points at the workspace, so the layers below stay cached.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from mcore_images import lock
from mcore_images.errors import InputError
from mcore_images.stacks import Stack, repo_root

# The first lock layer each field can change (fields that change no lock map to None).
FIRST_LOCK_LAYER: dict[str, str | None] = {
    "base_image": "base", "base_digest": "base", "debian_suite": "base", "python": "base", "cuda": "base",
    "torch": "base", "torch_source": "base", "te_source": "builder", "apex": "builder", "te": "kernels",
    "mcore": "runtime", "mbridge": "runtime", "megatron_bridge": "runtime", "verl": "app",
    "cuda_archs": None, "description": None, "notes": None,
}


def parse(assignments: list[str]) -> dict[str, str]:
    """KEY=VALUE pairs, each KEY an overridable stack field."""
    out = {}
    for item in assignments:
        key, sep, value = item.partition("=")
        if not sep or not value:
            raise InputError(f"--set '{item}' is not KEY=VALUE; e.g. --set mcore=0.16.0")
        if key not in FIRST_LOCK_LAYER:
            raise InputError(f"--set {key}: not an overridable pin; use one of {', '.join(FIRST_LOCK_LAYER)}")
        out[key] = value
    return out


def first_changed_layer(changes: dict[str, str]) -> str | None:
    layers = [FIRST_LOCK_LAYER[key] for key in changes if FIRST_LOCK_LAYER[key]]
    return min(layers, key=lock.LOCK_LAYERS.index) if layers else None


def apply(stack: Stack, changes: dict[str, str]) -> Stack:
    return dataclasses.replace(stack, **changes)


def workspace(stacks: dict[str, Stack], changed: Stack, changes: dict[str, str],
              root: Path | None = None) -> tuple[Path, Path]:
    """Write the override's bake file and locks; returns (bake file, locks folder)."""
    root = root or repo_root()
    base = root / "build" / "override" / changed.name
    locks_root = base / "locks"
    entries = json.loads((root / "env" / "stacks.json").read_text())
    for entry in entries["variable"]["STACKS"]["default"]:
        if entry["name"] == changed.name:
            entry.update(changes)
    base.mkdir(parents=True, exist_ok=True)
    bake_file = base / "stacks.json"
    bake_file.write_text(json.dumps(entries, indent=2) + "\n")
    first = first_changed_layer(changes)
    committed = lock.lock_dir(stacks[changed.name], root)
    target = locks_root / changed.name
    if first is None:
        target.mkdir(parents=True, exist_ok=True)
        for path in committed.glob("*.txt"):
            (target / path.name).write_text(path.read_text())
    else:
        lock.write_locks(changed, keep_below=first, keep_from=committed, folder=target)
    return bake_file, locks_root
