"""Locks re-resolved from the pins, for every platform of a stack: `lock`, `make update` and `build --set`.

All layers are resolved together once, then that one solution is split into per-layer locks, each holding what its
inputs need beyond the layers below. Only the stale layers and those above them are resolved (a layer's header
records its inputs); the layers below stay byte for byte, so their images stay cached. x86_64 is resolved first;
another machine's locks follow it at the x86_64 locks' versions, wherever a package exists for both, so the
platforms of one tag hold the same releases.
"""

from __future__ import annotations

from pathlib import Path

from mcore_images.catalogue import platforms
from mcore_images.catalogue.components import LOCK_LAYERS
from mcore_images.catalogue.stacks import Stack
from mcore_images.errors import InputError
from mcore_images.resolve import declared_overrides, engine_records, engines, rules, sdist_builds, uv_compile
from mcore_images.resolve.layer_requirements import resolved_inputs
from mcore_images.resolve.lock_check import check_machine
from mcore_images.resolve.lock_files import (
    DEFAULT_MACHINE,
    SIDE_LAYERS,
    base_lock_source,
    default_pins,
    header,
    held_by_layer,
    lock_dir,
    lock_path,
    own_layers,
    pins,
)


def stale_layers(stack: Stack, inputs: dict[str, list[str]], folder: Path,
                 machine: str = DEFAULT_MACHINE) -> list[str]:
    """The lock layers whose committed file was not resolved from these inputs (a layer's header records
    its Python, platform, constraints and top-level requirements); a base copied from a stack of the same base
    tag is current while it equals that stack's."""
    stale = []
    for layer in own_layers(stack):
        path = folder / f"{layer}.txt"
        text = path.read_text() if path.is_file() else ""
        if layer == "base" and text and base_lock_source(stack, text, machine=machine) is not None:
            continue
        if not text.startswith(header(stack, layer, inputs[layer], machine)):
            stale.append(layer)
    texts = {layer: (folder / f"{layer}.txt").read_text() if (folder / f"{layer}.txt").is_file() else ""
             for layer in LOCK_LAYERS}
    held = held_by_layer(stack, texts)
    stale += [layer for layer in declared_overrides.problems(stack, held, texts)
              if layer in own_layers(stack) and layer not in stale]
    unneeded = declared_overrides.unheld(stack, held.get("app", {})) or declared_overrides.unresolved(stack, texts)
    if unneeded and own_layers(stack)[-1] not in stale:
        stale.append(own_layers(stack)[-1])  # `lock` then proves it needed, or refuses it
    return sorted(stale, key=LOCK_LAYERS.index)


def write_side_lock(stack: Stack, layer: str, inputs: dict[str, list[str]], folder: Path,
                    machine: str = DEFAULT_MACHINE) -> Path:
    """Re-resolve a side layer (the builder) alone, at the versions the committed chain already pins:
    its toolchain never reaches the published layers, so they stay byte for byte."""
    chain = {layer_: pins((folder / f"{layer_}.txt").read_text()) for layer_ in LOCK_LAYERS
             if layer_ not in SIDE_LAYERS}
    below = chain["base"]
    agreed = {**default_pins(stack, machine),
              **{name: version for layer_pins in chain.values() for name, version in layer_pins.items()}}
    requirements = inputs["base"] + inputs[layer]
    text = (uv_compile.compile_layer(stack, requirements, below, constraints=agreed, machine=machine)
            if inputs[layer] else "")
    sdist_builds.refuse_network_builds(stack, machine, pins(text))
    left_out = declared_overrides.left_out_by_layer(stack, {"base": (folder / "base.txt").read_text(), layer: text})
    path = folder / f"{layer}.txt"
    path.write_text(header(stack, layer, inputs[layer], machine)
                    + declared_overrides.header_lines(stack, {**below, **pins(text)}, left_out[layer]) + text)
    return path


def write_locks(stack: Stack, root: Path | None = None, keep_below: str | None = None,
                keep_from: Path | None = None, folder: Path | None = None,
                machine: str = DEFAULT_MACHINE, agree_with: Path | None = None) -> list[Path]:
    """Resolve all layers together once, then split that one solution into per-layer locks.

    Resolving layer by layer against the pins below can paint itself into a corner (a lower layer
    picks a numpy that an upper layer's package refuses); one joint solution cannot. Each layer's
    lock holds what its inputs need beyond the layers below, at the joint solution's versions.

    With `keep_below` (a layer), the locks of the layers under it are copied unchanged from
    `keep_from` and only that layer and the ones above are resolved, against their pins: a
    megatron-core bump then changes the runtime lock alone, and the layers below stay cached.
    Every layer gets a file (a header alone where it installs nothing). Another machine than x86_64 is resolved
    at the versions the x86_64 locks pin (``default_pins``; those of the tree ``agree_with``, an override's, when
    given). Nothing is written where a left-out distribution is resolved by no layer, or where a locked release has
    no wheel for the stack and its sdist's build reaches for the network (sdist_builds.py).
    """
    inputs = resolved_inputs(stack)
    if machine == DEFAULT_MACHINE:  # another machine's locks follow x86_64's, where the overrides were proved
        declared_overrides.prove(stack, inputs, machine)
    folder = folder or lock_dir(stack, root, machine)
    agreed = default_pins(stack, machine, root, agree_with)
    shared = len(LOCK_LAYERS) - len(own_layers(stack))  # layers taken from layers_from come first
    first = max(LOCK_LAYERS.index(keep_below) if keep_below else 0, shared)
    texts: dict[str, str] = {}  # every layer's lock text, uv's answer without the header
    below: dict[str, str] = {}
    for layer in LOCK_LAYERS[:first]:
        if stack.layer_stack(layer) != stack.name:
            text = lock_path(stack, layer, root, machine).read_text()  # the other stack's, read where it is
        else:
            text = (Path(keep_from or lock_dir(stack, machine=machine)) / f"{layer}.txt").read_text()
        texts[layer] = text
        if layer not in SIDE_LAYERS:
            below.update(pins(text))
    upper = [req for layer in LOCK_LAYERS[first:] for req in inputs[layer]]
    # An override (keep_from) re-resolves the upper layers preferring their committed pins.
    kept = Path(keep_from) if keep_from and keep_below else None
    committed = {layer: (kept / f"{layer}.txt").read_text() if kept and (kept / f"{layer}.txt").is_file() else ""
                 for layer in LOCK_LAYERS[first:]}
    joint = pins(uv_compile.compile_layer(stack, upper, below, constraints=agreed, machine=machine,
                                          preferred="".join(committed.values()))) if upper else {}
    chain = [req for layer in LOCK_LAYERS[:first] if layer not in SIDE_LAYERS for req in inputs[layer]]
    for layer in LOCK_LAYERS[first:]:
        requirements = chain + inputs[layer]
        texts[layer] = (uv_compile.compile_layer(stack, requirements, below, constraints={**agreed, **joint},
                                                 machine=machine, preferred=committed[layer])
                        if inputs[layer] else "")
        if layer not in SIDE_LAYERS:
            # The builder is a side branch (its toolchain never reaches kernels or runtime).
            chain = requirements
            below.update(pins(texts[layer]))
    _refuse(stack, machine, {layer: texts[layer] for layer in own_layers(stack)})
    held = held_by_layer(stack, texts)
    left_out = declared_overrides.left_out_by_layer(stack, texts)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for layer in own_layers(stack):
        path = folder / f"{layer}.txt"
        if LOCK_LAYERS.index(layer) < first:
            path.write_text(texts[layer])  # kept byte for byte
            continue
        path.write_text(header(stack, layer, inputs[layer], machine)
                        + declared_overrides.header_lines(stack, held[layer], left_out[layer]) + texts[layer])
        written.append(path)
    return written


def _refuse(stack: Stack, machine: str, texts: dict[str, str]) -> None:
    """Before any lock is written: InputError where a left-out distribution is resolved by no layer (nothing requires
    it) or a locked release would be built from an sdist whose build reaches for the network."""
    unneeded = declared_overrides.unresolved(stack, texts)
    if unneeded:
        raise InputError(f"stack '{stack.name}': left_out names {unneeded[0].distribution}, which none of its locks "
                         "resolves (no package of the stack requires it); remove it from the stack's left_out in "
                         "env/stacks.json")
    sdist_builds.refuse_network_builds(stack, machine, {n: v for text in texts.values() for n, v in pins(text).items()})



def update_locks(stack: Stack, full: bool = False, from_layer: str | None = None) -> tuple[str | None, list[Path]]:
    """Re-resolve what the pins changed, for every platform of the stack: from the lowest stale layer up (``full``:
    every layer; ``from_layer``: from that one), keeping the layers below it byte for byte. Another machine than
    x86_64 re-resolves from where x86_64 did too (it is held to x86_64's versions), and only once the rules allow
    the platform. Returns (first layer resolved or None when all were current, files written)."""
    if engines.unrecorded(stack):  # what the rules engine-torch and platform-torch read, from the index like the locks
        engine_records.record(stack)
    inputs = resolved_inputs(stack)
    firsts: list[str] = []
    written: list[Path] = []
    for machine in sorted(stack.machines, key=lambda m: m != DEFAULT_MACHINE):  # x86_64 first: the others follow it
        if machine != DEFAULT_MACHINE:
            refused = platform_refusal(stack, machine)
            if refused:
                raise InputError(refused)
        follow = firsts[0] if firsts and machine != DEFAULT_MACHINE else None
        first, paths = _update_machine(stack, inputs, machine, full, from_layer or follow)
        firsts += [first] if first else []
        written += paths
    return (min(firsts, key=LOCK_LAYERS.index) if firsts else None), written


def _shared_base(stack: Stack, machine: str) -> Path | None:
    """For another machine than x86_64: the base lock of the stack whose x86_64 base lock this stack's is a copy of
    (one content tag, one content), None when its x86_64 base is its own."""
    if machine == DEFAULT_MACHINE:
        return None
    own = lock_dir(stack) / "base.txt"
    source = base_lock_source(stack, own.read_text()) if own.is_file() else None
    if source is None or machine not in source.machines:
        return None
    path = lock_dir(source, machine=machine) / "base.txt"
    return path if path.is_file() else None


def platform_refusal(stack: Stack, machine: str) -> str | None:
    """Why the rules refuse the platform of ``machine`` for this stack (one line), None when they allow it."""

    name = platforms.BY_MACHINE[machine].name
    broken = [v for v in rules.check(stack) if v.rule.startswith("platform-") and name in v.message]
    return f"no {machine} locks resolved: {broken[0]}" if broken else None


def _update_machine(stack: Stack, inputs: dict[str, list[str]], machine: str, full: bool,
                    from_layer: str | None) -> tuple[str | None, list[Path]]:
    folder = lock_dir(stack, machine=machine)
    shared = _shared_base(stack, machine)
    if shared is not None:  # the x86_64 base is another stack's (`lock --base-from`): so is this machine's
        mine = folder / "base.txt"
        if not mine.is_file() or mine.read_text() != shared.read_text():
            return "builder", write_locks(stack, keep_below="builder", keep_from=shared.parent, machine=machine)
    stale = stale_layers(stack, inputs, folder, machine)
    if not (full or from_layer) and stale and set(stale) <= set(SIDE_LAYERS):
        return stale[0], [write_side_lock(stack, layer, inputs, folder, machine) for layer in stale]
    first = "base" if full else (from_layer or (stale[0] if stale else None))
    if first is None and not check_machine(stack, None, machine):
        return None, []
    first = first or "base"
    keep_below = None if first == "base" else first
    return first, write_locks(stack, keep_below=keep_below, keep_from=folder if keep_below else None, machine=machine)

