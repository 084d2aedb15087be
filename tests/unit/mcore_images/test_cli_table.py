"""The command table (cli.py): `--help` lists the commands by who uses them, each with a sentence for users, and a
command line imports the module of the command it runs, not the whole tool."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mcore_images import cli
from mcore_images.command import Command
from tests.unit.conftest import ROOT

LOADED = """
import json, sys
from mcore_images import cli
try:
    cli.main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted(m for m in sys.modules if m.startswith("mcore_images."))), file=sys.stderr)
"""
"""Runs a command line in a fresh interpreter; its last stderr line lists the tool's modules it imported."""

ALONE = """
import importlib, json, sys
importlib.import_module("mcore_images.cli")
importlib.import_module(sys.argv[1])
print(json.dumps(sorted(m for m in sys.modules if m.startswith("mcore_images."))))
"""
"""The tool's modules that importing one module (and the table) brings."""


def python(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, check=False,
                          cwd=ROOT, timeout=120)


@pytest.mark.parametrize("argv", [["tags", "--stack", "debian", "--layer", "runtime"], ["doctor", "--list"],
                                  ["run", "--help"], ["plan", "--format", "names"], ["verify", "--help"],
                                  ["from-make", "--help"], ["certify", "--help"]])
def test_a_command_line_imports_its_commands_module_and_no_other(argv: list[str]) -> None:
    """Before: cli.py imported all 22 modules that declare commands at start, so `tags` loaded the doctor, the
    release code and the report too."""
    ran = python(LOADED, *argv)
    loaded = set(json.loads(ran.stderr.strip().splitlines()[-1]))
    alone = python(ALONE, cli.ENTRIES[argv[0]].module)
    expected = set(json.loads(alone.stdout))
    assert loaded <= expected, sorted(loaded - expected)
    others = {entry.module for entry in cli.ENTRIES.values()} - expected
    assert not loaded & others


def test_help_lists_every_command_once_under_its_group(capsys: pytest.CaptureFixture) -> None:
    """Before: 26 commands in one flat list, the Makefile's and the workflows' own among a user's."""
    assert cli.main(["--help"]) == 0
    text = capsys.readouterr().out
    titles = [title for title, _ in cli.GROUPS]
    assert [t for t in titles if f"\n{t}:\n" in text] == titles
    assert [title.split()[0] for title in titles] == ["use", "build", "release", "internal"]
    starts = [text.index(f"\n{t}:\n") for t in titles] + [len(text)]
    for (_, entries), start, stop in zip(cli.GROUPS, starts, starts[1:], strict=False):
        section = text[start:stop]
        for entry in entries:
            assert f"\n  {entry.name} " in section, entry.name
    assert sorted(cli.ENTRIES) == sorted(c.name for c in cli.commands())
    assert {"from-make", "matrix", "index", "build-timing"} == {e.name for e in cli.GROUPS[-1][1]}


@pytest.mark.parametrize("command", cli.commands(), ids=lambda c: c.name)
def test_each_commands_help_is_a_sentence_for_users(command: Command) -> None:
    """One sentence, capitalised and ended, short enough for the listing; a description of its own, never the
    module's docstring (before: `doctor --help` began "`mcore-images doctor`: the command: its options…")."""
    said = command.help
    assert said[0].isupper() and said.endswith(".") and said.count(". ") == 0 and len(said) <= 100, said
    description = command.description or said
    assert not description.startswith("`mcore-images"), description
