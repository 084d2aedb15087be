"""verl's rollout engines pin torch exactly (every vLLM release requires one ``torch==X.Y.Z``), so an engine can only
join a stack whose torch it pins; verl itself declares what it runs with (Requires-Python, and its ``mcore``,
``vllm`` and ``sglang`` extras). What each engine release requires of torch, and what each verl release
requires, is read from its published metadata when a stack carrying it is locked (``mcore-images lock``) and
kept in env/engines.json, where the rules ``engine-torch`` and ``verl-requirements`` read it offline before
any build. Megatron-Bridge declares no megatron-core version; what it imports is recorded the same way
(bridge_imports.py) for the rule ``bridge-mcore``. torch's wheel requires one cuDNN release exactly (its
``nvidia-cudnn-cuXX==`` requirement): recorded per torch release for the rule ``cudnn-torch``. Whether torch's wheel
for each machine is a CUDA build (it requires the CUDA runtime wheel there; PyPI's aarch64 wheels of torch 2.9 are
CPU builds, 2.11's are CUDA builds) is recorded per torch release and machine, with the wheel's name and size, for
the rule ``platform-torch``.

This module reads the record offline (the rules' side); engine_records.py reads the index and writes it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mcore_images.catalogue import components
from mcore_images.catalogue.stacks import Stack, repo_root

ENGINES: tuple[components.Component, ...] = tuple(c for c in components.CATALOGUE if c.rollout_engine)
"""The catalogue's rollout engines."""


def engines_file(root: Path | None = None) -> Path:
    return (root or repo_root()) / "env" / "engines.json"


CANDIDATES: dict[str, dict[str, Any]] = {"torch": {}, "verl": {}, "megatron_bridge": {}, "cudnn": {},
                                          "torch_wheels": {}}
"""Requirements read from the index in this process for versions env/engines.json has not recorded: a
`build --set` or an `outdated` candidate (read_candidates). The rules see them; nothing writes them to env/."""


ONE_LEVEL = ("verl", "cudnn")
"""Sections keyed by one release (the others by a release, then a second key)."""


def recorded(root: Path | None = None) -> dict[str, Any]:
    """env/engines.json as committed."""
    path = engines_file(root)
    return json.loads(path.read_text()) if path.is_file() else {}


def _document(root: Path | None = None) -> dict[str, Any]:
    """The committed record with this process's candidate reads over it (two levels deep, as the file is)."""
    document = recorded(root)
    for section, table in CANDIDATES.items():
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


def wheel_key(python: str, machine: str) -> str:
    """How env/engines.json files a wheel under its release: the CPython tag and the machine (``cp313-aarch64``)."""
    return f"cp{python.replace('.', '')}-{machine}"


def torch_wheel(stack: Stack, machine: str, root: Path | None = None) -> dict[str, Any] | None:
    """What PyPI's torch wheel of the stack's release and Python is on ``machine`` ({"wheel", "bytes",
    "cuda_runtime"}: the CUDA runtime requirement that applies there, '' for a CPU build), None when not recorded."""
    return _document(root).get("torch_wheels", {}).get(stack.torch, {}).get(wheel_key(stack.python, machine))


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
    if stack.torch_source == "pypi" and (torch_cudnn(stack, root) is None
                                         or any(torch_wheel(stack, m, root) is None for m in stack.machines)):
        missing.append(components.BY_KEY["torch"])
    if stack.has("verl") and verl_requirements(stack, root) is None:
        missing.append(components.BY_KEY["verl"])
    if stack.has("megatron_bridge") and stack.has("mcore") and bridge_missing(stack, root) is None:
        missing.append(components.BY_KEY["megatron_bridge"])
    return missing
