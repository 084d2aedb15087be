"""Where the locks live and what their headers say (env/locks/<stack>/<layer>.txt).

A stack is locked for each platform it lists: x86_64 at env/locks/<stack>/, aarch64 (linux/arm64) at
env/locks/aarch64/<stack>/, a tree that mirrors the first path for path. BuildKit picks the tree of the platform
it builds (bake gives the arm64 build its own `locks` context, docker-bake.hcl), so the Dockerfile mounts the same
`<stack>/<layer>.txt` on every platform and an amd64 step's cache key never sees the arm64 locks.

Each lock opens with a header that records what it was resolved from (the stack's Python, platform, constraints
and the layer's top-level requirements): a lock whose header differs from today's inputs is stale.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from mcore_images.catalogue import platforms, tags
from mcore_images.catalogue.components import LOCK_LAYERS
from mcore_images.catalogue.stacks import Stack, load_stacks, repo_root
from mcore_images.resolve.layer_requirements import platform

# Layers that branch off the chain: built FROM base, but nothing above them inherits their packages.
SIDE_LAYERS = ("builder",)
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;\\]+)")
"""A lock's ``name[extras]==version`` line (the start of a package's block)."""


DEFAULT_MACHINE = platforms.DEFAULT.machine
"""The machine whose locks sit at env/locks/<stack>/ (every stack's first platform before platforms were a
setting); another machine's are under env/locks/<machine>/."""


def pins(text: str) -> dict[str, str]:
    """name -> version for every `name==version` line of a lock."""
    out = {}
    for line in text.splitlines():
        match = PIN.match(line.strip())
        if match:
            out[match.group(1).lower().replace("_", "-")] = match.group(3)
    return out


EXCLUDED = "# The following packages were excluded from the output:"
"""How uv opens its list of the packages it resolved but did not emit (``--no-emit-package``)."""


def excluded(text: str) -> dict[str, str]:
    """name -> '' for every package uv's lock text lists as resolved but left out of the output (the layers below,
    and the stack's left-out distributions)."""
    lines = text.splitlines()
    start = lines.index(EXCLUDED) + 1 if EXCLUDED in lines else len(lines)
    out = {}
    for line in lines[start:]:
        if not line.startswith("# "):
            break
        out[line[2:].strip().lower().replace("_", "-")] = ""
    return out


def resolution_line(stack: Stack, machine: str = DEFAULT_MACHINE) -> str:
    """What every layer of the stack is resolved for: Python, platform and the stack's constraints."""
    constraints = f", constraints: {'; '.join(stack.constraints)}" if stack.constraints else ""
    return f"# Python {stack.python}, {platform(stack, machine)}{constraints}."


def header(stack: Stack, layer: str, requirements: list[str], machine: str = DEFAULT_MACHINE) -> str:
    top = ", ".join(requirements) or "nothing (this layer installs no package from PyPI)"
    return (f"# Lock of layer '{layer}' of stack '{stack.name}': derived from env/stacks.json by "
            f"`mcore-images lock --stack {stack.name}`; do not edit.\n"
            f"{resolution_line(stack, machine)} Top level: {top}\n")


_HEADER_STACK = re.compile(r"^# Lock of layer 'base' of stack '([^']+)'")


def base_lock_source(stack: Stack, text: str, root: Path | None = None,
                     machine: str = DEFAULT_MACHINE) -> Stack | None:
    """The stack whose base lock ``text`` is, byte for byte, when another stack of the same base tag
    (`lock --base-from`); None for a stack's own lock. A copy is judged as its source's lock."""

    match = _HEADER_STACK.match(text)
    if not match or match.group(1) == stack.name:
        return None
    source = load_stacks((root or repo_root()) / "env" / "stacks.json").get(match.group(1))
    if source is None or tags.layer_tag("base", source) != tags.layer_tag("base", stack):
        return None
    original = lock_dir(source, root, machine) / "base.txt"
    return source if original.is_file() and original.read_text() == text else None


def held_by_layer(stack: Stack, texts: dict[str, str],
                  read: Callable[[str], dict[str, str]] = pins) -> dict[str, dict[str, str]]:
    """Each lock layer -> {distribution: version} it and the layers below it install (a side layer: with the base
    alone), from the lock texts given (a layer of ``layers_from`` read where it is when not given). ``read`` (a lock
    text -> its entries) picks what is gathered: the pins, or uv's list of what it resolved and left out."""
    chain: dict[str, str] = {}
    out = {}
    for layer in LOCK_LAYERS:
        text = texts.get(layer) or ""
        if not text and stack.layer_stack(layer) != stack.name and lock_path(stack, layer).is_file():
            text = lock_path(stack, layer).read_text()
        mine = read(text)
        if layer in SIDE_LAYERS:
            out[layer] = {**read(texts.get("base") or ""), **mine}
            continue
        chain.update(mine)
        out[layer] = dict(chain)
    return out


def locks_root(root: Path | None = None, machine: str = DEFAULT_MACHINE) -> Path:
    """The tree of one machine's locks: env/locks for x86_64, env/locks/<machine> for another (bake's `locks`
    context of that platform)."""
    top = (root or repo_root()) / "env" / "locks"
    return top if machine == DEFAULT_MACHINE else top / machine


def lock_dir(stack: Stack, root: Path | None = None, machine: str = DEFAULT_MACHINE) -> Path:
    return locks_root(root, machine) / stack.name


def lock_path(stack: Stack, layer: str, root: Path | None = None, machine: str = DEFAULT_MACHINE) -> Path:
    """The lock file of one layer: a stack with ``layers_from`` reads its lower layers' from that stack."""
    return locks_root(root, machine) / stack.layer_stack(layer) / f"{layer}.txt"


def shown(path: Path, root: Path | None) -> str:
    """A lock's path as messages name it: from the checkout's top (env/locks/…)."""
    return str(path.relative_to(root or repo_root()))


def default_pins(stack: Stack, machine: str, root: Path | None = None, tree: Path | None = None) -> dict[str, str]:
    """For another machine than x86_64: every version the stack's x86_64 locks pin (its own layers, from ``tree``
    when given, an override's; and those it shares), which that machine's resolution is held to wherever a package
    exists for both; {} for x86_64."""
    if machine == DEFAULT_MACHINE:
        return {}
    found: dict[str, str] = {}
    for layer in LOCK_LAYERS:
        path = lock_path(stack, layer, root)
        if tree is not None and stack.layer_stack(layer) == stack.name:
            path = tree / stack.name / f"{layer}.txt"
        if path.is_file():
            found.update(pins(path.read_text()))
    return found


def own_layers(stack: Stack) -> tuple[str, ...]:
    """The lock layers a stack resolves and commits itself."""
    return tuple(layer for layer in LOCK_LAYERS if stack.layer_stack(layer) == stack.name)
