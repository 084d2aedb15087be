"""`mcore-images report` writes its site and nothing else: matplotlib's configuration folder and font cache do not
land in the user's home, and its own work folder is never left behind in the folder it was built in. Each case runs
the command as a separate process against a temporary HOME of sentinel files."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from mcore_images import create_only
from tests.support.host import need
from tests.unit.conftest import ROOT

DOTFILES = {".bashrc": "export PS1='$ '\n", ".config/app/settings.ini": "[app]\n", "notes.txt": "keep me\n"}
SITE = {"index.html", "matrix.html", "build.html", "style.css"}


def report(home: Path, *args: str, wrap: list[str] | None = None) -> subprocess.CompletedProcess:
    """The report as a user whose environment names only HOME: matplotlib would keep its files there."""
    env = {k: v for k, v in os.environ.items() if k not in ("MPLCONFIGDIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME")}
    env.update(HOME=str(home), PYTHONPATH=str(ROOT / "src"), MCORE_IMAGES_ROOT=str(ROOT))
    return subprocess.run([*(wrap or []), sys.executable, "-m", "mcore_images", "report", *args], env=env,
                          capture_output=True, text=True, timeout=300, cwd=home)


def files(home: Path) -> dict[str, str | None]:
    return {str(p.relative_to(home)): None if p.is_dir() else p.read_text() for p in sorted(home.rglob("*"))}


def test_matplotlib_keeps_nothing_in_the_users_home(tmp_path: Path) -> None:
    """Before: ~/.cache/matplotlib/fontlist-*.json and ~/.config/matplotlib appeared in HOME."""
    home = tmp_path / "home"
    for name, text in DOTFILES.items():
        (home / name).parent.mkdir(parents=True, exist_ok=True)
        (home / name).write_text(text)
    before = files(home)
    done = report(home, "--out", str(home / "site"))
    assert done.returncode == 0, done.stderr
    after = files(home)
    assert {k: v for k, v in after.items() if not k.startswith("site")} == before
    assert {k for k in after if k.startswith("site/")} == {f"site/{n}" for n in SITE | {create_only.MARKER}}


MOUNT = ('mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && mount --bind "$2" "$2" && '
         'mount -o remount,bind,rw "$2" && shift 2 && exec "$@"')
"""$1 read-only with $2, a folder in it, writable: a home under /home that only root may write, as an unprivileged
user has it (root ignores file modes, not a read-only mount)."""


def namespace() -> list[str]:
    need("unshare")
    unshare = shutil.which("unshare") or "unshare"
    return [unshare, "--user", "--map-root-user", "--mount"]


def test_the_users_empty_home_as_out_is_written_and_holds_only_the_site(tmp_path: Path) -> None:
    """Before (an unprivileged user, `report --out $HOME`): the work folder is built inside HOME, whose parent it
    cannot write; matplotlib's .cache and .config appeared beside it, the final check refused HOME for holding them,
    and the work folder .home.*.new was left in HOME."""
    parent, home = tmp_path / "homes", tmp_path / "homes" / "user"
    home.mkdir(parents=True)
    (parent / "other-user").mkdir()
    wrap = [*namespace(), "sh", "-c", MOUNT, "sh", str(parent), str(home)]
    done = report(home, "--out", str(home), wrap=wrap)
    assert done.returncode == 0, done.stderr
    assert sorted(os.listdir(home)) == sorted(SITE | {create_only.MARKER})
    assert sorted(os.listdir(parent)) == ["other-user", "user"]


MOVED_OUT = """
import os, sys
from pathlib import Path
from mcore_images import create_only
from mcore_images.errors import InputError
site = Path(sys.argv[1])
try:
    with create_only.writing(create_only.claim(site, "report")) as work:
        (work / "index.html").write_text("new")
        (site / "theirs.txt").write_text("appeared while the work ran")
except InputError as exc:
    print(exc)
"""


def test_a_work_folder_built_inside_the_output_is_not_left_there_when_the_output_is_refused(tmp_path: Path) -> None:
    parent, site = tmp_path / "ro", tmp_path / "ro" / "site"
    site.mkdir(parents=True)
    wrap = [*namespace(), "sh", "-c", MOUNT, "sh", str(parent), str(site)]
    done = subprocess.run([*wrap, sys.executable, "-c", MOVED_OUT, str(site)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, timeout=60)
    assert done.returncode == 0, done.stderr
    said = done.stdout.strip()
    assert said.startswith(f"--out {site} is a folder mcore-images did not write"), said
    kept = Path(said.rsplit("the new output is in ", 1)[1])
    assert os.listdir(site) == ["theirs.txt"]  # no .site.*.new left among the user's files
    assert (kept / "index.html").read_text() == "new" and not kept.is_relative_to(site)
    shutil.rmtree(kept)
