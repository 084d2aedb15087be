"""Build-time pin overrides (`mcore-images build --stack S --set mcore=0.16.0`) without editing env/.

An override writes a workspace under build/override/<stack>/: env/stacks.json with the changed stack (the build
generates its bake file from it) and that stack's locks (for each of its platforms, laid out as env/locks
is), copied unchanged for the layers below the first one the change touches and re-resolved from there up. Bake
then reads that file instead of docker-bake.json and the `locks` context points at the workspace, so the layers
below stay cached.
"""

from __future__ import annotations

from pathlib import Path

from mcore_images.catalogue import components
from mcore_images.catalogue.stacks import (
    SETTING_LOCK_LAYER,
    Stack,
    parse_document,
    pin_problem,
    raw_entries,
    repo_root,
    stacks_file,
    write_entries,
)
from mcore_images.errors import InputError
from mcore_images.resolve import lock_files, lock_update


def first_lock_layer(key: str) -> str | None:
    """The lowest lock layer a change of this stack field can change (None: no lock)."""
    if key in components.BY_KEY:
        return components.BY_KEY[key].lock_layer
    return SETTING_LOCK_LAYER[key]


def overridable() -> tuple[str, ...]:
    """Every stack field `--set` may change: each component's pin and the settings that shape a build."""
    return (*components.KEYS, *SETTING_LOCK_LAYER)


def parse(assignments: list[str]) -> dict[str, str]:
    """KEY=VALUE pairs, each KEY an overridable stack field."""
    out = {}
    for item in assignments:
        key, sep, value = item.partition("=")
        if not sep or not value:
            raise InputError(f"--set '{item}' is not KEY=VALUE; e.g. --set mcore=0.16.0")
        if key not in overridable():
            raise InputError(f"--set {key}: not an overridable pin; use one of {', '.join(overridable())}")
        if key in components.BY_KEY and (problem := pin_problem(key, value)):
            raise InputError(f"--set {problem}")
        out[key] = value
    return out


def first_changed_layer(changes: dict[str, str]) -> str | None:
    layers = [layer for key in changes if (layer := first_lock_layer(key))]
    return min(layers, key=components.LOCK_LAYERS.index) if layers else None


def apply(stack: Stack, changes: dict[str, str], root: Path | None = None) -> Stack:
    """The stack with the changes, checked as env/stacks.json itself is (schema, pins)."""
    path = stacks_file(root)
    entries = raw_entries(path)
    for entry in entries:
        if entry["name"] == stack.name:
            entry.update(changes)
    try:
        return parse_document({"stacks": entries}, path)[stack.name]
    except InputError as exc:
        raise InputError(f"with --set {' '.join(f'{k}={v}' for k, v in changes.items())}: {exc}") from None


def workspace(stacks: dict[str, Stack], changed: Stack, changes: dict[str, str],
              root: Path | None = None) -> tuple[Path, Path]:
    """Write the override's stacks file and locks; returns (stacks file, locks folder)."""
    root = root or repo_root()
    base = root / "build" / "override" / changed.name
    locks_root = base / "locks"
    entries = raw_entries(stacks_file(root))
    for entry in entries:
        if entry["name"] == changed.name:
            entry.update(changes)
    base.mkdir(parents=True, exist_ok=True)
    stacks_json = base / "stacks.json"
    write_entries(entries, stacks_json)
    first = first_changed_layer(changes)
    # x86_64 first: the others agree with it
    for machine in sorted(changed.machines, key=lambda m: m != lock_files.DEFAULT_MACHINE):
        committed = lock_files.lock_dir(stacks[changed.name], root, machine)
        tree = locks_root if machine == lock_files.DEFAULT_MACHINE else locks_root / machine
        target = tree / changed.name
        if changed.layers_from:  # the layers it takes from another stack are mounted from that stack's folder
            shared = tree / changed.layers_from
            shared.mkdir(parents=True, exist_ok=True)
            for path in lock_files.lock_dir(stacks[changed.layers_from], root, machine).glob("*.txt"):
                (shared / path.name).write_text(path.read_text())
        if first is None:
            target.mkdir(parents=True, exist_ok=True)
            for path in committed.glob("*.txt"):
                (target / path.name).write_text(path.read_text())
        else:
            lock_update.write_locks(changed, keep_below=first, keep_from=committed, folder=target, machine=machine,
                                    agree_with=locks_root)
    return stacks_json, locks_root
