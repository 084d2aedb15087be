"""The tag scheme: a tag tells what the image holds. Mirrors the functions in docker-bake.hcl
(tests/unit/test_bake.py compares both on every stack)."""

from __future__ import annotations

import re

from mcore_images.stacks import Stack

DEFAULT_REPO = "mcore-images"
_SHA = re.compile(r"^[0-9a-f]{40}$")


def origin(stack: Stack) -> str:
    """Where the base comes from: ngc26.06 / cuda13.0.2 / debian-trixie."""
    if stack.flavor == "ngc":
        return "ngc" + re.search(r":([0-9]+[.][0-9]+)", stack.base_image).group(1)
    if stack.flavor == "cuda":
        return "cuda" + re.search(r":([0-9]+[.][0-9]+[.][0-9]+)", stack.base_image).group(1)
    return f"debian-{stack.debian_suite}"


def platform(stack: Stack) -> str:
    return f"torch{stack.torch}-cu{stack.cuda}-py{stack.python}-{origin(stack)}"


def layer_tag(layer: str, stack: Stack) -> str:
    apex = stack.apex[:8] if _SHA.match(stack.apex) else stack.apex
    return {
        "base": f"base-{platform(stack)}",
        "kernels": f"kernels-te{stack.te}-apex{apex}-{platform(stack)}",
        "runtime": f"runtime-mcore{stack.mcore}-te{stack.te}-{platform(stack)}",
        "app": f"app-verl{stack.verl}-mcore{stack.mcore}-te{stack.te}-{platform(stack)}",
    }[layer]


def image(tag: str, registry: str = "", repo: str = DEFAULT_REPO) -> str:
    return f"{registry}/{repo}:{tag}" if registry else f"{repo}:{tag}"


def tags(layer: str, stack: Stack, registry: str = "", repo: str = DEFAULT_REPO) -> list[str]:
    """The full tag and its short alias (`runtime-debian`)."""
    return [image(layer_tag(layer, stack), registry, repo), image(f"{layer}-{stack.name}", registry, repo)]


def target(layer: str, stack: Stack) -> str:
    return f"{layer}-{stack.name}"
