"""The programs' own --out (`python -m mcore_images.smoke`, `.bridge`, `.bench`) follows the wrapper's rule
(create_only.py): a user's folder is refused in one line with every file kept, a read-only one is one line, not a
traceback, and a bad argument is one line with nothing made, here and through `mcore-images smoke`.

The launcher goes past its torch check only where torch is installed: a stand-in ``torch`` package (whose
``torch.distributed.run`` exits 1 at once, as a torchrun whose ranks never start) takes it there on any machine, so
the tests do not depend on whether this one has torch."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mcore_images import create_only
from mcore_images.launch import programs
from mcore_images.smoke import args as smoke_args
from mcore_images.smoke.bench import cli as bench_cli
from mcore_images.smoke.bridge import cli as bridge_cli
from tests.support.host import need
from tests.support.sentinels import files_under, plant
from tests.unit.conftest import PYTHONPATH

USERS = {"certificate.json": b'{"mine": true, "notes": "my own certificate"}\n',
         "certificate.md": b"# my own notes\n\xe2\x9c\x93 kept\n", "notes/todo.txt": b"keep me\n"}


def stand_in_torch(base: Path) -> Path:
    """A folder holding a ``torch`` package that is nothing but a torchrun that fails at once."""
    package = base / "stand-in" / "torch" / "distributed"
    package.mkdir(parents=True)
    (package.parent / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "run.py").write_text("raise SystemExit(1)\n")
    return base / "stand-in"


def program(module: str, *args: str, torch: Path | None = None, cwd: Path | None = None,
            wrap: list[str] | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(PYTHONPATH=os.pathsep.join([*([str(torch)] if torch else []), PYTHONPATH]), CUDA_VISIBLE_DEVICES="")
    return subprocess.run([*(wrap or []), sys.executable, "-m", module, *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=120)


def test_a_users_folder_is_refused_with_every_file_kept_byte_for_byte(tmp_path: Path) -> None:
    """Before: exit 0 in an image (here: exit 2 after torchrun), certificate.json and .md replaced silently."""
    out = tmp_path / "o"
    plant(out, USERS)
    done = program("mcore_images.smoke", "--cpu", "--nproc", "1", "--out", str(out), torch=stand_in_torch(tmp_path))
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [f"smoke: could not run: --out {out} is a folder mcore-images did not write (it "
                                        f"has no {create_only.MARKER}) and is not empty: give a new or empty folder; "
                                        "nothing was changed"]
    assert done.stdout == ""  # not even the plan: nothing started
    assert files_under(out) == USERS


def test_a_folder_the_smoke_wrote_is_marked_and_taken_again_by_the_smoke_and_its_wrapper(tmp_path: Path) -> None:
    out, torch = tmp_path / "new" / "smoke", stand_in_torch(tmp_path)
    first = program("mcore_images.smoke", "--cpu", "--nproc", "1", "--out", str(out), torch=torch)
    assert first.returncode == 2 and "no rank started" in first.stderr + first.stdout, first.stderr
    marked = create_only.claim(out, smoke_args.OUTPUT_OWNER)  # its own folder: the smoke may write it again
    assert set(marked.listed) == {"certificate.json", "certificate.md"}
    again = program("mcore_images.smoke", "--cpu", "--nproc", "1", "--out", str(out), torch=torch)
    assert "did not write" not in again.stderr and (out / "certificate.json").is_file(), again.stderr
    # the wrapper's own command is the one the marker names, so `mcore-images smoke --out` takes it too
    wrapper = {p.module: p.name for p in programs.PROGRAMS}
    assert wrapper == {"mcore_images.smoke": smoke_args.OUTPUT_OWNER, "mcore_images.smoke.bridge":
                       bridge_cli.OUTPUT_OWNER, "mcore_images.smoke.bench": bench_cli.OUTPUT_OWNER}


@pytest.mark.parametrize(("module", "args"), [("mcore_images.smoke.bridge", ["--dry-run"]),
                                              ("mcore_images.smoke.bench", ["--dry-run", "--cpu"])])
def test_the_bridge_and_the_bench_refuse_a_users_folder_too(module: str, args: list[str], tmp_path: Path) -> None:
    out = tmp_path / "o"
    plant(out, USERS)
    (out / "bridge.json").write_bytes(b"{}\n")
    (out / "bench.json").write_bytes(b"{}\n")
    before = files_under(out)
    done = program(module, *args, "--out", str(out))
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert "did not write" in done.stderr and files_under(out) == before


MOUNT_READ_ONLY = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"'


@pytest.mark.parametrize("where", ["the folder", "a new folder in it"])
def test_a_read_only_out_is_one_line_before_anything_runs(where: str, tmp_path: Path) -> None:
    """A real read-only bind mount in a private mount namespace (root writes through chmod, not through a read-only
    mount). Before: `OSError: [Errno 30] Read-only file system` and a traceback from launcher.py."""
    need("unshare")
    unshare = shutil.which("unshare") or "unshare"
    folder = tmp_path / "ro"
    folder.mkdir()
    out = folder if where == "the folder" else folder / "out"
    done = program("mcore_images.smoke", "--cpu", "--nproc", "1", "--out", str(out), torch=stand_in_torch(tmp_path),
                   wrap=[unshare, "--user", "--map-root-user", "--mount", "sh", "-c", MOUNT_READ_ONLY, "sh",
                         str(folder)])
    assert done.returncode == 2, done.stderr
    said = ("is not writable; choose a folder you can write" if where == "the folder"
            else f"cannot be created: {folder} is not writable; choose a folder you can write")
    assert done.stderr.splitlines() == [f"smoke: could not run: --out {out} {said}"]
    assert done.stdout == "" and list(folder.iterdir()) == []


@pytest.mark.parametrize(("module", "args", "line"), [
    ("mcore_images.smoke", ["--nproc", "abc"], "smoke: could not run: argument --nproc: invalid int value: 'abc'; "
     "see `python -m mcore_images.smoke --help`"),
    ("mcore_images.smoke.bridge", ["--timeout", "soon"], "smoke.bridge: could not run: argument --timeout: 'soon' is "
     "not a number: give a number greater than 0, e.g. 120; see `python -m mcore_images.smoke.bridge --help`"),
    ("mcore_images.smoke.bench", ["--configs"], "bench: could not run: argument --configs: expected one argument; "
     "see `python -m mcore_images.smoke.bench --help`"),
])
def test_a_bad_argument_is_one_line_not_a_usage_block(module: str, args: list[str], line: str,
                                                       tmp_path: Path) -> None:
    done = program(module, *args, "--out", str(tmp_path / "out"))
    assert done.returncode == 2 and done.stderr.splitlines() == [line]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", [p.name for p in programs.PROGRAMS])
def test_the_wrapper_makes_nothing_for_an_argument_the_program_refuses(name: str, tmp_path: Path) -> None:
    """Before: `mcore-images smoke -- --nproc abc` made and marked ./out/smoke, then printed a 12-line usage block."""
    (tmp_path / "mine.txt").write_text("keep me\n")
    done = program("mcore_images", name, "--", "--bogus", "abc", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.splitlines()) == 1 and "unrecognized arguments: --bogus abc" in done.stderr, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.txt"]
    (tmp_path / "empty").mkdir()  # an empty folder of the user's stays empty: no marker written into it
    done = program("mcore_images", name, "--out", "empty", "--", "--bogus", "abc", cwd=tmp_path)
    assert done.returncode == 2 and list((tmp_path / "empty").iterdir()) == []
