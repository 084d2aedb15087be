"""One content tag, one content: two stacks that give a layer the same tag must build the same layer.

A content tag (``base-torch2.11.0-cu13.0-py3.12-cuda13.0.2``) names what an image holds, and every stack that
builds that layer pushes to the same repository under it. Stacks locked on different days resolve different
transitive versions for the same pins, so without this check the tag would point at whichever build was
pushed last. Checked with the rules, before any build (``mcore-images plan`` and ``build``).
"""

from __future__ import annotations

from mcore_images import lock, tags
from mcore_images.components import LAYERS
from mcore_images.rules import Violation
from mcore_images.stacks import Stack

RULE = "tag-content"

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
        where = "" if machine == lock.DEFAULT_MACHINE else f", {machine}"
        for lock_layer in (name for part in below for name in _LOCKS_OF[part]):
            path = lock.lock_path(stack, lock_layer, machine=machine)
            if not path.is_file():
                return None
            out.update({f"{name} ({lock_layer}{where})": version
                        for name, version in lock.pins(path.read_text()).items()})
    return out


def _differences(mine: dict[str, str], theirs: dict[str, str], limit: int = 3) -> str:
    keys = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
    shown = [f"{k} {mine.get(k, 'absent')} vs {theirs.get(k, 'absent')}" for k in keys[:limit]]
    return ", ".join(shown) + (f" and {len(keys) - limit} more" if len(keys) > limit else "")


def violations(stack: Stack, every: dict[str, Stack]) -> list[Violation]:
    """A violation for each layer of ``stack`` whose content tag another stack builds from other content."""
    out = []
    for layer in stack.built_layers:
        tag = tags.layer_tag(layer, stack)
        sharing = [o for o in every.values()
                   if o.name != stack.name and layer in o.built_layers and tags.layer_tag(layer, o) == tag]
        mine = content(stack, layer) if sharing else None  # read once per layer, and only when a tag is shared
        for other in sharing:
            theirs = content(other, layer)
            if mine is not None and theirs is not None and mine != theirs:
                fix = (f"lock {stack.name} against {other.name}'s base (`mcore-images lock --stack {stack.name} "
                       f"--base-from {other.name}`)" if layer == "base" else
                       f"take the layers from {other.name} (\"layers_from\": \"{other.name}\" in env/stacks.json) "
                       "or make the pins differ where the tag shows them")
                out.append(Violation(RULE, stack.name, f"its {layer} tag {tag} is also stack '{other.name}''s, "
                                     f"from other content ({_differences(mine, theirs)})", fix))
    return out
