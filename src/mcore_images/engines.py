"""verl's rollout engines pin torch exactly (every vLLM release requires one ``torch==X.Y.Z``), so an engine can only
join a stack whose torch it pins; verl itself declares what it runs with (Requires-Python, and its ``mcore``,
``vllm`` and ``sglang`` extras). What each engine release requires of torch, and what each verl release
requires, is read from its published metadata when a stack carrying it is locked (``mcore-images lock``) and
kept in env/engines.json, where the rules ``engine-torch`` and ``verl-requirements`` read it offline before
any build. Megatron-Bridge declares no megatron-core version; what it imports is recorded the same way
(bridge_imports.py) for the rule ``bridge-mcore``. torch's wheel requires one cuDNN release exactly (its
``nvidia-cudnn-cuXX==`` requirement): recorded per torch release for the rule ``cudnn-torch``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement

from mcore_images import components
from mcore_images.errors import InputError
from mcore_images.stacks import Stack, repo_root

ENGINES: tuple[components.Component, ...] = tuple(c for c in components.CATALOGUE if c.rollout_engine)
"""The catalogue's rollout engines."""


PLATFORMS = tuple(arg for tag in (*(f"manylinux_2_{minor}_x86_64" for minor in range(39, 16, -1)),
                                   "manylinux2014_x86_64", "manylinux1_x86_64") for arg in ("--platform", tag))
"""The wheel tags an engine release may be published under (pip matches only the tags it is given): every
manylinux glibc tag up to the locks' own (x86_64-manylinux_2_39)."""


def engines_file(root: Path | None = None) -> Path:
    return (root or repo_root()) / "env" / "engines.json"


_CANDIDATES: dict[str, dict[str, Any]] = {"torch": {}, "verl": {}, "megatron_bridge": {}, "cudnn": {}}
"""Requirements read from the index in this process for versions env/engines.json has not recorded: a
`build --set` or an `outdated` candidate (read_candidates). The rules see them; nothing writes them to env/."""


ONE_LEVEL = ("verl", "cudnn")
"""Sections keyed by one release (the others by a release, then a second key)."""


def _recorded(root: Path | None = None) -> dict[str, Any]:
    """env/engines.json as committed."""
    path = engines_file(root)
    return json.loads(path.read_text()) if path.is_file() else {}


def _document(root: Path | None = None) -> dict[str, Any]:
    """The committed record with this process's candidate reads over it (two levels deep, as the file is)."""
    document = _recorded(root)
    for section, table in _CANDIDATES.items():
        merged = document.setdefault(section, {})
        for key, value in table.items():
            merged[key] = {**merged.get(key, {}), **value} if section not in ONE_LEVEL else value
    return document


def load(root: Path | None = None) -> dict[str, dict[str, str]]:
    """engine key -> {version: torch specifier}; empty when the file does not exist yet."""
    return _document(root).get("torch", {})


def verl_requirements(stack: Stack, root: Path | None = None) -> dict[str, Any] | None:
    """What the stack's verl release declares ({"requires_python", "requires_dist"}), None when not recorded."""
    return _document(root).get("verl", {}).get(stack.verl)


def torch_requirement(stack: Stack, engine: components.Component, root: Path | None = None) -> str | None:
    """The recorded torch specifier of the stack's engine release (None when not recorded)."""
    return load(root).get(engine.key, {}).get(stack.pins[engine.key])


def torch_cudnn(stack: Stack, root: Path | None = None) -> str | None:
    """The cuDNN requirement of the stack's torch release (``nvidia-cudnn-cu13==…``; '' when it requires none),
    None when not recorded."""
    return _document(root).get("cudnn", {}).get(stack.torch)


def bridge_missing(stack: Stack, root: Path | None = None) -> list[str] | None:
    """What the stack's Megatron-Bridge imports at import time that its megatron-core lacks (bridge_imports.py),
    None when not recorded for this pair."""
    entry = _document(root).get("megatron_bridge", {}).get(stack.megatron_bridge, {})
    return entry.get(stack.mcore)


def unrecorded(stack: Stack, root: Path | None = None) -> list[components.Component]:
    """The stack's engines whose torch requirement env/engines.json lacks (and verl, when its requirements are;
    Megatron-Bridge, when its imports against the stack's megatron-core are; torch from PyPI, when its cuDNN
    requirement is)."""
    missing = [e for e in ENGINES if stack.has(e.key) and torch_requirement(stack, e, root) is None]
    if stack.torch_source == "pypi" and torch_cudnn(stack, root) is None:
        missing.append(components.BY_KEY["torch"])
    if stack.has("verl") and verl_requirements(stack, root) is None:
        missing.append(components.BY_KEY["verl"])
    if stack.has("megatron_bridge") and stack.has("mcore") and bridge_missing(stack, root) is None:
        missing.append(components.BY_KEY["megatron_bridge"])
    return missing


def read_candidates(stack: Stack, root: Path | None = None) -> list[str]:
    """Read from the index what env/engines.json has not recorded for this stack's versions (an engine's torch
    requirement, verl's requirements, Megatron-Bridge's imports), so that a candidate version given by `--set`
    or found by `outdated` is judged by its own metadata; returns what was read ("vllm 0.24.0")."""
    missing = unrecorded(stack, root)
    _read(stack, _CANDIDATES, missing)
    return [f"{c.key} {stack.pins[c.key]}" for c in missing]


def _read(stack: Stack, document: dict[str, Any], which: list[components.Component]) -> None:
    """Read each named component's requirements for the stack's version into ``document``'s sections."""
    from mcore_images import bridge_imports

    for engine in (c for c in which if c in ENGINES):
        version = stack.pins[engine.key]
        document.setdefault("torch", {}).setdefault(engine.key, {})[version] = read_requirement(
            engine, version, stack.python)
    if components.BY_KEY["verl"] in which:
        metadata = read_metadata("verl", stack.verl, stack.python)
        document.setdefault("verl", {})[stack.verl] = {"requires_python": metadata.get("requires_python") or "",
                                                       "requires_dist": list(metadata.get("requires_dist") or [])}
    if components.BY_KEY["megatron_bridge"] in which:
        document.setdefault("megatron_bridge", {}).setdefault(stack.megatron_bridge, {})[stack.mcore] = (
            bridge_imports.read(stack.megatron_bridge, stack.mcore, stack.python))
    if components.BY_KEY["torch"] in which:
        document.setdefault("cudnn", {})[stack.torch] = read_cudnn(stack.torch, stack.python)


def read_requirement(engine: components.Component, version: str, python: str) -> str:
    """The torch specifier in the engine release's Requires-Dist, from PyPI (pip reads only the metadata)."""
    metadata = read_metadata(engine.distributions[0], version, python)
    for text in metadata.get("requires_dist") or []:
        requirement = Requirement(text)
        if requirement.name == "torch" and not requirement.marker:
            return str(requirement.specifier)
    return ""


CUDNN_WHEEL = re.compile(r"^nvidia-cudnn-cu\d+$")


def read_cudnn(torch: str, python: str) -> str:
    """torch's cuDNN requirement on the images' platform (``nvidia-cudnn-cu13==…``), from its metadata on the
    index; '' when it requires none."""
    from mcore_images.rules import MARKER_ENV

    metadata = read_metadata("torch", torch, python)
    env = {**MARKER_ENV, "python_version": python, "python_full_version": f"{python}.0", "extra": ""}
    for text in metadata.get("requires_dist") or []:
        requirement = Requirement(text)
        if CUDNN_WHEEL.match(requirement.name.lower()) and (requirement.marker is None
                                                            or requirement.marker.evaluate(env)):
            return f"{requirement.name.lower()}{requirement.specifier}"
    return ""


def read_metadata(distribution: str, version: str, python: str) -> dict[str, Any]:
    """A release's core metadata from the index (pip resolves and downloads nothing but the metadata)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        done = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--dry-run", "--no-deps", "--ignore-installed",
             "--ignore-requires-python",
             "--only-binary", ":all:", "--python-version", python, *PLATFORMS,
             "--target", str(Path(tmp) / "none"), "--report", str(report), f"{distribution}=={version}"],
            capture_output=True, text=True, check=False)
        if done.returncode:
            why = (done.stderr.strip().splitlines() or ["pip failed"])[-1]
            raise InputError(f"cannot read {distribution} {version}'s requirements from the index: {why}")
        metadata: dict[str, Any] = json.loads(report.read_text())["install"][0]["metadata"]
    return metadata


def record(stack: Stack, root: Path | None = None) -> Path | None:
    """Read and keep the torch requirement of every engine the stack carries, and what its verl release
    requires (what `lock` calls)."""
    carried = [e for e in ENGINES if stack.has(e.key)]
    if stack.has("verl"):
        carried.append(components.BY_KEY["verl"])
    if stack.has("megatron_bridge") and stack.has("mcore"):
        carried.append(components.BY_KEY["megatron_bridge"])
    if stack.torch_source == "pypi":
        carried.append(components.BY_KEY["torch"])
    if not carried:
        return None
    document = _recorded(root)
    _read(stack, document, carried)
    table, verl, bridges, cudnn = (document.get(k, {}) for k in ("torch", "verl", "megatron_bridge", "cudnn"))
    path = engines_file(root)
    body = {"about": "torch requirement of each rollout-engine release, and the requirements of each verl release, "
                     "from their metadata on PyPI; what each Megatron-Bridge release imports at import time that a "
                     "megatron-core release lacks, read from both wheels; the cuDNN wheel each torch release "
                     "requires, from its metadata on PyPI; written by `mcore-images lock`, read by the rules "
                     "engine-torch, verl-requirements, bridge-mcore and cudnn-torch",
            "torch": {k: dict(sorted(v.items())) for k, v in sorted(table.items())},
            "verl": dict(sorted(verl.items())),
            "megatron_bridge": {k: dict(sorted(v.items())) for k, v in sorted(bridges.items())},
            "cudnn": dict(sorted(cudnn.items()))}
    path.write_text(json.dumps(body, indent=2) + "\n")
    return path
