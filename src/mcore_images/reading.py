"""Every file the tool and its programs read, read one way: the first rungs of the ladder every document climbs
(jsonfiles.py adds the schema on top).

A file is read only when it is a regular file no larger than a limit: a FIFO blocks a read until someone writes,
a device (``/dev/zero``) never ends one, and a 3 GB file read whole drove a 24 GiB machine into the kernel's
out-of-memory killer. So the path is judged with ``stat`` before it is opened, opened without blocking (a FIFO
swapped in meanwhile does not hang the open), judged again on the open file, and read up to the limit and no
further. Each refusal is one InputError that names what the file is and the fix. Standard library only: the
programs that run inside the images (the smoke) read their inputs through it too.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mcore_images.errors import InputError

MAX_BYTES = 64 << 20
"""The most any file the tool reads may hold, unless its reader names a smaller limit: far above any document,
Job manifest, key or config the tool reads (the largest, a certificate with its tables, is well under 1 MiB)."""

KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
         (stat.S_ISFIFO, "a pipe (FIFO)"), (stat.S_ISSOCK, "a socket"))


def kind(mode: int) -> str:
    """What a file of ``mode`` is, in words (``a regular file``, ``a pipe (FIFO)``, …)."""
    return "a regular file" if stat.S_ISREG(mode) else next((n for test, n in KINDS if test(mode)), "not a file")


def size_text(count: int) -> str:
    """A byte count as a person reads it: 512 bytes, 4 KiB, 1.5 MiB, 3.0 GiB."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if count >= 1 << shift:
            value = count / (1 << shift)
            return f"{value:.1f} {unit}" if value % 1 else f"{value:.0f} {unit}"
    return f"{count} bytes"


def _named(what: str, path: Path | str) -> str:
    return f"{what} {path}" if what else str(path)


def _stat_of_kind(path: Path | str, named: str, is_kind: Callable[[int], bool], wanted: str) -> os.stat_result | str:
    """``path``'s stat where it is the kind ``is_kind`` accepts; else why not (missing, unreadable, or
    another kind than ``wanted``): the rungs a file and a folder share."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return f"{named} not found"
    except OSError as exc:
        return f"{named} cannot be read ({exc.strerror or exc})"
    return st if is_kind(st.st_mode) else f"{named} is {kind(st.st_mode)}, not {wanted}"


def file_problem(path: Path | str, what: str = "", max_bytes: int | None = MAX_BYTES) -> str | None:
    """Why ``path`` is not a file this tool reads (missing, a folder, a FIFO, a device, over ``max_bytes``),
    without opening it; None when it is one. For a path another program reads (cosign's key, docker's mounts)."""
    named = _named(what, path)
    st = _stat_of_kind(path, named, stat.S_ISREG, "a regular file")
    if isinstance(st, str):
        return st
    if max_bytes is not None and st.st_size > max_bytes:
        return f"{named} is {size_text(st.st_size)}, over the {size_text(max_bytes)} this tool reads"
    return None


def read_bytes(path: Path | str, what: str, fix: str, *, max_bytes: int = MAX_BYTES,
               missing: str | None = None) -> bytes:
    """The bytes of ``path``, a regular file of at most ``max_bytes``; else InputError naming ``what`` it is
    and ``fix`` (``missing``: the fix when it is not there)."""
    named = _named(what, path)
    if problem := file_problem(path, what, max_bytes):
        if problem.endswith(" not found"):
            raise InputError(f"{problem}; {missing or fix}")
        if problem.endswith(" is a folder, not a regular file"):
            raise InputError(f"{named} is a folder; name the file in it")
        raise InputError(f"{problem}; {fix}")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise InputError(f"{named} cannot be read ({exc.strerror or exc}); {fix}") from None
    with os.fdopen(fd, "rb") as handle:
        mode = os.fstat(handle.fileno()).st_mode
        if not stat.S_ISREG(mode):  # swapped for something else since it was judged
            raise InputError(f"{named} is {kind(mode)}, not a regular file; {fix}")
        try:
            data = handle.read(max_bytes + 1)
        except OSError as exc:
            raise InputError(f"{named} cannot be read ({exc.strerror or exc}); {fix}") from None
    if len(data) > max_bytes:  # it grew while it was read
        raise InputError(f"{named} is over the {size_text(max_bytes)} this tool reads; {fix}")
    return data


def read_text(path: Path | str, what: str, fix: str, *, max_bytes: int = MAX_BYTES, missing: str | None = None) -> str:
    """``read_bytes`` decoded as UTF-8; InputError, naming the byte, where it is not UTF-8."""
    data = read_bytes(path, what, fix, max_bytes=max_bytes, missing=missing)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{_named(what, path)} is not UTF-8 text (byte {exc.start}: {exc.reason}); {fix}") from None


def read_json(path: Path | str, what: str, fix: str, finite: bool = False, missing: str | None = None,
              max_bytes: int = MAX_BYTES) -> Any:
    """``path`` parsed as JSON (``read_text``'s rungs first); InputError naming ``what`` it is and ``fix`` where it
    is not JSON (``finite``: or holds NaN or Infinity, which Python's json reads and no measurement is)."""
    text = read_text(path, what, fix, max_bytes=max_bytes, missing=missing)
    try:
        return json.loads(text, **({"parse_constant": _no_constant} if finite else {}))
    except ValueError as exc:
        raise InputError(f"{_named(what, path)} is not JSON ({exc}); {fix}") from None


def read_json_object(path: Path | str, what: str, fix: str, not_object: str) -> dict[str, Any]:
    """``read_json`` held to a JSON object, the first shape a document (a config, a certificate) must have;
    InputError ``not_object`` where it is another JSON value."""
    data = read_json(path, what, fix)
    if not isinstance(data, dict):
        raise InputError(not_object)
    return data


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def folder_problem(path: Path | str, what: str = "") -> str | None:
    """Why ``path`` is not a folder this tool reads files from (missing, a file, a FIFO, a device); None when it
    is one."""
    st = _stat_of_kind(path, _named(what, path), stat.S_ISDIR, "a folder")
    return st if isinstance(st, str) else None
