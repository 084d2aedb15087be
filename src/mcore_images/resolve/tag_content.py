"""One content tag, one content: two stacks that give a layer the same tag must build the same layer.

A content tag (``base-torch2.11.0-cu13.0-py3.12-cuda13.0.2``) names what an image holds, and every stack that
builds that layer pushes to the same repository under it. Stacks locked on different days resolve different
transitive versions for the same pins, so without this check the tag would point at whichever build was
pushed last. Checked with the rules, before any build (``mcore-images plan`` and ``build``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from mcore_images.catalogue import tags
from mcore_images.catalogue.components import LAYERS
from mcore_images.catalogue.stacks import Stack
from mcore_images.resolve import lock_files
from mcore_images.resolve.rules import Violation

RULE = "tag-content"
DESCRIPTION = ("stacks that give a layer one content tag build it from the same content: base image, platforms, GPU "
               "architectures and every locked version (`mcore-images lock --stack S --base-from T` gives S the base "
               "lock of T)")

_LOCKS_OF = {"base": ("base",), "kernels": ("builder", "kernels"), "runtime": ("runtime",), "app": ("app",)}
"""The lock files each image layer installs (the builder's toolchain makes the kernels layer's wheels)."""


def content(stack: Stack, layer: str) -> dict[str, str] | None:
    """What the layer and those under it are made of: the base image, the platforms, the GPU architectures compiled
    for, and every pinned distribution of their locks on each platform (versions only: a lock's header names its own
    stack). None while a lock is missing: an unlocked stack is the lock check's to report (`validate`), not a
    collision."""
    below = LAYERS[: LAYERS.index(layer) + 1]
    out = {"base image": f"{stack.base_image}@{stack.base_digest or 'unpinned'}",
           "platforms": ", ".join(stack.platforms)}
    if "kernels" in below:
        out["cuda_archs"] = stack.cuda_archs
    for machine in stack.machines:  # a tag names an index: every platform's content is the tag's
        where = "" if machine == lock_files.DEFAULT_MACHINE else f", {machine}"
        for lock_layer in (name for part in below for name in _LOCKS_OF[part]):
            path = lock_files.lock_path(stack, lock_layer, machine=machine)
            if not path.is_file():
                return None
            out.update({f"{name} ({lock_layer}{where})": version
                        for name, version in lock_files.pins(path.read_text()).items()})
    return out


def _differences(mine: dict[str, str], theirs: dict[str, str], limit: int = 3) -> str:
    keys = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
    shown = [f"{k} {mine.get(k, 'absent')} vs {theirs.get(k, 'absent')}" for k in keys[:limit]]
    return ", ".join(shown) + (f" and {len(keys) - limit} more" if len(keys) > limit else "")


class TagIndex:
    """Which stacks give each layer's content tag, grouped by what they build under it, made once for all the
    stacks a plan judges: each stack's layer content is read once, and a stack is compared with one stack of
    each other content (not with every stack), so judging them all stays linear in the stacks."""

    def __init__(self, every: Mapping[str, Stack]) -> None:
        self._by_tag: dict[tuple[str, str], list[Stack]] = defaultdict(list)
        for other in every.values():
            for layer in other.built_layers:
                self._by_tag[(layer, tags.layer_tag(layer, other))].append(other)
        self._content: dict[tuple[str, str], dict[str, str] | None] = {}
        self._groups: dict[tuple[str, str], dict[frozenset, Stack]] = {}

    def content(self, stack: Stack, layer: str) -> dict[str, str] | None:
        key = (stack.name, layer)
        if key not in self._content:
            self._content[key] = content(stack, layer)
        return self._content[key]

    def others(self, stack: Stack, layer: str, tag: str) -> list[Stack]:
        """One stack for each content, other than ``stack``'s, that the stacks sharing ``tag`` build (unlocked
        stacks are left out: the lock check reports them)."""
        if (layer, tag) not in self._groups:
            groups: dict[frozenset, Stack] = {}
            for other in self._by_tag[(layer, tag)]:
                found = self.content(other, layer)
                if found is not None:
                    groups.setdefault(frozenset(found.items()), other)
            self._groups[(layer, tag)] = groups
        groups = self._groups[(layer, tag)]
        if len(groups) < 2:
            return []
        mine = self.content(stack, layer)
        if mine is None:
            return []
        key = frozenset(mine.items())
        return [other for found, other in groups.items() if found != key and other.name != stack.name]


def violations(stack: Stack, every: Mapping[str, Stack], index: TagIndex | None = None) -> list[Violation]:
    """A violation for each layer of ``stack`` whose content tag another stack builds from other content
    (``index``: made once for ``every`` by the caller that judges many stacks)."""
    index = index if index is not None else TagIndex(every)
    out = []
    for layer in stack.built_layers:
        tag = tags.layer_tag(layer, stack)
        for other in index.others(stack, layer, tag):
            mine, theirs = index.content(stack, layer), index.content(other, layer)
            assert mine is not None and theirs is not None
            fix = (f"lock {stack.name} against {other.name}'s base (`mcore-images lock --stack {stack.name} "
                   f"--base-from {other.name}`)" if layer == "base" else
                   f"take the layers from {other.name} (\"layers_from\": \"{other.name}\" in env/stacks.json) "
                   "or make the pins differ where the tag shows them")
            out.append(Violation(RULE, stack.name, f"its {layer} tag {tag} is also stack '{other.name}''s, "
                                 f"from other content ({_differences(mine, theirs)})", fix))
    return out
