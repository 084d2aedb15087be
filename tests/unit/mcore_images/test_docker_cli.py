"""docker is started from one module, docker_cli.py: no other module writes a docker command line, as a list that
begins with "docker" or a shell line handed to a runner, so every docker call has one door (tools.run/popen, the
one missing-Docker line) and one place a reader finds them all."""

from __future__ import annotations

import ast
from pathlib import Path

from mcore_images import docker_cli
from tests.unit.conftest import ROOT

SRC = ROOT / "src" / "mcore_images"
RUNNERS = ("run", "popen", "Popen", "call", "check_call", "check_output", "follow", "system")
"""The last part of a call's name that starts a program (subprocess's, tools', progress's, os.system)."""


def docker_commands(source: str) -> list[int]:
    """The lines of ``source`` that write a docker command line: a list or tuple whose first item is "docker", or a
    string beginning "docker " given first to a runner."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.List | ast.Tuple) and node.elts:
            first = node.elts[0]
            if isinstance(first, ast.Constant) and first.value == docker_cli.PROGRAM:
                found.append(node.lineno)
        elif isinstance(node, ast.Call) and node.args and ast.unparse(node.func).rsplit(".", 1)[-1] in RUNNERS:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str) and first.value.startswith("docker "):
                found.append(node.lineno)
    return sorted(found)


def test_the_finder_sees_each_way_of_writing_a_docker_command() -> None:
    source = ('tools.run(["docker", "ps"])\nsubprocess.Popen(("docker", "pull", ref))\nos.system("docker ps")\n'
              'argv = ["docker", "run", image]\nprogress.follow(["python", "-c", "docker"], steps)\n'
              'tools.require("docker")\n')
    assert docker_commands(source) == [1, 2, 3, 4]


def test_docker_is_started_from_docker_cli_only() -> None:
    offenders = [f"{path.relative_to(ROOT)}:{line}" for path in sorted(SRC.rglob("*.py"))
                 if path != Path(docker_cli.__file__) for line in docker_commands(path.read_text())]
    assert not offenders, "make the command with mcore_images.docker_cli (argv or run): " + ", ".join(offenders)
