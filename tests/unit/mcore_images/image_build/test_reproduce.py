"""reproduce: which tags a rebuild makes (and removes), where two images first differ, the build's epoch."""

from __future__ import annotations

import os
import py_compile
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mcore_images.errors import InputError
from mcore_images.image_build import bake, reproduce
from tests.unit.conftest import ROOT


def _image(layers: list[str], steps: list[str] | None = None, digest: str = "sha256:" + "a" * 64) -> reproduce.Image:
    return reproduce.Image("x", digest, {}, layers, steps or [f"step {i}" for i in range(len(layers))])


def test_rebuild_tags_are_its_own_one_per_layer() -> None:
    assert reproduce.built_tags("reproduce-0123456789ab", "debian", "runtime") == [
        "mcore-images:reproduce-0123456789ab-base-debian",
        "mcore-images:reproduce-0123456789ab-kernels-debian",
        "mcore-images:reproduce-0123456789ab-runtime-debian",
    ]


def test_first_difference_names_the_bottom_most_layer_and_its_step() -> None:
    original = _image(["sha256:1", "sha256:2", "sha256:3"])
    rebuilt = _image(["sha256:1", "sha256:x", "sha256:y"], ["from", "RUN install-lock.sh", "COPY"])
    assert reproduce.first_difference(original, rebuilt) == {
        "layer": 1, "original": "sha256:2", "rebuilt": "sha256:x", "step": "RUN install-lock.sh"}


def test_first_difference_of_a_missing_layer_and_of_equal_layers() -> None:
    assert reproduce.first_difference(_image(["sha256:1"]), _image(["sha256:1", "sha256:2"]))["layer"] == 1
    assert reproduce.first_difference(_image(["sha256:1"]), _image(["sha256:1"], digest="sha256:" + "b" * 64)) is None


def test_an_image_without_the_labels_is_refused_with_the_fix() -> None:
    with pytest.raises(InputError, match=r"org\.opencontainers\.image\.revision label"):
        _image([]).label(reproduce.REVISION)


def test_a_commit_the_checkout_lacks_is_refused(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path / "repo")], check=True)
    with pytest.raises(InputError, match="has no commit 0123456789ab"):
        reproduce.clone(tmp_path / "repo", "0123456789ab" * 3 + "0123", tmp_path / "clone")
    assert not (tmp_path / "clone").exists()


def test_bake_dates_the_images_by_the_commit(monkeypatch: pytest.MonkeyPatch) -> None:
    """BuildKit takes SOURCE_DATE_EPOCH for the config's dates: the commit's time, unless given."""
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    epoch = subprocess.run(["git", "log", "-1", "--format=%ct"], capture_output=True, text=True, check=True,
                           cwd=ROOT).stdout.strip()
    assert bake.bake_env(bake.BuildRequest())["SOURCE_DATE_EPOCH"] == epoch
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    assert bake.bake_env(bake.BuildRequest())["SOURCE_DATE_EPOCH"] == "1700000000"


def test_local_tags_exclude_pushing_and_overrides() -> None:
    with pytest.raises(InputError, match=r"drop --candidate and --set"):
        bake.BuildRequest(stack="debian", local_tag="r", sets=("mcore=0.16.0",)).validate()
    with pytest.raises(InputError, match=r"not a tag.s beginning"):
        bake.BuildRequest(stack="debian", local_tag="a b").validate()


def _listing(root: Path) -> list[str]:
    """What MANIFEST prints for a folder (the same program the comparison runs in the image)."""
    done = subprocess.run([sys.executable, "-c", reproduce.MANIFEST, str(root)], capture_output=True, text=True,
                          check=True)
    return done.stdout.splitlines()


def _installed(root: Path, source: str, mtime: int) -> Path:
    """A module written at ``mtime`` and compiled as pip compiles it (timestamp-based .pyc)."""
    package = root / "site-packages" / "pkg"
    package.mkdir(parents=True)
    module = package / "mod.py"
    module.write_text(source)
    os.utime(module, (mtime, mtime))
    py_compile.compile(str(module), cfile=str(package / "mod.cpython.pyc"), doraise=True,
                       invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
    return root


def test_a_step_run_again_matches_by_content_though_its_pyc_files_hold_other_source_times(tmp_path: Path) -> None:
    root = tmp_path / "image"  # one path, as in both images (a .pyc holds its source's path too)
    first = _listing(_installed(root, "X = 1\n", 1_700_000_000))
    before = (root / "site-packages/pkg/mod.cpython.pyc").read_bytes()
    shutil.rmtree(root)
    again = _listing(_installed(root, "X = 1\n", 1_800_000_000))
    assert (root / "site-packages/pkg/mod.cpython.pyc").read_bytes() != before
    assert first == again and any(line.startswith('["/site-packages/pkg/mod.cpython.pyc"') for line in first)


def test_a_pyc_of_other_code_or_a_changed_source_differs(tmp_path: Path) -> None:
    root = tmp_path / "image"
    first = _listing(_installed(root, "X = 1\n", 1_700_000_000))
    shutil.rmtree(root)
    other = _listing(_installed(root, "X = 2\n", 1_700_000_000))
    changed = {line.split('"')[1] for line in set(first) ^ set(other)}
    assert changed == {"/site-packages/pkg/mod.py", "/site-packages/pkg/mod.cpython.pyc"}
