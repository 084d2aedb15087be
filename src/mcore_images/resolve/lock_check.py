"""The committed locks held to the pins, offline: what `lock --check` and `make validate` report.

For each platform of a stack: every layer's lock is there, pins each component at env/stacks.json's version, has
hashes and was resolved for the stack's Python, platform and constraints; no layer re-pins a lower layer's
package; another machine than x86_64 pins what the x86_64 locks pin (the platforms of one tag hold the same
releases); the declared overrides are named and held, and the left-out distributions named and unpinned; the runtime
lock holds what megatron-core needs undeclared.
"""

from __future__ import annotations

from pathlib import Path

from mcore_images.catalogue import components, platforms
from mcore_images.catalogue.components import LOCK_LAYERS
from mcore_images.catalogue.stacks import Stack
from mcore_images.resolve import declared_overrides
from mcore_images.resolve.layer_requirements import UNDECLARED_RUNTIME, expected_pins
from mcore_images.resolve.lock_files import (
    DEFAULT_MACHINE,
    SIDE_LAYERS,
    base_lock_source,
    default_pins,
    held_by_layer,
    lock_dir,
    lock_path,
    pins,
    resolution_line,
    shown,
)


def check_locks(stack: Stack, root: Path | None = None) -> list[str]:
    """Problems between a stack's pins and its committed locks, for each of its platforms (offline; no
    resolution); a folder of locks for a platform the stack does not list is one too."""
    problems = [p for machine in stack.machines for p in check_machine(stack, root, machine)]
    for machine in platforms.BY_MACHINE:
        folder = lock_dir(stack, root, machine)
        if machine not in stack.machines and any(folder.glob("*.txt")):
            problems.append(f"{shown(folder, root)}/ holds {machine} locks, but stack '{stack.name}' does not list "
                            f"{platforms.BY_MACHINE[machine].name} in its platforms; delete the folder, or add the "
                            "platform")
    return problems


def check_machine(stack: Stack, root: Path | None, machine: str) -> list[str]:
    """check_locks for one machine's locks; another machine than x86_64 must pin what the x86_64 locks pin."""
    problems = []
    expected = expected_pins(stack)
    agreed = default_pins(stack, machine, root) if DEFAULT_MACHINE in stack.machines else {}
    seen: dict[str, str] = {}
    for layer in LOCK_LAYERS:
        path = lock_path(stack, layer, root, machine)
        if stack.layer_stack(layer) != stack.name:  # checked with its own stack; pins agree by validation
            seen.update(pins(path.read_text()) if path.is_file() and layer not in SIDE_LAYERS else {})
            continue
        where = shown(path, root)
        if not path.is_file():
            problems.append(f"{where} is missing; run `mcore-images lock --stack {stack.name}`")
            continue
        found = pins(path.read_text())
        for name, version in expected.get(layer, {}).items():
            if found.get(name) != version:
                problems.append(f"{where}: {name} is {found.get(name, 'missing')}, env/stacks.json pins {version}; "
                                f"run `mcore-images lock --stack {stack.name}`")
        for name, version in found.items():
            if name in seen and seen[name] != version:
                problems.append(f"{path.name}: {name}=={version} conflicts with {seen[name]} from a lower layer")
            seen[name] = version
            if name in agreed and agreed[name] != version:
                problems.append(f"{where}: {name} is {version}, the {DEFAULT_MACHINE} locks pin {agreed[name]} (the "
                                f"platforms of one tag hold the same releases); run `mcore-images lock --stack "
                                f"{stack.name}`")
        text = path.read_text()
        if found and "--hash=sha256:" not in text:
            problems.append(f"{path}: no hashes; run `mcore-images lock --stack {stack.name}`")
        lines = text.splitlines()
        resolved_as = (base_lock_source(stack, text, root, machine) if layer == "base" else None) or stack
        if len(lines) < 2 or not lines[1].startswith(resolution_line(resolved_as, machine)):
            problems.append(f"{where} was not resolved for {resolution_line(stack, machine)[2:]} "
                            f"run `mcore-images lock --stack {stack.name}`")
    problems += _override_problems(stack, root, machine)
    if stack.mcore != components.NONE and not problems:
        absent = [name for name in UNDECLARED_RUNTIME if name not in seen]
        if absent:
            problems.append(f"{shown(lock_dir(stack, root, machine), root)}: {', '.join(absent)} missing from the "
                            f"locks ({UNDECLARED_RUNTIME[absent[0]]}); run `mcore-images lock --stack {stack.name} "
                            "--from-layer runtime`")
    return problems


def _override_problems(stack: Stack, root: Path | None, machine: str) -> list[str]:
    """Where the committed locks disagree with the stack's declared overrides and left-out distributions
    (offline)."""
    paths = {layer: lock_path(stack, layer, root, machine) for layer in LOCK_LAYERS}
    texts = {layer: path.read_text() if path.is_file() else "" for layer, path in paths.items()}
    held = held_by_layer(stack, texts)
    fix = f"run `mcore-images lock --stack {stack.name}`"
    problems = [f"{shown(paths[layer], root)}: {'; '.join(found)}; {fix}"
                for layer, found in declared_overrides.problems(stack, held, texts).items()
                if stack.layer_stack(layer) == stack.name]
    problems += [f"stack '{stack.name}': override {o.pin} pins a distribution no lock of the stack holds, so it is not "
                 f"needed; remove it from the stack's overrides, or {fix}"
                 for o in declared_overrides.unheld(stack, held["app"])]
    problems += [f"stack '{stack.name}': left_out names {o.distribution}, which none of its locks resolves, so leaving "
                 f"it out says nothing; remove it from the stack's left_out, or {fix}"
                 for o in declared_overrides.unresolved(stack, texts)]
    return problems
