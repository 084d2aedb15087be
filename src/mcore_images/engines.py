"""verl's rollout engines pin torch exactly (every vLLM release requires one ``torch==X.Y.Z``), so an engine can only
join a stack whose torch it pins. What each engine release requires of torch is read from its published
metadata when a stack carrying it is locked (``mcore-images lock``), and kept in env/engines.json, where
the rule ``engine-torch`` reads it offline before any build."""

from __future__ import annotations

import json
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


def load(root: Path | None = None) -> dict[str, dict[str, str]]:
    """engine key -> {version: torch specifier}; empty when the file does not exist yet."""
    path = engines_file(root)
    return json.loads(path.read_text())["torch"] if path.is_file() else {}


def torch_requirement(stack: Stack, engine: components.Component, root: Path | None = None) -> str | None:
    """The recorded torch specifier of the stack's engine release (None when not recorded)."""
    return load(root).get(engine.key, {}).get(stack.pins[engine.key])


def unrecorded(stack: Stack, root: Path | None = None) -> list[components.Component]:
    """The stack's engines whose torch requirement env/engines.json lacks."""
    return [e for e in ENGINES if stack.has(e.key) and torch_requirement(stack, e, root) is None]


def read_requirement(engine: components.Component, version: str, python: str) -> str:
    """The torch specifier in the engine release's Requires-Dist, from PyPI (pip reads only the metadata)."""
    distribution = engine.distributions[0]
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        done = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--dry-run", "--no-deps", "--ignore-installed",
             "--only-binary", ":all:", "--python-version", python, *PLATFORMS,
             "--target", str(Path(tmp) / "none"), "--report", str(report), f"{distribution}=={version}"],
            capture_output=True, text=True, check=False)
        if done.returncode:
            why = (done.stderr.strip().splitlines() or ["pip failed"])[-1]
            raise InputError(f"cannot read {distribution} {version}'s requirements from the index: {why}")
        metadata: dict[str, Any] = json.loads(report.read_text())["install"][0]["metadata"]
    for text in metadata.get("requires_dist") or []:
        requirement = Requirement(text)
        if requirement.name == "torch" and not requirement.marker:
            return str(requirement.specifier)
    return ""


def record(stack: Stack, root: Path | None = None) -> Path | None:
    """Read and keep the torch requirement of every engine the stack carries (what `lock` calls)."""
    carried = [e for e in ENGINES if stack.has(e.key)]
    if not carried:
        return None
    table = load(root)
    for engine in carried:
        version = stack.pins[engine.key]
        table.setdefault(engine.key, {})[version] = read_requirement(engine, version, stack.python)
    path = engines_file(root)
    body = {"about": "torch requirement of each rollout-engine release, from its Requires-Dist on PyPI; "
                     "written by `mcore-images lock`, read by the rule engine-torch",
            "torch": {k: dict(sorted(v.items())) for k, v in sorted(table.items())}}
    path.write_text(json.dumps(body, indent=2) + "\n")
    return path
