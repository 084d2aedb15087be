"""What runs before a user's code: every ``.pth`` file and every ``sitecustomize`` / ``usercustomize`` an
interpreter would import runs at its start, so each must be what a package shipped: listed with its hash in a pip
RECORD, or in an OS package's file list with the md5 dpkg recorded. A hook nobody owns (``zz_tune.pth`` setting
variables) changes every run unseen.

Python itself says what it would import: ``importlib`` resolves ``sitecustomize`` wherever it lies (a folder, or a zip
on sys.path, which is a hook as a whole), and its loader hands over the code it would run, which must be the code its
source compiles to (a stale or forged ``__pycache__`` entry runs instead of the source). A pyc with an unchecked hash
anywhere on sys.path is a finding too: Python runs it without ever looking at its source.

What this cannot see: a hook added together with a RECORD line that matches it. The hashed lock records each wheel's
sha256, not its files', and the image keeps neither the lock's wheels nor their RECORDs, so a rewritten RECORD is
consistent with everything the image holds; only rebuilding from the lock's wheels and comparing would show it.
"""
from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tests.image.shared_checks import installed

INTERPRETERS = ("python", "/usr/bin/python3")
"""The image's Python (the venv's, first on PATH) and the OS's own, which apt's helpers run: each reads its own path."""

HOOK_LISTER = r"""
import importlib.util, json, os, sys
sys.dont_write_bytecode = True
found, unchecked, forged = [], [], []
folders = list(dict.fromkeys(os.path.realpath(p) for p in sys.path if p))
for folder in folders:
    if os.path.isfile(folder):
        found.append(folder)
    if not os.path.isdir(folder):
        continue
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if name.endswith(".pth") and os.path.isfile(path):
            found.append(path)
        elif name in ("sitecustomize.py", "usercustomize.py"):
            found.append(path)
        elif name in ("sitecustomize", "usercustomize") and os.path.isdir(path):
            found += [os.path.join(path, f) for f in sorted(os.listdir(path)) if f.endswith(".py")]
for folder in folders:
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if os.path.join(root, d) not in folders]
        for name in files:
            if name.endswith(".pyc"):
                with open(os.path.join(root, name), "rb") as handle:
                    flags = int.from_bytes(handle.read(8)[4:8], "little")
                if flags & 1 and not flags & 2:
                    unchecked.append(os.path.join(root, name))
for module in ("sitecustomize", "usercustomize"):
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        continue
    origin = spec.origin
    while origin != "/" and not os.path.exists(origin):
        origin = os.path.dirname(origin)
    found.append(origin)
    loader = spec.loader
    if hasattr(loader, "source_to_code") and hasattr(loader, "get_code") and os.path.isfile(spec.origin):
        if loader.get_code(module) != loader.source_to_code(loader.get_data(spec.origin), spec.origin):
            forged.append(spec.cached or spec.origin)
print(json.dumps({"hooks": sorted(set(found)), "unchecked": sorted(unchecked), "forged": forged}))
"""
"""Runs in the image: every startup hook on the interpreter's path (site runs .pth files of site folders and imports
sitecustomize and usercustomize from anywhere on the path, a zip included), where importlib resolves each of the two,
every pyc whose hash Python never checks (PEP 552 flags: hash-based, check_source off), and each resolved hook whose
code Python would load (from its pyc) differs from what its source compiles to."""


@dataclass(frozen=True)
class Hooks:
    """One interpreter's startup hooks: who ships each unchanged ("pip <distribution>", "dpkg", or None), the pycs
    run unchecked, and the hooks whose cached code is not their source's."""

    owners: dict[str, str | None]
    unchecked: list[str] = field(default_factory=list)
    forged: list[str] = field(default_factory=list)


def _json(run: Any, command: str, what: str) -> Any:
    result = run(command)
    if result.rc != 0:
        raise AssertionError(f"{what} failed in the image (exit {result.rc}): {result.stderr.strip()[-1500:]}")
    return json.loads(result.stdout)


def startup_hooks(run: Any) -> dict[str, Hooks]:
    """For each interpreter the image has: its startup hooks (and, for a link, the file it points to) and who ships
    each, with the pycs it would run unchecked."""
    seen: dict[str, Hooks] = {}
    for python in INTERPRETERS:
        if run(f"command -v {shlex.quote(python)}").rc != 0:
            continue
        listed = _json(run, f"{shlex.quote(python)} -c {shlex.quote(HOOK_LISTER)}", f"listing {python}'s startup hooks")
        owners: dict[str, str | None] = {}
        if listed["hooks"]:
            # Each hook and, for a link, the file it points to (the owner lookup formats its command with %).
            quoted = " ".join(shlex.quote(h).replace("%", "%%") for h in listed["hooks"])
            paths = f'{{ for p in {quoted}; do echo "$p"; realpath -e "$p"; done; }} | sort -u'
            owners = installed.owners(run, paths, python=python)
        seen[python] = Hooks(owners, listed["unchecked"], listed["forged"])
    return seen


def startup_hook_problems(hooks: Mapping[str, Hooks]) -> list[str]:
    """Each hook (or the file a linked hook points to) that no package ships as it is now, each pyc run unchecked,
    and each hook whose cached code is not its source's."""
    problems = []
    for python, found in hooks.items():
        problems += [f"{path}: a startup hook of {python} that no pip RECORD or OS package ships as it is (it runs at "
                     "every start of that interpreter)"
                     for path, owner in sorted(found.owners.items()) if owner is None]
        problems += [f"{path}: an unchecked-hash pyc on {python}'s path: it runs whatever its source says"
                     for path in found.unchecked]
        problems += [f"{path}: {python} would run this cached code, not what its source compiles to"
                     for path in found.forged]
    return problems
