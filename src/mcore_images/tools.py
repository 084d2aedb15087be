"""The one door to the programs the tool starts (docker, oras, cosign, uv, debootstrap, skopeo, git, tar): each
is found on PATH before it is started, and one that is missing is one line naming how to install it (exit 2), the
same line wherever it is called from, never a FileNotFoundError traceback.

``run`` and ``popen`` are subprocess.run and subprocess.Popen with that check first; code that lets a test give it
another runner takes ``tools.run`` as its default. ``require`` alone is for a program handed to another one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from typing import Any

from mcore_images.errors import InputError

REGISTRY_TOOLS = ("install oras and cosign (Debian 13: `apt-get install oras cosign`; elsewhere their release binaries "
                  "from oras.land and github.com/sigstore/cosign)")
INSTALL: dict[str, str] = {
    "docker": "install Docker Engine with buildx: `make docker-engine` (.ci/docker-engine.sh) on a Debian host, "
              "elsewhere docs.docker.com/engine/install",
    "oras": REGISTRY_TOOLS,
    "cosign": REGISTRY_TOOLS,
    "uv": "install it with `pip install uv` (or `pip install -e .[lock]`)",
    "debootstrap": "`apt-get install debootstrap` (or run .ci/docker-engine.sh)",
    "skopeo": "`apt-get install skopeo`",
    "git": "`apt-get install git`",
    "tar": "`apt-get install tar`",
}
"""Each program the tool starts, and how a machine gets it (the second half of the line a missing one gives)."""


def missing(name: str) -> str:
    """The one line a missing program gives: it is not there, and how to install it."""
    return f"{name} is not installed or not on PATH: {INSTALL.get(name, 'check PATH')}"


def require(name: str) -> str:
    """The path of program ``name`` on PATH; InputError, one line naming how to install it, where it is missing. A
    program named by its path (this Python, ``sys.executable``) is taken as it is."""
    if os.path.isabs(name):
        if not os.access(name, os.X_OK):
            raise InputError(f"{name} is not an executable file: check the installation")
        return name
    if name not in INSTALL:
        raise KeyError(f"{name!r} is not a program the tool starts: add it to tools.INSTALL with how to install it")
    found = shutil.which(name)
    if found is None:
        raise InputError(missing(name))
    return found


def run(argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess:
    """subprocess.run of ``argv`` (its program by name, as the caller wrote it), the program required first."""
    require(argv[0])
    try:
        return subprocess.run(list(argv), **kwargs)  # the caller says check=
    except FileNotFoundError:  # removed between the look and the start
        raise InputError(missing(argv[0])) from None


def popen(argv: Sequence[str], **kwargs: Any) -> subprocess.Popen:
    """subprocess.Popen of ``argv``, the program required first."""
    require(argv[0])
    try:
        return subprocess.Popen(list(argv), **kwargs)
    except FileNotFoundError:
        raise InputError(missing(argv[0])) from None
