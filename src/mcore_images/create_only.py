"""Folders and files a command writes (the report site, a certificate folder, build timings): created, never
clobbered.

A command writes into a new temporary sibling of the folder the user named and renames it into place at
the end, so a failed run leaves the old folder as it was and a reader never sees half of one. An existing
folder is replaced only when it is empty, or when it carries this tool's marker (``MARKER``: the command
that wrote it and every entry it wrote) and holds nothing else. Anything else (a file, a home folder, a
checkout, another command's folder, a path under a file) is refused in one line before any work starts,
with nothing touched. A folder that cannot be renamed (a mount point, or one in a read-only parent, where
the new folder is built inside it) is written in place instead: its listed entries are removed and the new
ones moved in. A replaced folder keeps its mode (the setgid bit included), owner and group; a new one gets the
mode a plain ``mkdir`` would (the umask's), not ``mkdtemp``'s 0700.

A folder a program fills in place (the smoke's ``--out``, mounted into a container) is claimed the same way
and marked when the program ends (``filled``); one that wrote nothing (it refused its arguments) leaves no folder and
no marker behind. A single file (``claim_file``, ``write_file``) is a JSON
document whose own ``written_by`` field is the marker: an existing file is replaced only when that field
names the same command; it is written next to itself and renamed into place.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from mcore_images.errors import InputError

MARKER = ".mcore-images-output.json"
TOOL = "mcore-images"
WRITTEN_BY = "written_by"
"""The field of a JSON file a command writes that marks it as that command's (``mcore-images build-timing``)."""


@dataclass(frozen=True)
class Output:
    """A folder ``command`` may write: ``listed`` are the entries its marker names (empty: a new or empty
    folder), the only ones a replacement removes."""

    path: Path
    command: str
    option: str
    listed: tuple[str, ...] = ()


def claim(path: Path, command: str, option: str = "--out", working: str | None = None) -> Output:
    """Whether ``command`` may write the folder ``path``: an Output, or InputError (one line, naming the fix).
    Reads only; creates and removes nothing. ``working`` names the command's own unfinished folder inside
    ``path``, which is not counted against it."""
    try:
        return _claim(path, command, option, working)
    except OSError as exc:  # a folder on the way that cannot be read
        raise InputError(f"{option} {path} cannot be checked ({exc.strerror or exc}); choose a folder you can "
                         "read and write") from None


def _claim(path: Path, command: str, option: str, working: str | None) -> Output:
    where = f"{option} {path}"
    target = Path(os.path.abspath(path))
    if target.is_symlink():
        if not target.exists():
            raise InputError(f"{where} is a symbolic link to nothing: give a folder for the output")
        target = target.resolve()
    if target.exists() and not target.is_dir():
        raise InputError(f"{where} is a file: give a folder for the output")
    if not target.exists():
        ancestor = next(p for p in target.parents if p.exists())
        if not ancestor.is_dir():
            raise InputError(f"{where} cannot be created: {ancestor} is a file; choose a path under a folder")
        if not os.access(ancestor, os.W_OK | os.X_OK):
            raise InputError(f"{where} cannot be created: {ancestor} is not writable; choose a folder you can write")
        return Output(target, command, option)
    entries = set(os.listdir(target)) - {working}
    if MARKER not in entries and entries:
        raise InputError(f"{where} is a folder {TOOL} did not write (it has no {MARKER}) and is not empty: give a "
                         "new or empty folder; nothing was changed")
    listed = _listed(target, command, where) if MARKER in entries else ()
    unlisted = sorted(entries - set(listed) - {MARKER})
    if unlisted:
        raise InputError(f"{where} holds {', '.join(unlisted[:3])}{' …' if len(unlisted) > 3 else ''}, which "
                         f"`{TOOL} {command}` did not write: move it away or give another folder; nothing was changed")
    if not os.access(target, os.W_OK | os.X_OK):
        raise InputError(f"{where} is not writable; choose a folder you can write")
    return Output(target, command, option, tuple(sorted(listed)))


def _listed(folder: Path, command: str, where: str) -> tuple[str, ...]:
    """The entries the folder's marker says ``command`` wrote; InputError when the marker is another
    command's or not one this tool writes."""
    try:
        marker = json.loads((folder / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        marker = None
    entries = marker.get("entries") if isinstance(marker, dict) else None
    if (not isinstance(marker, dict) or marker.get("tool") != TOOL or not isinstance(entries, list)
            or not all(isinstance(e, str) and e and "/" not in e and e not in (".", "..", MARKER) for e in entries)):
        raise InputError(f"{where}: {folder / MARKER} is not a marker {TOOL} wrote: give a new or empty folder; "
                         "nothing was changed")
    if marker.get("command") != command:
        raise InputError(f"{where} was written by `{TOOL} {marker.get('command')}`, not `{TOOL} {command}`: give "
                         "another folder; nothing was changed")
    return tuple(entries)


@contextmanager
def writing(output: Output) -> Iterator[Path]:
    """A new folder to write into; when the block ends without an exception it replaces ``output.path``
    (with the marker). On an exception the new folder is removed and the old one is left as it was."""
    parent = output.path.parent
    inside = output.path.is_dir() and not os.access(parent, os.W_OK | os.X_OK)  # e.g. a volume under a read-only /
    try:
        parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{output.path.name}.", suffix=".new",
                                     dir=output.path if inside else parent))
    except OSError as exc:
        raise InputError(f"{output.option} {output.path} cannot be created ({exc.strerror}); choose a folder you "
                         "can write") from None
    settle(work, output.path)
    try:
        yield work
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    _commit(output, work)


def settle(work: Path, like: Path) -> None:
    """Give ``work`` (made by mkdtemp: 0700) what the folder it stands in for has: an existing ``like``'s mode,
    setgid bit, owner and group; for a new one, the mode ``mkdir`` gives under this umask (a setgid parent's
    group and setgid bit are the kernel's, already inherited)."""
    if like.is_dir():
        _take_over(work, os.stat(like))
    else:
        os.chmod(work, _plain_mode(0o777) | (stat.S_IMODE(os.stat(work).st_mode) & stat.S_ISGID))


def _take_over(path: Path | str, st: os.stat_result) -> None:
    """``path`` gets the mode, owner and group of what it replaces (as far as this user may give them)."""
    with suppress(PermissionError):  # another user's: keep at least the group where we may
        os.chown(path, -1, st.st_gid)
        os.chown(path, st.st_uid, st.st_gid)
    os.chmod(path, stat.S_IMODE(st.st_mode))


def _plain_mode(full: int) -> int:
    """The mode a plain create gives under this process's umask."""
    umask = os.umask(0)
    os.umask(umask)
    return full & ~umask


def _commit(output: Output, work: Path) -> None:
    """Mark ``work`` and put it where ``output.path`` is, removing only what the old marker listed."""
    entries = sorted(set(os.listdir(work)) - {MARKER})  # a program run into it (the smoke) may have marked it
    (work / MARKER).write_text(json.dumps({
        "tool": TOOL, "command": output.command, "entries": entries,
        "note": f"written by `{TOOL} {output.command}`, which replaces this folder only while it holds nothing "
                "but these entries",
    }, indent=2) + "\n")
    in_place = work.parent == output.path
    try:  # the folder may have changed while the work ran
        now = claim(output.path, output.command, output.option, working=work.name if in_place else None)
    except InputError as exc:
        # Built inside the folder (its parent is read-only): not left there among what the command did not write.
        kept = _moved_out(work) if in_place else work
        raise InputError(f"{exc}; the new output is in {kept}") from None
    if not output.path.exists():
        os.rename(work, output.path)
        return
    if not in_place:
        aside = work.with_suffix(".old")
        try:
            os.rename(output.path, aside)
        except OSError:  # a mount point (EBUSY): write in place
            in_place = True
        else:
            os.rename(work, output.path)
            _remove(aside, now.listed)
            try:
                aside.rmdir()
            except OSError:  # something appeared in it while the work ran: not ours to remove
                print(f"warning: kept {aside}: it holds {', '.join(sorted(os.listdir(aside)))}, which `{TOOL} "
                      f"{output.command}` did not write", file=sys.stderr)
            return
    _remove(output.path, now.listed)
    for name in [*entries, MARKER]:
        shutil.move(str(work / name), str(output.path / name))
    work.rmdir()


def _moved_out(work: Path) -> Path:
    """``work``'s entries moved into a new temporary folder (copied where it is on another file system), and
    ``work`` removed; that folder."""
    kept = Path(tempfile.mkdtemp(prefix=f"{TOOL}-{work.name.strip('.')}-"))
    for name in os.listdir(work):
        shutil.move(str(work / name), str(kept / name))
    work.rmdir()
    return kept


def _remove(folder: Path, listed: tuple[str, ...]) -> None:
    """Remove the entries a marker listed, and the marker: nothing else."""
    for name in [*listed, MARKER]:
        entry = folder / name
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink(missing_ok=True)


@contextmanager
def filled(output: Output) -> Iterator[Path]:
    """The claimed folder itself, for a program that writes into it in place (mounted into a container): made
    when missing (as ``mkdir -p`` would) and marked, with every entry it then holds, when the block ends,
    whether the program passed or failed. A program that wrote nothing (it refused its arguments) leaves the
    folder as it found it: unmarked, and the folders made here removed again."""
    made = [p for p in (output.path, *output.path.parents) if not p.exists()]  # the deepest first
    had_marker = (output.path / MARKER).exists()
    try:
        output.path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"{output.option} {output.path} cannot be created ({exc.strerror}); choose a folder you "
                         "can write") from None
    try:
        yield output.path
    finally:
        entries = sorted(set(os.listdir(output.path)) - {MARKER})
        if entries or had_marker:
            (output.path / MARKER).write_text(json.dumps({
                "tool": TOOL, "command": output.command, "entries": entries,
                "note": f"written by `{TOOL} {output.command}`, which writes into this folder again only while it "
                        "holds nothing but these entries",
            }, indent=2) + "\n")
        else:
            for folder in made:
                with suppress(OSError):  # something else appeared in it: not ours to remove
                    folder.rmdir()


def claim_file(path: Path, command: str, option: str = "--out") -> Path:
    """Whether ``command`` may write the JSON file ``path``: a new file in a folder that exists or can be made,
    or a file whose ``written_by`` names ``command``. Reads only; InputError (one line, naming the fix)."""
    where = f"{option} {path}"
    target = Path(os.path.abspath(path))
    if target.is_symlink():
        raise InputError(f"{where} is a symbolic link: give the path of a new file")
    if target.is_dir():
        raise InputError(f"{where} is a folder: give the path of a new file (e.g. build/{command}.json)")
    if target.exists():
        if not target.is_file():
            raise InputError(f"{where} is not a regular file: give the path of a new file")
        owner = _file_owner(target)
        if owner != f"{TOOL} {command}":
            said = f"was written by `{owner}`" if owner else f"is a file `{TOOL} {command}` did not write"
            raise InputError(f"{where} {said}: give a new file name, or move it away; nothing was changed")
        if not os.access(target, os.W_OK) or not os.access(target.parent, os.W_OK | os.X_OK):
            raise InputError(f"{where} is not writable; choose a file in a folder you can write")
        return target
    ancestor = next(p for p in target.parents if p.exists())
    if not ancestor.is_dir():
        raise InputError(f"{where} cannot be created: {ancestor} is a file; choose a path under a folder")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise InputError(f"{where} cannot be created: {ancestor} is not writable; choose a folder you can write")
    try:  # root passes every access() check: a read-only or virtual file system (/proc) says no only to a create
        fd, probe = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".probe", dir=ancestor)
    except OSError as exc:
        raise InputError(f"{where} cannot be created in {ancestor} ({exc.strerror or exc}); choose a folder you can "
                         "write") from None
    os.close(fd)
    os.unlink(probe)
    return target


def _file_owner(path: Path) -> str | None:
    """The ``written_by`` of a JSON object file (None: not one of ours, or not readable as one)."""
    try:
        with open(path, encoding="utf-8") as handle:
            head = handle.read(1 << 20)
        data = json.loads(head)
    except (OSError, ValueError):
        return None
    owner = data.get(WRITTEN_BY) if isinstance(data, dict) else None
    return owner if isinstance(owner, str) else None


def write_file(path: Path, command: str, document: dict, option: str = "--out") -> None:
    """Write ``document`` (with its ``written_by``) to ``path``, claimed again now, through ``replace_text``; a file
    that cannot be made there (a read-only or virtual file system: ``/proc/nope``) is one line, not a traceback."""
    target = claim_file(path, command, option)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        replace_text(target, json.dumps({WRITTEN_BY: f"{TOOL} {command}", **document}, indent=2) + "\n")
    except OSError as exc:
        raise InputError(f"{option} {path} cannot be written ({exc.strerror or exc}); choose a file in a folder you "
                         "can write") from None


def replace_text(path: Path, text: str) -> None:
    """Put ``text`` at ``path`` whole or not at all: written to a temporary file beside it under a name made for
    this write alone (``.NAME.<random>.new``: nothing of anyone else's is taken, overwritten or left behind), then
    renamed over it; the temporary file is removed on every way out that does not get that far, Ctrl-C included. A
    replaced file keeps its mode, owner and group. For a file a command claimed, or one inside a folder it claimed
    (a certificate, a state record)."""
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".new", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        if path.exists():
            _take_over(temp, os.stat(path))
        else:
            os.chmod(temp, _plain_mode(0o666))
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
