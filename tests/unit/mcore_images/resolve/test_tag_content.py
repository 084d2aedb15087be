"""One content tag, one content: stacks that tag a layer alike must build it from the same locks."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mcore_images import cli
from mcore_images.catalogue.stacks import load_stacks
from mcore_images.resolve import lock_check, lock_files, plan, tag_content
from tests.unit.conftest import ROOT

TWIN = "cuda-twin"
"""A stack that tags one base image with `cuda` (the same pins; another constraint, which tags do not name), its
base lock a copy of cuda's, as `lock --base-from cuda` writes it, and its other layers resolved as its own."""


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copytree(ROOT / "env", tmp_path / "env")
    path = tmp_path / "env" / "stacks.json"
    doc = json.loads(path.read_text())
    entries = doc["stacks"]
    cuda = next(e for e in entries if e["name"] == "cuda")
    entries.append({**cuda, "name": TWIN, "constraints": [*cuda["constraints"], "numpy<3"]})
    path.write_text(json.dumps(doc))
    monkeypatch.setenv("MCORE_IMAGES_ROOT", str(tmp_path))
    stacks = load_stacks()
    for machine, locks in (("x86_64", tmp_path / "env" / "locks"), ("aarch64", tmp_path / "env" / "locks" / "aarch64")):
        (locks / TWIN).mkdir()
        for lock in sorted((locks / "cuda").glob("*.txt")):
            text = lock.read_text()
            if lock.name != "base.txt":  # a layer of its own, resolved for its constraints; the base is cuda's copy
                text = (text.replace("stack 'cuda'", f"stack '{TWIN}'", 1).replace("--stack cuda`", f"--stack {TWIN}`")
                        .replace(lock_files.resolution_line(stacks["cuda"], machine),
                                 lock_files.resolution_line(stacks[TWIN], machine), 1))
            (locks / TWIN / lock.name).write_text(text)
    return tmp_path


def tag_content_lines() -> list[str]:
    return [str(v) for p in plan.make_plan(list(load_stacks().values())) for v in p.violations
            if v.rule == tag_content.RULE]


def test_the_committed_stacks_give_each_content_tag_one_content(checkout: Path) -> None:
    assert tag_content_lines() == []


def test_a_base_locked_on_another_day_under_the_same_tag_is_refused_with_its_fix(checkout: Path) -> None:
    path = checkout / "env" / "locks" / TWIN / "base.txt"
    text = path.read_text()
    version = lock_files.pins(text)["filelock"]
    path.write_text(text.replace(f"filelock=={version}", "filelock==0.0.1"))
    lines = tag_content_lines()
    assert any(line.startswith(f"[tag-content] stack '{TWIN}': its base tag base-torch2.11.0-cu13.0-py3.12-")
               and f"is also stack 'cuda''s, from other content (filelock (base) 0.0.1 vs {version})" in line
               and f"`mcore-images lock --stack {TWIN} --base-from cuda`" in line for line in lines), lines
    assert "\n" not in "".join(lines)


def test_a_copied_base_stays_current_only_while_it_equals_its_source(checkout: Path) -> None:
    stacks = load_stacks()
    copy = (checkout / "env" / "locks" / TWIN / "base.txt").read_text()
    assert lock_files.base_lock_source(stacks[TWIN], copy) == stacks["cuda"]
    assert lock_check.check_locks(stacks[TWIN]) == []
    source = checkout / "env" / "locks" / "cuda" / "base.txt"
    source.write_text(source.read_text() + "\n")  # the source moved on: the copy is its own, stale lock now
    assert lock_files.base_lock_source(stacks[TWIN], copy) is None
    assert any("was not resolved for" in p for p in lock_check.check_locks(stacks[TWIN]))


@pytest.mark.parametrize(("args", "message"), [
    (["lock", "--base-from", "cuda"], "--base-from needs --stack"),
    (["lock", "--stack", TWIN, "--base-from", "debian"], "only stacks that tag one base image share"),
    (["lock", "--stack", "debian-mcore019", "--base-from", "debian"], "must build its own base"),
])
def test_base_from_refuses_what_cannot_share_a_base(args: list[str], message: str, checkout: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
