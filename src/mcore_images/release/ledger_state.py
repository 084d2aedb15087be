"""What this machine keeps about release ledgers, beside the registry that serves them.

A registry writer without the key can put back any older signed ledger; only a record kept elsewhere tells an
older one from the newest. Two records, per repository, under ``$MCORE_IMAGES_STATE`` (default the XDG state home):

- ``ledgers/``: the newest version (and its digest) a client on this machine accepted: verify refuses an older one,
  another one under the same number, and one that does not descend from it.
- ``ledger-writes/``: the version (and digest) the release authority on this machine wrote last: it builds only on
  that one. Where the authority keeps its key, it keeps this record (`.ci/release-local.sh`: beside the key).

A lock per repository (``ledger-writes/<name>.lock``) makes the writers of one home take turns: the second waits,
then reads the first one's write as the head it builds on.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from mcore_images import create_only, reading
from mcore_images.errors import InputError

STATE_ENV = "MCORE_IMAGES_STATE"
LOCK_WAIT_S = 600.0
"""How long a writer waits for another writer of the same home (a ledger write is a few registry calls)."""


class Head(NamedTuple):
    """One version of a repository's ledger: its number and the digest it was pushed as (None in a record made
    before digests were kept)."""

    version: int
    digest: str | None


def home() -> Path:
    return Path(os.environ.get(STATE_ENV) or os.path.join(
        os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state"), "mcore-images"))


def _name(repository: str) -> str:
    return hashlib.sha256(repository.encode()).hexdigest()[:24]


def seen_file(repository: str) -> Path:
    return home() / "ledgers" / f"{_name(repository)}.json"


def written_file(repository: str) -> Path:
    return home() / "ledger-writes" / f"{_name(repository)}.json"


def _store(path: Path, repository: str, head: Head) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    create_only.replace_text(path, json.dumps({"repository": repository, "version": head.version,
                                               "digest": head.digest}) + "\n")


def seen(repository: str) -> Head | None:
    """The newest ledger version a client on this machine accepted for the repository."""
    try:
        data = reading.read_json(seen_file(repository), "", "")
        return Head(int(data["version"]), data.get("digest"))
    except (InputError, KeyError, TypeError, ValueError):
        return None


def remember(repository: str, head: Head) -> None:
    """Keep ``head`` as the newest seen (a newer version, or the digest of the version seen where it was unknown)."""
    before = seen(repository)
    if before is None or before.version < head.version or (before.version == head.version and not before.digest):
        _store(seen_file(repository), repository, head)


def written(repository: str) -> Head | None:
    """The ledger version this machine's release authority wrote last for the repository (None: it never wrote
    one, or it was made before this record was kept)."""
    path = written_file(repository)
    if not os.path.lexists(path):
        return None
    try:
        data = reading.read_json(path, "", "")
        return Head(int(data["version"]), str(data["digest"]))
    except (InputError, KeyError, TypeError, ValueError) as exc:
        raise InputError(f"the release authority's record {path} cannot be read ({exc}): restore it from a backup of "
                         "that folder, or remove it and adopt the ledger (`mcore-images ledger REPO --key … "
                         "--adopt DIGEST`)") from None


def record_write(repository: str, head: Head) -> None:
    _store(written_file(repository), repository, head)


@contextmanager
def writer_lock(repository: str, wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """This home's writers of one repository's ledger, one at a time (an flock: released when the process ends)."""
    path = written_file(repository).with_suffix(".lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise InputError(f"another writer of the release ledger of {repository} has held {path} for "
                                     f"{wait_s:g} s: wait for it to finish, or end it") from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
