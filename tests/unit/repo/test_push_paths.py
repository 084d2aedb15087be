"""No path to a public tag without a passing, signed certificate: every make target and every command that
can push is walked, and only candidate tags (`build --candidate`) and `promote` (after its verdict) write
to a registry."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

from mcore_images import cli
from tests.unit.conftest import ROOT
from tests.unit.repo.make_dry import VALUES, dry_run, make_targets, tool_argvs

PUSHES = re.compile(r"--push\b|docker push|imagetools create|oras (tag|push|cp|attach)|skopeo copy|crane ")


def test_the_walk_sees_every_target() -> None:
    targets = make_targets()
    assert {"build", "push-candidates", "release-local", "promote", "ci"} <= set(targets), targets


@pytest.mark.parametrize("target", make_targets())
def test_no_make_target_pushes_anything_but_candidate_tags(target: str) -> None:
    for line in dry_run(target, VALUES):
        if PUSHES.search(line):
            pytest.fail(f"make {target} pushes: {line}")
        for argv in tool_argvs(line, VALUES):
            if argv[0] == "build" and "--registry" in argv:
                assert "--candidate" in argv, f"make {target} builds for a registry without --candidate: {argv}"
    script = ROOT / ".ci" / "release-local.sh"
    if target == "release-local":
        body = script.read_text()
        assert not PUSHES.search(body.replace("--candidate", "")), "release-local pushes outside build/promote"
        assert body.index("mcore attach") < body.index("mcore promote") < body.index("docker pull \"$REGISTRY")


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
    source = (ROOT / "src" / "mcore_images" / "release" / "promote.py").read_text()
    body = source[source.index("def _promote("):]
    assert body.index("plan(") < body.index("execute(promotion")


@pytest.mark.parametrize("passthrough", [
    ["--push"], ["--push=true"], ["--output", "type=registry"], ["--output=type=image,push=true"],
    ["--set", "*.output=type=image,push=true"], ["--set=*.output=type=registry"], ["--set", "runtime-debian.push=true"],
    ["--set", "*.tags=registry.example/acme/mcore-images:runtime-debian"],
    ["--set", "*.cache-to=type=registry,ref=r/c"],
    ["--set", "*.args.MCORE_VERSION=0.20.0"], ["-f", "other.hcl"], ["--file=other.hcl"], ["release"],
    ["--allow", "fs=*"], ["--call", "outline"], ["--sbom=true"], ["--provenance", "mode=max"],
    ["--metadata-file", "m.json"], ["--progress", "plain; true"], ["--set"]])
def test_build_refuses_every_bake_argument_it_did_not_ask_for(passthrough: list[str],
                                                               capsys: pytest.CaptureFixture) -> None:
    """Before: a string match caught only `--push`, `push=true` and `type=registry`; `--output=type=image,push=true`,
    a `tags` override, another bake file or a group name went through to bake."""
    assert cli.main(["build", "--group", "release", "--dry-run", "--", *passthrough]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "allowed after --" in err[0], err


@pytest.mark.parametrize("passthrough", [["--no-cache"], ["--pull"], ["--progress", "tty"], ["--progress=plain"],
                                         ["--set", "kernels-cuda.contexts.apex=/src/apex"],
                                         ["--set=*.cache-from=type=local,src=/cache"], ["--builder", "ci", "--load"]])
def test_build_lets_through_what_changes_only_how_it_builds(passthrough: list[str],
                                                             capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["build", "--stack", "debian", "--dry-run", "--", *passthrough]) == 0
    assert " ".join(passthrough) in capsys.readouterr().out


def test_every_command_that_writes_to_a_registry_is_known() -> None:
    """A new command that pushes must be added here, with the gate that makes it safe."""
    gated = {"build": "--candidate pushes candidate-<sha>-<target> tags only",
             "attach": "writes a referrer and its signature onto a digest, never a tag of the image",
             "promote": "moves tags after verify.check passes",
             "ledger": "rewrites the release ledger (its own tags mcore-images-ledger and -N, signed), no image tag"}
    writers = set()
    for command in cli.commands():
        module = sys.modules[command.run.__module__]
        text = Path(module.__file__ or "").read_text()
        if re.search(r"registry\.(retag|attach|sign)\(|--push", text):
            writers.add(command.name)
    assert writers <= set(gated), writers - set(gated)
