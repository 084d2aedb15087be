"""`lock` judges a stack's rules before it resolves or writes anything; an override's pin is a version in its normal
form, and the locks hold its release when they hold it under another spelling. Before: an override pinned as
`==v0.6.12` or `==0.6.12.0` made `lock` write four files and exit 0, while `lock --check` and `build` refused it and
named `lock` as the fix, round and round."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from mcore_images import cli
from mcore_images.catalogue.stacks import Override, Stack
from mcore_images.resolve import declared_overrides, rules
from tests.unit.conftest import ROOT, variant


def with_overrides(stacks: dict[str, Stack]) -> Stack:
    return next(s for s in stacks.values() if s.overrides)


@pytest.mark.parametrize(("written", "normal"), [("v0.6.12", "0.6.12"), ("1.0RC1", "1.0rc1"), ("0.6.012", "0.6.12")])
def test_an_override_pin_not_in_the_form_the_locks_write_breaks_its_rule(stacks: dict[str, Stack], written: str,
                                                                         normal: str) -> None:
    stack = with_overrides(stacks)
    first = stack.overrides[0]
    name = first.pin.rsplit("==", 1)[0]
    bent = variant(stack, overrides=(Override(f"{name}=={written}", first.over, first.why), *stack.overrides[1:]))
    found = [v for v in rules.check(bent) if v.rule == "overrides"]
    assert [(v.message, v.fix) for v in found] == [
        (f"override {name}=={written} writes its version as {written!r}, which the locks write as {normal}",
         f"write {name}=={normal}")]
    assert not [v for v in rules.check(stack) if v.rule == "overrides"]


def test_an_override_pin_that_is_no_version_breaks_its_rule(stacks: dict[str, Stack]) -> None:
    stack = with_overrides(stacks)
    first = stack.overrides[0]
    bent = variant(stack, overrides=(Override(f"{first.name}==1.0.*", first.over, first.why),))
    assert any("pins '1.0.*', which is not a version" in v.message for v in rules.check(bent))


def test_a_lock_holds_the_release_an_override_names_under_another_spelling(stacks: dict[str, Stack]) -> None:
    """`==0.6.12.0` is the normal form of a version equal to 0.6.12, the release the locks write: not stale."""
    stack = with_overrides(stacks)
    first = stack.overrides[0]
    pinned = variant(stack, overrides=(Override(f"{first.pin.rsplit('==', 1)[0]}==0.6.12.0", first.over, first.why),))
    held = {"base": {first.name: "0.6.12"}}
    texts = {"base": declared_overrides.header_lines(pinned, [first.name])}
    assert declared_overrides.problems(pinned, held, texts) == {}
    assert declared_overrides.problems(pinned, {"base": {first.name: "0.6.13"}}, texts) == {
        "base": [f"it pins {first.name} 0.6.13, the stack's override {pinned.overrides[0].pin}"]}


def tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("written", ["v0.6.12", "0.6.012"])
@pytest.mark.parametrize("check", [False, True])
def test_lock_refuses_a_stack_whose_rules_fail_before_writing_anything(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, stacks: dict[str, Stack],
        written: str, check: bool) -> None:
    shutil.copytree(ROOT / "env", tmp_path / "env")
    name = with_overrides(stacks).name
    path = tmp_path / "env" / "stacks.json"
    doc = json.loads(path.read_text())
    entry = next(e for e in doc["stacks"] if e["name"] == name)
    pin = entry["overrides"][0]["pin"]
    entry["overrides"][0]["pin"] = f"{pin.rsplit('==', 1)[0]}=={written}"
    path.write_text(json.dumps(doc, indent=2) + "\n")
    monkeypatch.setenv("MCORE_IMAGES_ROOT", str(tmp_path))
    before = tree(tmp_path / "env")
    code = cli.main(["lock", "--stack", name, *(["--check"] if check else [])])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert f"[overrides] stack '{name}': override " in err and f"fix: write {pin}; nothing was written" in err, err
    assert tree(tmp_path / "env") == before
