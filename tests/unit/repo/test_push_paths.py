"""No path to a public tag without a passing, signed certificate: every make target and every command that
can push is walked, and only candidate tags (`build --candidate`) and `promote` (after its verdict) write
to a registry."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mcore_images import cli
from tests.unit.conftest import ROOT

PUSHES = re.compile(r"--push\b|docker push|imagetools create|oras (tag|push|cp|attach)|skopeo copy|crane ")
VARIABLES = ["STACK=debian", "GROUP=release", "REGISTRY=registry.example/acme", "SHA=0123456789abcdef",
             "IMAGE=registry.example/acme/mcore-images@sha256:" + "0" * 64, "CERT=c.json", "LAYER=runtime"]


def make_targets() -> list[str]:
    out = subprocess.run(["make", "-s", "-C", str(ROOT), "help"], capture_output=True, text=True, check=True).stdout
    return [m.group(1) for line in out.splitlines() if (m := re.match(r"^\s+(?:\x1b\[\d+m)?([a-z][\w-]*)", line))]


def test_the_walk_sees_every_target() -> None:
    targets = make_targets()
    assert {"build", "push-candidates", "release-local", "promote", "ci"} <= set(targets), targets


@pytest.mark.parametrize("target", make_targets())
def test_no_make_target_pushes_anything_but_candidate_tags(target: str) -> None:
    env = {**os.environ, "MAKEFLAGS": ""}
    dry = subprocess.run(["make", "-n", "-C", str(ROOT), target, *VARIABLES], capture_output=True, text=True,
                         env=env, check=False)
    for line in dry.stdout.splitlines():
        if PUSHES.search(line):
            assert "--candidate" in line and "mcore_images build" in line, f"make {target} pushes: {line}"
    script = ROOT / ".ci" / "release-local.sh"
    if target == "release-local":
        body = script.read_text()
        assert not PUSHES.search(body.replace("--candidate", "")), "release-local pushes outside build/promote"
        assert body.index("mcore attach") < body.index("mcore promote") < body.index("docker pull -q \"$REGISTRY")


def test_only_promote_moves_tags_and_only_after_its_verdict() -> None:
    """registry.retag is called from promote.execute alone, which runs after plan(), and plan() raises on
    any refusal; the only other registry writes are attach (a referrer on a digest) and sign."""
    callers = {}
    for path in (ROOT / "src" / "mcore_images").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for func in ast.walk(tree):
            if isinstance(func, ast.FunctionDef):
                for node in ast.walk(func):
                    if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                            "retag", "execute") and path.name in ("promote.py", "registry.py"):
                        callers.setdefault(getattr(node.func, "attr", getattr(node.func, "id", "")), []).append(
                            f"{path.name}:{func.name}")
    assert callers["retag"] == ["promote.py:execute"], callers
    source = (ROOT / "src" / "mcore_images" / "promote.py").read_text()
    body = source[source.index("def _promote("):]
    assert body.index("plan(") < body.index("execute(promotion)")


@pytest.mark.parametrize("passthrough", [["--push"], ["--output", "type=registry"],
                                         ["--set", "*.output=type=image,push=true"]])
def test_build_refuses_to_push_public_tags(passthrough: list[str], capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["build", "--group", "release", "--", *passthrough]) == 2
    err = capsys.readouterr().err
    assert "would push public tags of uncertified images" in err and len(err.strip().splitlines()) == 1


def test_every_command_that_writes_to_a_registry_is_known() -> None:
    """A new command that pushes must be added here, with the gate that makes it safe."""
    gated = {"build": "--candidate pushes candidate-<sha>-<target> tags only",
             "attach": "writes a referrer and its signature onto a digest, never a tag of the image",
             "promote": "moves tags after verify.check passes"}
    writers = set()
    for command in cli.commands():
        module = sys.modules[command.run.__module__]
        text = Path(module.__file__ or "").read_text()
        if re.search(r"registry\.(retag|attach|sign)\(|--push", text):
            writers.add(command.name)
    assert writers <= set(gated), writers - set(gated)
