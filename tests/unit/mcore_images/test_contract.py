"""The CLI contract (command.py) for every command, and every bad input a user met: one line naming the fix,
exit 2, before anything runs."""

from __future__ import annotations

import argparse
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mcore_images import cli
from mcore_images.image_build import bake
from tests.unit.conftest import ROOT


def options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if not isinstance(a, argparse._HelpAction | argparse._SubParsersAction)]


def subparsers() -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in cli.parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_command_is_declared_once() -> None:
    names = [c.name for c in cli.commands()]
    assert len(names) == len(set(names)) and set(names) == set(subparsers())


@pytest.mark.parametrize("name", sorted(subparsers()))
def test_every_option_has_help(name: str) -> None:
    missing = [a.dest for a in options(subparsers()[name]) if not a.help]
    assert not missing, f"`mcore-images {name}`: options without help: {missing}"


def test_every_command_that_prints_data_takes_json() -> None:
    for command in cli.commands():
        flags = {s for a in options(subparsers()[command.name]) for s in a.option_strings}
        assert ("--json" in flags) == command.prints_data, command.name


SHOW_ONLY = {"--dry-run", "--execute", "--print", "--no-execute", "--show", "--plan-only", "--noop", "-n"}
"""Spellings of "show, do nothing" (or of its opposite) a command might grow."""


def test_show_do_nothing_has_one_spelling_and_promote_alone_needs_execute() -> None:
    # --dry-run everywhere; promote, the one command that moves public tags, shows by default and acts with
    # --execute; run's --print prints the docker command it would run. README says so once.
    spelt = {name: {s for a in options(p) for s in a.option_strings} & SHOW_ONLY for name, p in subparsers().items()}
    assert {name for name, flags in spelt.items() if "--execute" in flags} == {"promote"}
    assert {name for name, flags in spelt.items() if "--print" in flags} == {"run", "from-make"}
    others = {name: flags for name, flags in spelt.items() if name not in ("promote", "run", "from-make")}
    assert all(flags <= {"--dry-run"} for flags in others.values()), others
    assert {name for name, flags in spelt.items() if "--dry-run" in flags} >= {"build", "outdated"}
    readme = (ROOT / "README.md").read_text()
    assert readme.count("## What every command keeps to") == 1
    said = readme.split("## What every command keeps to", 1)[1].split("\n## ", 1)[0]
    assert "`--dry-run`" in said and "`--execute`" in said and "`run --print`" in said


# ---------------------------------------------------------------------------------------------
# Bad inputs, each through the real CLI against a checkout whose env/stacks.json it changes.


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[Callable[[dict], None]], Path]:
    """A copy of env/ (stacks, schema, locks) whose debian stack ``change`` edits; MCORE_IMAGES_ROOT points at it."""

    def make(change: Callable[[dict[str, Any]], None]) -> Path:
        shutil.copytree(ROOT / "env", tmp_path / "env")
        path = tmp_path / "env" / "stacks.json"
        doc = json.loads(path.read_text())
        change(next(e for e in doc["stacks"] if e["name"] == "debian"))
        path.write_text(json.dumps(doc))
        monkeypatch.setenv("MCORE_IMAGES_ROOT", str(tmp_path))
        return tmp_path

    return make


def one_line(capsys: pytest.CaptureFixture, code: int) -> str:
    captured = capsys.readouterr()
    assert code == 2, captured.out + captured.err
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    return lines[0]


@pytest.mark.parametrize(("change", "needle"), [
    (lambda e: e.update(torch="latest"), "torch='latest' is not a version"),
    (lambda e: e.update(groups="default"), "field groups: 'default' is not of type 'array'"),
    (lambda e: e["size_budget_gb"].update(base=-1), "field size_budget_gb.base: -1 is less than or equal to"),
    (lambda e: e.update(flavor="alpine"), "field flavor: 'alpine' is not one of"),
    (lambda e: e.update(base_digest="sha256:1234"), "field base_digest"),
    (lambda e: e.update(cuda_archs="sm_90"), "field cuda_archs"),
    (lambda e: e.update(apex="master"), "apex='master' is not a commit"),
    (lambda e: e.update(python="3"), "python='3' is not MAJOR.MINOR"),
    (lambda e: e.update(constraints=["transformers<<5"]), "is not a requirement specifier"),
    (lambda e: e.pop("verl"), "no pin for verl"),
    (lambda e: e.update(ring_attn="0.1.8"), "unknown field(s) ring_attn"),
])
def test_a_bad_stacks_file_is_one_line(checkout: Callable, capsys: pytest.CaptureFixture, change: Callable,
                                       needle: str) -> None:
    checkout(change)
    line = one_line(capsys, cli.main(["plan"]))
    assert needle in line and "stack 'debian'" in line, line


@pytest.fixture
def no_docker(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Every subprocess a build would start is recorded instead (none may start for a bad input)."""
    started: list[list[str]] = []
    monkeypatch.setattr(bake.subprocess, "run", lambda cmd, **kw: started.append(cmd))
    return started


@pytest.mark.parametrize(("argv", "needle"), [
    (["build", "--stack", "debian", "--set", "mcore=notaversion"], "mcore='notaversion' is not a version"),
    (["build", "--stack", "debian", "--set", "apex=main"], "apex='main' is not a commit"),
    (["build", "--layer", "runtime"], "--layer runtime picks a layer of one stack; add --stack"),
    (["build", "--group", "ci", "--set", "mcore=0.16.0"], "add --stack"),
    (["build", "--max-jobs", "0"], "MAX_JOBS=0 is invalid"),
    (["build", "--nvcc-threads", "x"], "NVCC_THREADS='x' is not a number"),
    (["build", "--stack", "debian", "--layer", "app"], "has no layer 'app'"),
    (["tags", "--stack", "debian", "--candidate", "X"], "--candidate 'X' is not a git commit"),
    (["plan", "--stack", "nope"], "unknown stack 'nope'"),
    (["plan", "--bogus"], "unrecognized arguments: --bogus"),
    (["plan", "--", "x"], "takes no arguments after --"),
])
def test_bad_command_line_is_one_line_and_starts_nothing(capsys: pytest.CaptureFixture, no_docker: list,
                                                         argv: list[str], needle: str) -> None:
    line = one_line(capsys, cli.main(argv))
    assert needle in line, line
    assert not no_docker


def test_lock_check_says_what_it_checked(capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["lock", "--check"]) == 0
    out = capsys.readouterr().out
    assert "debian: locks match env/stacks.json" in out and "ngc: locks match env/stacks.json" in out


def test_json_is_printed_through_print_json_only() -> None:
    """One output contract: every command prints its JSON through command.print_json (indented, or one line
    with compact=True), so the shape and flushing are the same everywhere. The smoke's programs, which run in the
    image on the standard library and the tooling's data modules alone, are not commands of the tool."""
    package = ROOT / "src" / "mcore_images"
    offenders = [f"{path.relative_to(ROOT)}:{n}" for path in sorted(package.rglob("*.py"))
                 if path.name != "command.py" and not path.is_relative_to(package / "smoke")
                 for n, line in enumerate(path.read_text().splitlines(), 1) if "print(json.dumps" in line]
    assert not offenders, f"print JSON with command.print_json: {offenders}"
