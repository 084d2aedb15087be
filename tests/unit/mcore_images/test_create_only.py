"""Create-only output folders (create_only.py): a new folder renamed into place, an own folder (its marker lists
everything in it) replaced, anything else refused in one line with nothing touched. Every test writes under
a temporary root of sentinel files, never a real system path."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mcore_images import create_only
from mcore_images.errors import InputError
from tests.support.host import need
from tests.support.sentinels import PLACES, make_root, snapshot
from tests.unit.conftest import PYTHONPATH


def write(path: Path, command: str = "report", files: dict[str, str] | None = None) -> Path:
    """Claim and write ``path`` the way a command does."""
    with create_only.writing(create_only.claim(path, command)) as work:
        for name, text in (files or {"index.html": "<p>one</p>"}).items():
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            (work / name).write_text(text)
    return path


def marker(path: Path) -> dict:
    return json.loads((path / create_only.MARKER).read_text())


def test_a_new_folder_is_written_whole_with_its_marker_and_no_leftovers(tmp_path: Path) -> None:
    write(tmp_path / "a" / "site", files={"index.html": "x", "pages/one.html": "y"})
    assert sorted(os.listdir(tmp_path / "a")) == ["site"]  # no temporary sibling left
    written = marker(tmp_path / "a" / "site")
    assert (written["tool"], written["command"], written["entries"]) == ("mcore-images", "report",
                                                                         ["index.html", "pages"])


def test_an_own_folder_is_replaced_and_its_old_entries_go(tmp_path: Path) -> None:
    (tmp_path / "neighbour.txt").write_text("next to the site")
    site = write(tmp_path / "site", files={"old.html": "old", "index.html": "1"})
    write(site, files={"index.html": "2"})
    assert sorted(os.listdir(site)) == [create_only.MARKER, "index.html"] and (site / "index.html").read_text() == "2"
    assert sorted(os.listdir(tmp_path)) == ["neighbour.txt", "site"]


def test_an_empty_folder_is_written(tmp_path: Path) -> None:
    (tmp_path / "site").mkdir()
    assert (write(tmp_path / "site") / "index.html").is_file()


@pytest.mark.parametrize("place", list(PLACES), ids=list(PLACES))
def test_a_folder_it_did_not_write_is_refused_with_nothing_touched(place: str, tmp_path: Path) -> None:
    root = make_root(tmp_path)
    before = snapshot(root)
    with pytest.raises(InputError) as refused:
        write(root / PLACES[place])
    assert "\n" not in str(refused.value) and "--out" in str(refused.value)
    assert snapshot(root) == before


def test_an_own_folder_holding_anything_else_is_refused(tmp_path: Path) -> None:
    site = write(tmp_path / "site")
    (site / "mine.txt").write_text("the user put this here")
    with pytest.raises(InputError, match=r"holds mine\.txt, which `mcore-images report` did not write"):
        write(site, files={"index.html": "new"})
    assert (site / "mine.txt").read_text() == "the user put this here" and (site / "index.html").read_text() == \
        "<p>one</p>"


def test_another_commands_folder_or_a_foreign_marker_is_refused(tmp_path: Path) -> None:
    certs = write(tmp_path / "certs", command="certify", files={"certificate.json": "{}"})
    with pytest.raises(InputError, match="was written by `mcore-images certify`, not `mcore-images report`"):
        write(certs)
    forged = tmp_path / "forged"
    forged.mkdir()
    (forged / "keep.txt").write_text("keep")
    for entries in (["../keep.txt"], ["keep.txt/.."], "keep.txt"):
        (forged / create_only.MARKER).write_text(json.dumps({"tool": "mcore-images", "command": "report",
                                                         "entries": entries}))
        with pytest.raises(InputError, match="is not a marker mcore-images wrote"):
            write(forged)
    assert (forged / "keep.txt").read_text() == "keep"


def test_a_failed_write_leaves_the_old_folder_as_it_was(tmp_path: Path) -> None:
    site = write(tmp_path / "site")
    with pytest.raises(RuntimeError), create_only.writing(create_only.claim(site, "report")) as work:
        (work / "index.html").write_text("half")
        raise RuntimeError("the run failed")
    assert (site / "index.html").read_text() == "<p>one</p>" and sorted(os.listdir(tmp_path)) == ["site"]


def test_a_folder_that_changed_while_the_work_ran_is_not_replaced(tmp_path: Path) -> None:
    site = write(tmp_path / "site")
    with pytest.raises(InputError, match="the new output is in"), \
            create_only.writing(create_only.claim(site, "report")) as work:
        (work / "index.html").write_text("new")
        (site / "appeared.txt").write_text("written meanwhile")
    assert (site / "appeared.txt").is_file() and (site / "index.html").read_text() == "<p>one</p>"


def test_a_symbolic_link_is_followed_and_a_dangling_one_refused(tmp_path: Path) -> None:
    site = write(tmp_path / "site")
    (tmp_path / "link").symlink_to(site)
    write(tmp_path / "link", files={"index.html": "through the link"})
    assert (tmp_path / "link").is_symlink() and (site / "index.html").read_text() == "through the link"
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(InputError, match="is a symbolic link to nothing"):
        write(tmp_path / "dangling")


MOUNTED = """
import json, os, subprocess, sys
from pathlib import Path
from mcore_images import create_only
from mcore_images.errors import InputError
from tests.support.host import need
base, mode = Path(sys.argv[1]), sys.argv[2]
site = base / "site"
def mount(*args):
    subprocess.run(["mount", *args], check=True)
if mode == "read-only parent":  # a writable volume in a read-only tree, as a container's /out under a read-only /
    mount("--bind", str(base), str(base))
    mount("-o", "remount,bind,ro", str(base))
mount("--bind", str(site), str(site))
mount("-o", "remount,bind,rw", str(site))
def write(files):
    with create_only.writing(create_only.claim(site, "report")) as work:
        for name, text in files.items():
            (work / name).write_text(text)
try:
    os.rename(site, base / "moved")
    renamable = True
except OSError:
    renamable = False
write({"index.html": "1", "old.html": "old"})
write({"index.html": "2"})
after = sorted(os.listdir(site))
(site / "mine.txt").write_text("mine")
try:
    write({"index.html": "3"})
    refused = None
except InputError as exc:
    refused = str(exc)
print(json.dumps({"renamable": renamable, "after": after, "index": (site / "index.html").read_text(),
                  "refused": refused, "siblings": sorted(os.listdir(base))}))
"""


@pytest.mark.parametrize("mode", ["mount point", "read-only parent"])
def test_a_folder_that_cannot_be_renamed_is_written_in_place_removing_only_its_listed_entries(
        mode: str, tmp_path: Path) -> None:
    """Real bind mounts in a private mount namespace: the folder is a mount point (it cannot be renamed), and
    also its parent is read-only (the new folder is built inside it)."""
    need("unshare")
    unshare = shutil.which("unshare") or "unshare"
    (tmp_path / "site").mkdir()  # an empty folder, made a mount point inside the namespace
    done = subprocess.run([unshare, "--user", "--map-root-user", "--mount", sys.executable, "-c", MOUNTED,
                           str(tmp_path), mode], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": PYTHONPATH})
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["renamable"] is False  # the folder really cannot be renamed
    assert seen["after"] == [create_only.MARKER, "index.html"] and seen["index"] == "2"
    assert "holds mine.txt" in seen["refused"] and seen["siblings"] == ["site"]


def test_a_replaced_folder_keeps_its_mode_owner_group_and_setgid_bit(tmp_path: Path) -> None:
    """Before: an existing empty report folder (2775, group users) became a 0700 root:root one."""
    site = tmp_path / "site"
    site.mkdir()
    os.chmod(site, 0o2775)
    os.chown(site, -1, 100)  # "users" on Debian; any group other than the process's own
    write(site)
    after = os.stat(site)
    assert (oct(after.st_mode & 0o7777), after.st_gid) == ("0o2775", 100)
    write(site, files={"index.html": "again"})  # replacing its own folder keeps them too
    assert (oct(os.stat(site).st_mode & 0o7777), os.stat(site).st_gid) == ("0o2775", 100)


def test_a_new_folder_gets_the_umask_mode_and_a_setgid_parents_group(tmp_path: Path) -> None:
    parent = tmp_path / "shared"
    parent.mkdir()
    os.chown(parent, -1, 100)
    os.chmod(parent, 0o2775)
    old = os.umask(0o022)
    try:
        write(parent / "site")
    finally:
        os.umask(old)
    st = os.stat(parent / "site")
    assert (oct(st.st_mode & 0o7777), st.st_gid) == ("0o2755", 100)


def test_a_file_output_is_created_replaced_only_when_its_own_and_keeps_its_mode(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    before = snapshot(root)
    for name in ("etc/passwd", "file.txt", "home/user/certificate.json"):
        with pytest.raises(InputError, match="did not write: give a new file name"):
            create_only.write_file(root / name, "build-timing", {"runs": []})
    with pytest.raises(InputError, match="is a folder"):
        create_only.claim_file(root / "etc", "build-timing")
    with pytest.raises(InputError, match=r"file\.txt is a file"):
        create_only.claim_file(root / "file.txt" / "t.json", "build-timing")
    assert snapshot(root) == before
    path = tmp_path / "out" / "t.json"
    create_only.write_file(path, "build-timing", {"runs": [1]})
    os.chmod(path, 0o640)
    create_only.write_file(path, "build-timing", {"runs": [2]})
    assert json.loads(path.read_text()) == {"written_by": "mcore-images build-timing", "runs": [2]}
    assert oct(path.stat().st_mode & 0o777) == "0o640" and os.listdir(path.parent) == ["t.json"]
    with pytest.raises(InputError, match="was written by `mcore-images build-timing`"):
        create_only.claim_file(path, "report")


def test_a_program_that_marked_the_work_folder_does_not_make_the_marker_list_itself(tmp_path: Path) -> None:
    """certify runs the smoke into its work folder, and the smoke now marks the folders it fills: the certify
    marker must list what was written, not the smoke's marker, or the next certify into it is refused."""
    site = tmp_path / "cert"
    for _ in range(2):
        with create_only.writing(create_only.claim(site, "certify")) as work, \
                create_only.filled(create_only.claim(work, "smoke")) as filled:
            (filled / "certificate.json").write_text("{}")
    marker = json.loads((site / create_only.MARKER).read_text())
    assert marker["command"] == "certify" and marker["entries"] == ["certificate.json"]
