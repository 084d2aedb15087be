"""Recording what each release declares, read from the index when a stack is locked (`mcore-images lock`) or a
candidate is judged (`build --set`, `outdated`): each rollout engine's torch requirement, verl's requirements,
what Megatron-Bridge imports from megatron-core, torch's cuDNN requirement and its wheel per machine. engines.py
reads the record offline for the rules."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.version import Version

from mcore_images.catalogue import components
from mcore_images.catalogue.stacks import Stack
from mcore_images.resolve import bridge_imports, engines, pypi


def read_candidates(stack: Stack, root: Path | None = None) -> list[str]:
    """Read from the index what env/engines.json has not recorded for this stack's versions (an engine's torch
    requirement, verl's requirements, Megatron-Bridge's imports), so that a candidate version given by `--set`
    or found by `outdated` is judged by its own metadata; returns what was read ("vllm 0.26.0")."""
    missing = engines.unrecorded(stack, root)
    _read(stack, engines.CANDIDATES, missing)
    return [f"{c.key} {stack.pins[c.key]}" for c in missing]


def _read(stack: Stack, document: dict[str, Any], which: list[components.Component]) -> None:
    """Read each named component's requirements for the stack's version into ``document``'s sections."""
    for engine in (c for c in which if c in engines.ENGINES):
        version = stack.pins[engine.key]
        document.setdefault("torch", {}).setdefault(engine.key, {})[version] = read_requirement(
            engine, version, stack.python)
    if components.BY_KEY["verl"] in which:
        metadata = pypi.read_metadata("verl", stack.verl, stack.python)
        requires = list(metadata.get("requires_dist") or [])
        document.setdefault("verl", {})[stack.verl] = {"requires_python": metadata.get("requires_python") or "",
                                                       "requires_dist": requires,
                                                       "absent_from_pypi": absent_from_index(requires)}
    if components.BY_KEY["megatron_bridge"] in which:
        document.setdefault("megatron_bridge", {}).setdefault(stack.megatron_bridge, {})[stack.mcore] = (
            bridge_imports.read(stack.megatron_bridge, stack.mcore, stack.python))
    if components.BY_KEY["torch"] in which:
        document.setdefault("cudnn", {})[stack.torch] = read_cudnn(stack.torch, stack.python)
        for machine in stack.machines:
            key = engines.wheel_key(stack.python, machine)
            document.setdefault("torch_wheels", {}).setdefault(stack.torch, {})[key] = read_torch_wheel(
                stack.torch, stack.python, machine)


def absent_from_index(requires: list[str]) -> list[str]:
    """The exact pins (``name==X``) among ``requires`` on a catalogue component whose release X the index does not
    have: what verl's own extras name that no stack can install (the Megatron-Bridge release its 0.9 line names)."""
    known = {d for c in components.CATALOGUE for d in c.distributions}
    absent, listed = [], {}
    for text in requires:
        requirement = Requirement(text)
        name = requirement.name.lower().replace("_", "-")
        exact = [spec.version for spec in requirement.specifier if spec.operator == "==" and "*" not in spec.version]
        if name not in known or len(exact) != 1:
            continue
        if name not in listed:
            listed[name] = {pypi.file_version(f["filename"]) for f in pypi.index_files(name)}
        if Version(exact[0]) not in listed[name]:
            absent.append(f"{name}=={exact[0]}")
    return sorted(set(absent))


def read_requirement(engine: components.Component, version: str, python: str) -> str:
    """The torch specifier in the engine release's Requires-Dist, from PyPI (pip reads only the metadata)."""
    metadata = pypi.read_metadata(engine.distributions[0], version, python)
    for text in metadata.get("requires_dist") or []:
        requirement = Requirement(text)
        if requirement.name == "torch" and not requirement.marker:
            return str(requirement.specifier)
    return ""


CUDNN_WHEEL = re.compile(r"^nvidia-cudnn-cu\d+$")


def read_cudnn(torch: str, python: str) -> str:
    """torch's cuDNN requirement on the images' platform (``nvidia-cudnn-cu13==…``), from its metadata on the
    index; '' when it requires none."""
    metadata = pypi.read_metadata("torch", torch, python)
    env = {**pypi.MARKER_ENV, "python_version": python, "python_full_version": f"{python}.0", "extra": ""}
    for text in metadata.get("requires_dist") or []:
        requirement = Requirement(text)
        if CUDNN_WHEEL.match(requirement.name.lower()) and (requirement.marker is None
                                                            or requirement.marker.evaluate(env)):
            return f"{requirement.name.lower()}{requirement.specifier}"
    return ""


CUDA_RUNTIME = re.compile(r"^nvidia-cuda-runtime(-cu\d+)?$")
"""The wheel that brings libcudart (torch up to 2.10 names it); torch 2.11 names it through NVIDIA's cuda-toolkit
meta-package, with the extra ``cudart``. A CPU build requires neither on its machine."""


def cuda_runtime(requirement: Requirement) -> str | None:
    """The requirement as the CUDA runtime it brings (``cuda-toolkit[cudart]==13.0.2``), None for another."""
    name = requirement.name.lower()
    if CUDA_RUNTIME.match(name):
        return f"{name}{requirement.specifier}"
    if name == "cuda-toolkit" and "cudart" in requirement.extras:
        return f"{name}[cudart]{requirement.specifier}"
    return None


def read_torch_wheel(torch: str, python: str, machine: str) -> dict[str, Any]:
    """PyPI's torch wheel of ``torch`` for ``machine``: its file name and size (the index's), and the CUDA runtime
    requirement its metadata declares there ('' for a CPU build: PyPI's aarch64 wheels of torch 2.9 name their
    nvidia-* wheels for x86_64 only)."""
    item = pypi.install_report("torch", torch, python, pypi.wheel_platforms(machine))
    env = {**pypi.MARKER_ENV, "platform_machine": machine, "python_version": python,
           "python_full_version": f"{python}.0", "extra": ""}
    runtime = ""
    for text in item["metadata"].get("requires_dist") or []:
        requirement = Requirement(text)
        brings = cuda_runtime(requirement)
        if brings and (requirement.marker is None or requirement.marker.evaluate(env)):
            runtime = brings
    wheel = str((item.get("download_info") or {}).get("url", "")).rsplit("/", 1)[-1]
    return {"wheel": wheel, "bytes": pypi.file_size("torch", wheel), "cuda_runtime": runtime}


def record(stack: Stack, root: Path | None = None) -> Path | None:
    """Read and keep the torch requirement of every engine the stack carries, and what its verl release
    requires (what `lock` calls)."""
    carried = [e for e in engines.ENGINES if stack.has(e.key)]
    if stack.has("verl"):
        carried.append(components.BY_KEY["verl"])
    if stack.has("megatron_bridge") and stack.has("mcore"):
        carried.append(components.BY_KEY["megatron_bridge"])
    if stack.torch_source == "pypi":
        carried.append(components.BY_KEY["torch"])
    if not carried:
        return None
    document = engines.recorded(root)
    _read(stack, document, carried)
    table, verl, bridges, cudnn, wheels = (document.get(k, {}) for k in ("torch", "verl", "megatron_bridge", "cudnn",
                                                                          "torch_wheels"))
    path = engines.engines_file(root)
    body = {"about": "torch requirement of each rollout-engine release, and the requirements of each verl release, "
                     "from their metadata on PyPI; what each Megatron-Bridge release imports at import time that a "
                     "megatron-core release lacks, read from both wheels; the cuDNN wheel each torch release "
                     "requires, from its metadata on PyPI; each torch release's wheel per CPython and machine "
                     "(file, bytes, and the CUDA runtime its metadata requires there: '' is a CPU build), from the "
                     "index; written by `mcore-images lock`, read by the rules engine-torch, verl-requirements, "
                     "bridge-mcore, cudnn-torch and platform-torch",
            "torch": {k: dict(sorted(v.items())) for k, v in sorted(table.items())},
            "verl": dict(sorted(verl.items())),
            "megatron_bridge": {k: dict(sorted(v.items())) for k, v in sorted(bridges.items())},
            "cudnn": dict(sorted(cudnn.items())),
            "torch_wheels": {k: dict(sorted(v.items())) for k, v in sorted(wheels.items())}}
    path.write_text(json.dumps(body, indent=2) + "\n")
    return path
