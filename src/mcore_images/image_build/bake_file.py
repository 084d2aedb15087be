"""docker-bake.json: every target and group of the bake definition, computed from the catalogue and env/stacks.json.

Tags, labels, build args and contexts are written here once, by the same functions `tags`, `plan` and the image
tests use, so docker-bake.hcl holds only what bake must evaluate when it runs: the variables a build sets from its
environment (REGISTRY, LOCKS, GIT_SHA, …) and the common target. A value that depends on one is written as a bake
interpolation (``${LOCKS}``); every other string has its ``${`` and ``%{`` escaped, so bake reads it literally.
`make update` writes the file and `make validate` checks it is current.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from mcore_images.catalogue import components, gpu_archs, platforms, tags, wgrad_fusion
from mcore_images.catalogue.components import LAYERS
from mcore_images.catalogue.stacks import Stack

PATH = "docker-bake.json"
"""The generated file, next to docker-bake.hcl (bake reads both by default)."""
GROUPS = ("default", "ci", "nightly", "release")
"""The groups a stack may join; `default`, `ci` and `nightly` build each stack's top layer with its parents,
`release` every layer it builds. `all` builds every layer of every stack."""
EVERY_LAYER = ("release",)
"""The groups that name every layer a stack builds, not only its top one."""
APEX_SOURCE = "https://github.com/NVIDIA/apex.git"
"""Where an apex pinned by commit is fetched from (the `apex` context); any other pin gets an empty folder."""


def literal(text: str) -> str:
    """``text`` as a bake string that is not interpolated."""
    return text.replace("${", "$${").replace("%{", "%%{")


def _number(value: float) -> str:
    """A number as bake writes it in a string (``20``, ``11.5``)."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def apex_context(stack: Stack) -> str:
    if components.COMMIT.search(stack.apex):
        return f"{APEX_SOURCE}#{stack.apex}"
    return "docker/empty"


SETTINGS: dict[str, Callable[[Stack], str]] = {
    "STACK": lambda s: s.name,
    "LAYERS_STACK": lambda s: s.layer_stack("base"),
    "FLAVOR": lambda s: s.flavor,
    "BASE_IMAGE": lambda s: s.base_ref,
    "TE_SOURCE": lambda s: s.te_source,
    "CUDA_ARCHS": lambda s: s.cuda_archs,
}
"""The build args that are a stack's settings, not a component's pin (the Dockerfile declares each:
dockerfile.py checks it)."""


def args(stack: Stack) -> dict[str, str]:
    """Build args: the stack's settings, then each component's pin under the build arg its catalogue entry names."""
    out = {name: value(stack) for name, value in SETTINGS.items()}
    out.update({c.build_arg: stack.pins[c.key] for c in components.CATALOGUE if c.build_arg})
    return {k: literal(v) for k, v in out.items()}


def labels(layer: str, stack: Stack) -> dict[str, str]:
    """The stack's identity, every component its layer or a parent layer adds, and from kernels up the GPU
    architectures its kernels serve and who provides megatron-core's gradient accumulation fusion."""
    here = LAYERS.index(layer)
    out = {
        "io.mcore-images.layer": layer,
        "io.mcore-images.stack": stack.name,
        "io.mcore-images.flavor": stack.flavor,
        "io.mcore-images.base": stack.base_image,
        "io.mcore-images.size-budget-gb": _number(stack.size_budget_gb[layer]),
        "org.opencontainers.image.title": f"mcore-images {layer} ({stack.name})",
        "org.opencontainers.image.description": stack.description,
        "org.opencontainers.image.version": tags.layer_tag(layer, stack),
        "org.opencontainers.image.base.name": stack.base_image,
    }
    out.update({f"io.mcore-images.{c.label}": stack.pins[c.key] for c in components.CATALOGUE
                if LAYERS.index(c.layer) <= here})
    if here >= LAYERS.index("kernels"):
        out.update({"io.mcore-images.cuda-archs": stack.cuda_archs,
                    "io.mcore-images.gpus": gpu_archs.serves(stack.cuda_archs),
                    "io.mcore-images.wgrad-fusion": wgrad_fusion.expected_provider(stack)})
    out = {k: literal(v) for k, v in out.items()}
    out["org.opencontainers.image.revision"] = "${GIT_SHA}"
    return out


def contexts(layer: str, stack: Stack) -> dict[str, str]:
    """The layers it builds on (bake targets), the apex source and the locks; for a platform other than the
    default one, the contexts BuildKit takes over the plain ones when it builds that platform (``NAME::os/arch``):
    its locks tree (env/locks/<machine>) and, for the debian flavor, its local base (tagged with the architecture)."""
    below = {"base": {}, "kernels": {"base": "base"}, "runtime": {"base": "base", "kernels": "kernels"},
             "app": {"runtime": "runtime"}}[layer]
    out = {name: f"target:{tags.target(lower, stack.layer_stack(lower))}" for name, lower in below.items()}
    out.update(apex=literal(apex_context(stack)), locks="${LOCKS}")
    for name in stack.platforms:
        platform = platforms.BY_NAME[name]
        if platform == platforms.DEFAULT:
            continue
        out[f"locks::{name}"] = f"${{LOCKS}}/{platform.machine}"
        if stack.flavor == "debian":
            out[literal(f"{stack.base_image}::{name}")] = literal(f"docker-image://{stack.base_image}-{platform.arch}")
    return out


def target(layer: str, stack: Stack) -> dict[str, Any]:
    """One target; its platforms only where the stack has one besides the default (else the builder's own)."""
    out: dict[str, Any] = {"inherits": ["_common"], "target": layer, "args": args(stack)}
    if any(platforms.BY_NAME[p] != platforms.DEFAULT for p in stack.platforms):
        out["platforms"] = list(stack.platforms)
    out.update(contexts=contexts(layer, stack),
               tags=[f'${{image("{literal(t)}")}}' for t in (tags.layer_tag(layer, stack), tags.target(layer, stack))],
               labels=labels(layer, stack))
    return out


def _group(stacks: Iterable[Stack], name: str) -> list[str]:
    chosen = [s for s in stacks if name == "all" or name in s.groups]
    if name in (*EVERY_LAYER, "all"):
        return [tags.target(layer, s) for s in chosen for layer in s.built_layers]
    return [tags.target(s.layers[-1], s) for s in chosen]


def definition(stacks: Iterable[Stack]) -> dict[str, Any]:
    """The bake file's data: a group per name of GROUPS and `all`, a target per layer each stack builds."""
    stacks = list(stacks)
    return {"group": {name: {"targets": _group(stacks, name)} for name in (*GROUPS, "all")},
            "target": {tags.target(layer, s): target(layer, s) for s in stacks for layer in s.built_layers}}


def render(stacks: Iterable[Stack]) -> str:
    return json.dumps(definition(stacks), indent=2) + "\n"


def write(stacks: Iterable[Stack], path: Path) -> bool:
    """Write the bake file at ``path``; whether it changed."""
    text = render(stacks)
    if path.is_file() and not path.is_symlink() and path.read_text() == text:
        return False
    path.unlink(missing_ok=True)
    path.write_text(text)
    return True


def stale(stacks: Iterable[Stack], root: Path) -> list[str]:
    """The fix, where docker-bake.json differs from what the stacks give."""
    path = root / PATH
    if path.is_symlink() or not path.is_file() or path.read_text() != render(stacks):
        return [f"{PATH} is out of date with env/stacks.json and the catalogue; run `make update`"]
    return []
