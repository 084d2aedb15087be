"""One content tag, one content: stacks that tag a layer alike must build it from the same locks."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mcore_images import cli
from mcore_images.catalogue.stacks import load_stacks
from mcore_images.resolve import lock_check, lock_files, plan, tag_content
from tests.unit.conftest import ROOT


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copytree(ROOT / "env", tmp_path / "env")
    monkeypatch.setenv("MCORE_IMAGES_ROOT", str(tmp_path))
    return tmp_path


def tag_content_lines() -> list[str]:
    return [str(v) for p in plan.make_plan(list(load_stacks().values())) for v in p.violations
            if v.rule == tag_content.RULE]


def test_the_committed_stacks_give_each_content_tag_one_content(checkout: Path) -> None:
    assert tag_content_lines() == []


def test_a_base_locked_on_another_day_under_the_same_tag_is_refused_with_its_fix(checkout: Path) -> None:
    path = checkout / "env" / "locks" / "cuda-mcore014" / "base.txt"
    text = path.read_text()
    version = lock_files.pins(text)["filelock"]
    path.write_text(text.replace(f"filelock=={version}", "filelock==0.0.1"))
    lines = tag_content_lines()
    assert any(line.startswith("[tag-content] stack 'cuda-mcore014': its base tag base-torch2.11.0-cu13.0-py3.12-")
               and f"is also stack 'cuda''s, from other content (filelock (base) 0.0.1 vs {version})" in line
               and "`mcore-images lock --stack cuda-mcore014 --base-from cuda`" in line for line in lines), lines
    assert "\n" not in "".join(lines)


def test_a_copied_base_stays_current_only_while_it_equals_its_source(checkout: Path) -> None:
    stacks = load_stacks()
    copy = (checkout / "env" / "locks" / "cuda-mcore014" / "base.txt").read_text()
    assert lock_files.base_lock_source(stacks["cuda-mcore014"], copy) == stacks["cuda"]
    assert lock_check.check_locks(stacks["cuda-mcore014"]) == []
    source = checkout / "env" / "locks" / "cuda" / "base.txt"
    source.write_text(source.read_text() + "\n")  # the source moved on: the copy is its own, stale lock now
    assert lock_files.base_lock_source(stacks["cuda-mcore014"], copy) is None
    assert any("was not resolved for" in p for p in lock_check.check_locks(stacks["cuda-mcore014"]))


@pytest.mark.parametrize(("args", "message"), [
    (["lock", "--base-from", "cuda"], "--base-from needs --stack"),
    (["lock", "--stack", "cuda-mcore014", "--base-from", "debian"], "only stacks that tag one base image share"),
    (["lock", "--stack", "debian-mcore019", "--base-from", "debian"], "must build its own base"),
])
def test_base_from_refuses_what_cannot_share_a_base(args: list[str], message: str, checkout: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
