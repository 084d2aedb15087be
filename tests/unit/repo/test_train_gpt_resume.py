"""examples/train-gpt's --load, without an image: which checkpoint a folder names, and that a folder holding none yet
starts the job from step 0 (its README's launch lines pass `--save DIR --load DIR` from the first run on), while a
folder with files but no checkpoint stops it. tests/example runs the README's line itself in an image."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from tests.unit.repo import train_gpt_script


@pytest.fixture(scope="module")
def train() -> ModuleType:
    return train_gpt_script.load()


def saved(folder: Path, step: int) -> Path:
    """What the job's save leaves: iter_<step>/ with train_state.json, and latest naming it."""
    named = folder / f"iter_{step:07d}"
    named.mkdir(parents=True)
    (named / "train_state.json").write_text(json.dumps({"step": step, "seed": 1}))
    (folder / "latest").write_text(named.name)
    return named


def test_a_missing_or_empty_folder_holds_no_checkpoint_yet(train: ModuleType, tmp_path: Path) -> None:
    """Before: "/out/ckpt has no train_state.json" on the first run of every README launch line."""
    assert train.to_load(tmp_path / "ckpt") is None
    (tmp_path / "ckpt").mkdir()
    assert train.to_load(tmp_path / "ckpt") is None
    (tmp_path / "ckpt" / "writer.lock").write_text("{}")  # the job's own lock, taken before the load
    (tmp_path / "ckpt" / ".write-test-x1y2").write_bytes(b"\0")  # another rank's write probe
    assert train.to_load(tmp_path / "ckpt") is None


def test_latest_names_the_checkpoint_and_a_checkpoint_folder_names_itself(train: ModuleType, tmp_path: Path) -> None:
    saved(tmp_path, 4)
    newest = saved(tmp_path, 8)
    assert train.to_load(tmp_path) == newest
    assert train.to_load(newest) == newest


@pytest.mark.parametrize(("left", "said"), [
    ("iter_0000004", "--load {f} holds iter_0000004 but no complete checkpoint (no latest): pass the --save folder of "
                     "an earlier run, or an empty folder to start from step 0"),
    ("notes.txt", "--load {f} holds notes.txt but no complete checkpoint (no latest)"),
])
def test_files_without_a_checkpoint_stop_the_job(train: ModuleType, tmp_path: Path, left: str, said: str) -> None:
    """A first save that never completed (its folder, no latest), or another program's files: not trained over."""
    if "." in left:
        (tmp_path / left).write_text("x")
    else:
        (tmp_path / left).mkdir()
    with pytest.raises(train.NothingToResume) as caught:
        train.to_load(tmp_path)
    assert str(caught.value).startswith(said.format(f=tmp_path))


def test_latest_naming_a_folder_without_train_state_stops_the_job(train: ModuleType, tmp_path: Path) -> None:
    (tmp_path / "iter_0000004").mkdir()
    (tmp_path / "latest").write_text("iter_0000004")
    with pytest.raises(train.NothingToResume, match=r"iter_0000004 has no train_state\.json: not a checkpoint"):
        train.to_load(tmp_path)
