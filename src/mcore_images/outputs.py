"""Folders a command writes (the report site, a certificate folder): created, never clobbered.

A command writes into a new temporary sibling of the folder the user named and renames it into place at
the end, so a failed run leaves the old folder as it was and a reader never sees half of one. An existing
folder is replaced only when it is empty, or when it carries this tool's marker (``MARKER``: the command
that wrote it and every entry it wrote) and holds nothing else. Anything else (a file, a home folder, a
checkout, another command's folder, a path under a file) is refused in one line before any work starts,
with nothing touched. A folder that cannot be renamed (a mount point, or one in a read-only parent, where
the new folder is built inside it) is written in place instead: its listed entries are removed and the new
ones moved in.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from mcore_images.errors import InputError

MARKER = ".mcore-images-output.json"
TOOL = "mcore-images"


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
    try:
        yield work
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    _commit(output, work)


def _commit(output: Output, work: Path) -> None:
    """Mark ``work`` and put it where ``output.path`` is, removing only what the old marker listed."""
    entries = sorted(os.listdir(work))
    (work / MARKER).write_text(json.dumps({
        "tool": TOOL, "command": output.command, "entries": entries,
        "note": f"written by `{TOOL} {output.command}`, which replaces this folder only while it holds nothing "
                "but these entries",
    }, indent=2) + "\n")
    in_place = work.parent == output.path
    try:  # the folder may have changed while the work ran
        now = claim(output.path, output.command, output.option, working=work.name if in_place else None)
    except InputError as exc:
        raise InputError(f"{exc}; the new output is in {work}") from None
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


def _remove(folder: Path, listed: tuple[str, ...]) -> None:
    """Remove the entries a marker listed, and the marker: nothing else."""
    for name in [*listed, MARKER]:
        entry = folder / name
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink(missing_ok=True)
