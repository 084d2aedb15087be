"""The one module that writes ``docker`` into a command line: every docker command the tool runs, or hands to
another runner (bake's stream, the certificate's `docker run`, a followed pull), is made by ``argv`` here and started
through tools.run/tools.popen, so a missing Docker is the one line tools.INSTALL gives, and a test finds every docker
call by what it fakes. tests/unit/mcore_images/test_docker_cli.py fails on a docker command made anywhere else.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from typing import Any

from mcore_images import progress, tools

PROGRAM = "docker"

Runner = Callable[..., subprocess.CompletedProcess]


def argv(*args: str) -> list[str]:
    """The command line of ``docker ARGS…``."""
    return [PROGRAM, *args]


def run(*args: str, runner: Runner = tools.run, **kwargs: Any) -> subprocess.CompletedProcess:
    """``docker ARGS…`` through ``runner`` (tools.run, or a test's), with subprocess.run's keywords."""
    return runner(argv(*args), **kwargs)


def follow(*args: str, reader: progress.Reader, **kwargs: Any) -> progress.Followed:
    """``docker ARGS…`` with its output given to ``reader`` line by line as it comes (progress.follow)."""
    return progress.follow(argv(*args), reader, **kwargs)
