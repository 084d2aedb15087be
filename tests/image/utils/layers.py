"""Which image a check looks at: the layer folders that apply, the stack an image names, its base image."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from mcore_images.catalogue import images, platforms, tags
from mcore_images.catalogue.components import LAYERS, NONE
from mcore_images.catalogue.images import label
from mcore_images.catalogue.stacks import Stack, load_stacks
from tests.image.utils.docker import ImageInfo, docker, image_exists, inspect_image


def layer_applies(test_layer: str, image_layer: str) -> bool:
    """docker-stacks' pattern: a parent layer's tests run against every child image too."""
    return LAYERS.index(test_layer) <= LAYERS.index(image_layer)


def stack_for(image: ImageInfo, stacks: Mapping[str, Stack] | None = None) -> Stack | None:
    """The env/stacks.json entry named by the image's stack label (None: not one of ours)."""
    stacks = stacks if stacks is not None else load_stacks()
    return stacks.get(image.stack_name or "")


def first_labelled(image: ImageInfo, keys: Iterable[str]) -> str | None:
    """The first component of `keys` that the image labels with a version (not 'none')."""
    return next((k for k in keys if image.label(k) not in (None, NONE)), None)


def _repository(ref: str) -> str | None:
    """The repository of a reference (None for a bare image id)."""
    if ref.startswith("sha256:"):
        return None
    try:
        return images.repository(ref)
    except ValueError:
        return None


def _base_stack(stack: str | None) -> str | None:
    """The stack whose base image this stack's images stand on (its own, or the one of layers_from)."""
    from mcore_images.catalogue.stacks import load_stacks
    from mcore_images.errors import InputError

    try:
        known = load_stacks()
    except InputError:
        return stack
    return known[stack].layer_stack("base") if stack in known else stack


def parent_image(image: ImageInfo, layer: str, stack: str | None) -> ImageInfo | None:
    """The local image of ``layer`` and ``stack`` that this image was built on (its layers begin this image's),
    found by its labels whatever it is tagged: in CI the build's candidate, pushed under
    `candidate-<sha>-<layer>-<stack>` only. None when the local store holds none."""
    listed = docker("image", "ls", "--no-trunc", "--format", "{{.ID}}", "--filter", f"label={label('stack')}={stack}",
                    "--filter", f"label={label('layer')}={layer}", timeout=120)
    for image_id in dict.fromkeys(listed.split()):
        found = inspect_image(image_id)
        if found.layers and found.layers == image.layers[: len(found.layers)]:
            return found
    return None


def find_base_image(image: ImageInfo, explicit: str | None = None) -> ImageInfo | str:
    """The base-layer image this image was built on, or why there is none to compare with."""
    stack = _base_stack(image.stack_name)
    if image.layer == "base":
        return "this is the base image itself"
    if not explicit and (parent := parent_image(image, "base", stack)) is not None:
        return parent
    repos = [r for r in (_repository(image.shown), "mcore-images") if r]
    # An emulated platform's local images are tagged <tag>.<arch> (`mcore-images build --platform`): so is its base.
    arch = platforms.BY_NAME[image.platform].arch if image.platform in platforms.BY_NAME else ""
    suffixes = [f"{tags.PLATFORM_SEPARATOR}{arch}", ""] if image.shown.endswith(f"{tags.PLATFORM_SEPARATOR}{arch}") \
        else [""]
    candidates = [explicit] if explicit else list(dict.fromkeys(f"{repo}:base-{stack}{suffix}" for repo in repos
                                                                for suffix in suffixes))
    notes = []
    for ref in candidates:
        if not image_exists(ref):
            notes.append(f"{ref} is not in the local image store")
            continue
        base = inspect_image(ref)
        if base.layer != "base" or base.stack_name != stack:
            notes.append(f"{ref} is a {base.layer} image of stack {base.stack_name}, not the base of {stack}")
        elif base.layers != image.layers[: len(base.layers)]:
            notes.append(f"{ref} is not this image's parent build (its layers differ); rebuild it to compare")
        else:
            return base
    return "; ".join(notes)
