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
the rule ``platform-torch``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from mcore_images import components, platforms
from mcore_images.errors import InputError
from mcore_images.index_env import resolver_environment
from mcore_images.stacks import Stack, repo_root

ENGINES: tuple[components.Component, ...] = tuple(c for c in components.CATALOGUE if c.rollout_engine)
"""The catalogue's rollout engines."""


def wheel_platforms(machine: str = platforms.DEFAULT.machine) -> tuple[str, ...]:
    """pip's ``--platform`` arguments for the wheel tags a release may be published under on ``machine`` (pip matches
    only the tags it is given): every manylinux glibc tag up to the locks' newest (manylinux_2_39)."""
    oldest = (f"manylinux2014_{machine}", *((f"manylinux1_{machine}",) if machine == "x86_64" else ()))
    return tuple(arg for tag in (*(f"manylinux_2_{minor}_{machine}" for minor in range(39, 16, -1)), *oldest)
                 for arg in ("--platform", tag))


PLATFORMS = wheel_platforms()
"""The x86_64 wheel tags (what every metadata read but torch's per-machine one asks for)."""


def engines_file(root: Path | None = None) -> Path:
    return (root or repo_root()) / "env" / "engines.json"


_CANDIDATES: dict[str, dict[str, Any]] = {"torch": {}, "verl": {}, "megatron_bridge": {}, "cudnn": {},
                                          "torch_wheels": {}}
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
            document.setdefault("torch_wheels", {}).setdefault(stack.torch, {})[wheel_key(stack.python, machine)] = (
                read_torch_wheel(stack.torch, stack.python, machine))


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
            listed[name] = {_file_version(f["filename"]) for f in _index_files(name)}
        if Version(exact[0]) not in listed[name]:
            absent.append(f"{name}=={exact[0]}")
    return sorted(set(absent))


def _file_version(filename: str) -> Version | None:
    """The release a wheel or sdist file name of the index is of (None for a name this cannot read)."""
    try:
        if filename.endswith(".whl"):
            return parse_wheel_filename(filename)[1]
        stem = filename.removesuffix(".tar.gz").removesuffix(".zip")
        return Version(stem.rsplit("-", 1)[1])
    except (InvalidWheelFilename, InvalidVersion, IndexError):
        return None


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
    from mcore_images.rules import MARKER_ENV

    item = _install_report("torch", torch, python, wheel_platforms(machine))
    env = {**MARKER_ENV, "platform_machine": machine, "python_version": python, "python_full_version": f"{python}.0",
           "extra": ""}
    runtime = ""
    for text in item["metadata"].get("requires_dist") or []:
        requirement = Requirement(text)
        brings = cuda_runtime(requirement)
        if brings and (requirement.marker is None or requirement.marker.evaluate(env)):
            runtime = brings
    wheel = str((item.get("download_info") or {}).get("url", "")).rsplit("/", 1)[-1]
    return {"wheel": wheel, "bytes": file_size("torch", wheel), "cuda_runtime": runtime}


class NoWheel(InputError):
    """The release is on the index but has no wheel for the stack's Python: a verdict on that version (a bump to it
    would break the stack), not a failure to read the index."""


def _index_files(project: str) -> list[dict[str, Any]]:
    """Every file the index's JSON simple API lists for a project."""
    from mcore_images.lock import PYPI_SIMPLE

    request = urllib.request.Request(f"{PYPI_SIMPLE}/{project}/",
                                     headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        files: list[dict[str, Any]] = json.load(response)["files"]
    return files


def file_size(project: str, filename: str) -> int | None:
    """The size the index's JSON simple API gives for one file of a project (None when it gives none)."""
    size = next((f.get("size") for f in _index_files(project) if f["filename"] == filename), None)
    return size if isinstance(size, int) else None


def wheel_pythons(project: str, version: str) -> list[str]:
    """The interpreter tags (cp311, py3, …) of the release's wheels on the index, sorted; [] when it has none."""
    found = set()
    for item in _index_files(project):
        try:
            _, wheel_version, _, wheel_tags = parse_wheel_filename(item["filename"])
        except (InvalidWheelFilename, InvalidVersion):
            continue
        if wheel_version == Version(version):
            found |= {t.interpreter for t in wheel_tags}
    return sorted(found)


def read_metadata(distribution: str, version: str, python: str) -> dict[str, Any]:
    """A release's core metadata from the index (pip resolves and downloads nothing but the metadata)."""
    metadata: dict[str, Any] = _install_report(distribution, version, python, PLATFORMS)["metadata"]
    return metadata


def _install_report(distribution: str, version: str, python: str, wheel_tags: tuple[str, ...]) -> dict[str, Any]:
    """pip's install report of one release for the given wheel tags (its metadata and where it comes from)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        done = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--dry-run", "--no-deps", "--ignore-installed",
             "--ignore-requires-python",
             "--only-binary", ":all:", "--python-version", python, *wheel_tags,
             "--target", str(Path(tmp) / "none"), "--report", str(report), f"{distribution}=={version}"],
            capture_output=True, text=True, check=False, env=resolver_environment())
        if done.returncode:
            why = (done.stderr.strip().splitlines() or ["pip failed"])[-1]
            _no_wheel_for(distribution, version, python)
            raise InputError(f"cannot read {distribution} {version}'s requirements from the index: {why}")
        item: dict[str, Any] = json.loads(report.read_text())["install"][0]
    return item


def _no_wheel_for(distribution: str, version: str, python: str) -> None:
    """Raise NoWheel when pip found nothing because the release has wheels, none of them for this Python."""
    try:
        pythons = wheel_pythons(distribution, version)
    except (OSError, ValueError, KeyError):
        return  # the index cannot be read either: the caller's error says so
    cp = f"cp{python.replace('.', '')}"
    if pythons and not any(t in (cp, "py3", f"py{python.replace('.', '')}") for t in pythons):
        raise NoWheel(f"{distribution} {version} has no wheel for Python {python} (its wheels: {', '.join(pythons)})")


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
    table, verl, bridges, cudnn, wheels = (document.get(k, {}) for k in ("torch", "verl", "megatron_bridge", "cudnn",
                                                                          "torch_wheels"))
    path = engines_file(root)
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
