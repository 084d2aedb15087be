"""docker/cross-compiler.sh: the native cross compiler linked into an emulated builder's root, never over what is
there. Every run here gets a temporary root full of sentinel files, never the machine's own."""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "docker" / "cross-compiler.sh"
TRIPLET = f"{platform.machine()}-linux-gnu"
OTHER = "x86_64-linux-gnu" if platform.machine() != "x86_64" else "aarch64-linux-gnu"
"""The build machine's triplet in the fake toolchain: the one this (emulated) root does not use."""

FAKE_DRIVER = """#!/bin/sh
case "$1" in
  -dumpmachine) echo {triplet} ;;
  -dumpfullversion) echo 14.2.0 ;;
  *) for a in "$@"; do printf '%s\\n' "$a"; done ;;
esac
"""


def _toolchain(tmp_path: Path) -> Path:
    """A toolchain laid out as the cross-gxx stage is: drivers, the target folder, the build machine's libraries."""
    toolchain = tmp_path / "toolchain"
    for tool in ("g++", "gcc"):
        driver = toolchain / "usr" / "bin" / f"{TRIPLET}-{tool}"
        driver.parent.mkdir(parents=True, exist_ok=True)
        driver.write_text(FAKE_DRIVER.format(triplet=TRIPLET))
        driver.chmod(0o755)
    for folder in (f"usr/{TRIPLET}/lib", f"usr/lib/{OTHER}", f"usr/lib/{TRIPLET}", "usr/lib64"):
        (toolchain / folder).mkdir(parents=True, exist_ok=True)
    (toolchain / "usr" / "lib64" / "ld-build-machine.so.2").write_text("loader")
    return toolchain


def _root(tmp_path: Path) -> Path:
    """The emulated builder's root: its own libraries and headers, each with a sentinel file."""
    root = tmp_path / "root"
    for folder in (f"usr/lib/{TRIPLET}", "usr/include"):
        (root / folder).mkdir(parents=True)
        (root / folder / "sentinel").write_text("keep")
    return root


def _run(toolchain: Path, bin_dir: Path, root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", str(SCRIPT), str(toolchain), str(bin_dir), str(root)],
                          capture_output=True, text=True, check=False)


def _sentinels_kept(root: Path) -> None:
    assert (root / "usr" / "lib" / TRIPLET / "sentinel").read_text() == "keep"
    assert (root / "usr" / "include" / "sentinel").read_text() == "keep"
    assert not (root / "usr" / "lib" / TRIPLET).is_symlink()


def test_an_empty_toolchain_changes_nothing(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    root = _root(tmp_path)
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    result = _run(tmp_path / "empty", tmp_path / "bin", root)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before
    assert not (tmp_path / "bin").exists()


def test_the_toolchain_is_linked_in_and_the_wrappers_pass_arguments_as_given(tmp_path: Path) -> None:
    toolchain, root, bin_dir = _toolchain(tmp_path), _root(tmp_path), tmp_path / "bin"
    result = _run(toolchain, bin_dir, root)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"cross-compiler: {TRIPLET} g++ 14.2.0 from {toolchain}")
    assert (root / "usr" / TRIPLET).readlink() == toolchain / "usr" / TRIPLET
    assert (root / "usr" / "lib" / OTHER).readlink() == toolchain / "usr" / "lib" / OTHER
    assert (root / "usr" / "lib64" / "ld-build-machine.so.2").read_text() == "loader"
    assert (root / "lib64").readlink() == Path("usr/lib64")
    _sentinels_kept(root)
    for name in ("gcc", "g++", "cc", "c++", f"{TRIPLET}-gcc", f"{TRIPLET}-g++"):
        args = ["-c", "a file.cpp", "-DX='y z'", "$HOME"]
        out = subprocess.run([str(bin_dir / name), *args], capture_output=True, text=True, check=True).stdout
        assert out.splitlines() == args, name


def test_a_second_run_keeps_its_own_links(tmp_path: Path) -> None:
    toolchain, root = _toolchain(tmp_path), _root(tmp_path)
    assert _run(toolchain, tmp_path / "bin", root).returncode == 0
    again = _run(toolchain, tmp_path / "bin2", root)
    assert again.returncode == 0, again.stderr
    _sentinels_kept(root)


@pytest.mark.parametrize("taken", [f"usr/lib/{OTHER}", f"usr/{TRIPLET}", "usr/lib64/ld-build-machine.so.2"])
def test_a_path_that_exists_as_something_else_is_refused_and_kept(tmp_path: Path, taken: str) -> None:
    toolchain, root = _toolchain(tmp_path), _root(tmp_path)
    (root / taken).parent.mkdir(parents=True, exist_ok=True)
    (root / taken).write_text("theirs")
    result = _run(toolchain, tmp_path / "bin", root)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"cross-compiler: {root}/{taken} exists and is not {toolchain}/{taken}; build this platform without the "
        "cross compiler (an empty cross-gxx stage) or on a native builder"]
    assert (root / taken).read_text() == "theirs"
    _sentinels_kept(root)
