"""What the package index says, read online: the one module of resolve that reaches the network (PyPI's JSON
simple API, an sdist's PKG-INFO, and pip's metadata-only dry runs), with the settings every reader and resolver
(uv_compile.py) shares.

The tool's own pip and uv judge a stack's versions, not the environment the tool happens to run in: a caller's
constraint file (an image sets PIP_CONSTRAINT to hold its own pins) would make `outdated` and `lock` fail on every
candidate that file does not allow ("cannot read torch 2.15.0's requirements … ResolutionImpossible"). So those
settings are left out of the environment they run in; everything else (the index URL, certificates, proxies) is
the caller's.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from collections.abc import Callable
from email.parser import Parser
from pathlib import Path
from typing import Any

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from mcore_images.catalogue import platforms
from mcore_images.errors import InputError

PYPI_SIMPLE = "https://pypi.org/simple"
"""The index every reader and resolver asks (PEP 691's JSON form for the readers)."""

MARKER_ENV = {"sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
              "implementation_name": "cpython", "platform_python_implementation": "CPython"}
"""The marker environment of every image (Linux, x86_64, CPython); Python comes from the stack."""

CALLERS_OWN = ("PIP_CONSTRAINT", "PIP_REQUIREMENT", "UV_CONSTRAINT", "UV_OVERRIDE", "UV_BUILD_CONSTRAINT",
               "PIP_REQUIRE_VIRTUALENV")
"""What pins or restricts the environment the tool runs in, rather than the stack it judges."""


def resolver_environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in CALLERS_OWN}


def platform_tags(machine: str = platforms.DEFAULT.machine, glibc_minor: int = 39) -> tuple[str, ...]:
    """The platform tags of the wheels a Linux ``machine`` with glibc 2.<glibc_minor> installs, newest first: every
    manylinux glibc tag down to 2.17 and the legacy names (manylinux2014, and manylinux2010 and manylinux1 on
    x86_64)."""
    legacy = (f"manylinux2014_{machine}",
              *((f"manylinux2010_{machine}", f"manylinux1_{machine}") if machine == "x86_64" else ()))
    return (*(f"manylinux_2_{minor}_{machine}" for minor in range(glibc_minor, 16, -1)), *legacy)


def wheel_platforms(machine: str = platforms.DEFAULT.machine) -> tuple[str, ...]:
    """pip's ``--platform`` arguments for the wheel tags a release may be published under on ``machine`` (pip matches
    only the tags it is given): every manylinux glibc tag up to the locks' newest (manylinux_2_39)."""
    return tuple(arg for tag in platform_tags(machine) for arg in ("--platform", tag))


PLATFORMS = wheel_platforms()
"""The x86_64 wheel tags (what every metadata read but torch's per-machine one asks for)."""


def index_files(project: str, opener: Callable[..., Any] = urllib.request.urlopen) -> list[dict[str, Any]]:
    """Every file the index's JSON simple API lists for a project (name, url, hashes, size)."""
    request = urllib.request.Request(f"{PYPI_SIMPLE}/{project}/",
                                     headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with opener(request, timeout=120) as response:
        files: list[dict[str, Any]] = json.load(response)["files"]
    return files


def release_files(project: str, version: str) -> list[dict[str, Any]]:
    """The files the index lists for one release of a project (its wheels and sdists)."""
    wanted = Version(version)
    return [f for f in index_files(project) if file_version(f["filename"]) == wanted]


def sdist_archive(name: str, version: str) -> tuple[str, bytes]:
    """(file name, bytes) of a release's sdist on the index, checked against the index's sha256: read, never built."""
    files = sorted((f for f in release_files(name, version) if f["filename"].endswith((".tar.gz", ".zip"))),
                   key=lambda f: not f["filename"].endswith(".tar.gz"))
    if not files:
        raise InputError(f"no sdist of {name}=={version} on PyPI; check the pin in env/stacks.json")
    with urllib.request.urlopen(files[0]["url"], timeout=300) as resp:
        data = resp.read()
    expected = files[0].get("hashes", {}).get("sha256")
    if expected and hashlib.sha256(data).hexdigest() != expected:
        raise InputError(f"{files[0]['filename']} does not match the index's sha256; download it again")
    return files[0]["filename"], data


def sdist_requirements(name: str, version: str) -> list[str]:
    """Requires-Dist of an sdist, read from its PKG-INFO (no build, no setup.py run)."""
    filename, data = sdist_archive(name, version)
    if not filename.endswith(".tar.gz"):
        raise InputError(f"{filename}: only a .tar.gz sdist's PKG-INFO is read; pin a release with one")
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        member = next(m for m in tar.getmembers() if m.name.count("/") == 1 and m.name.endswith("/PKG-INFO"))
        pkg_info = tar.extractfile(member).read().decode()
    return Parser().parsestr(pkg_info).get_all("Requires-Dist") or []


def file_version(filename: str) -> Version | None:
    """The release a wheel or sdist file name of the index is of (None for a name this cannot read)."""
    try:
        if filename.endswith(".whl"):
            return parse_wheel_filename(filename)[1]
        stem = filename.removesuffix(".tar.gz").removesuffix(".zip")
        return Version(stem.rsplit("-", 1)[1])
    except (InvalidWheelFilename, InvalidVersion, IndexError):
        return None


class NoWheel(InputError):
    """The release is on the index but has no wheel for the stack's Python: a verdict on that version (a bump to it
    would break the stack), not a failure to read the index."""


def file_size(project: str, filename: str) -> int | None:
    """The size the index's JSON simple API gives for one file of a project (None when it gives none)."""
    size = next((f.get("size") for f in index_files(project) if f["filename"] == filename), None)
    return size if isinstance(size, int) else None


def wheel_pythons(project: str, version: str) -> list[str]:
    """The interpreter tags (cp311, py3, …) of the release's wheels on the index, sorted; [] when it has none."""
    found = set()
    for item in index_files(project):
        try:
            _, wheel_version, _, wheel_tags = parse_wheel_filename(item["filename"])
        except (InvalidWheelFilename, InvalidVersion):
            continue
        if wheel_version == Version(version):
            found |= {t.interpreter for t in wheel_tags}
    return sorted(found)


def read_metadata(distribution: str, version: str, python: str) -> dict[str, Any]:
    """A release's core metadata from the index (pip resolves and downloads nothing but the metadata)."""
    metadata: dict[str, Any] = install_report(distribution, version, python, PLATFORMS)["metadata"]
    return metadata


def install_report(distribution: str, version: str, python: str, wheel_tags: tuple[str, ...]) -> dict[str, Any]:
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
