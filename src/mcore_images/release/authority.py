"""The release authority: the one writer of a repository's release ledger, which builds only on its own last write.

A registry writer without the key can put back an older signed ledger; if the authority's next routine write
(`attach`, `promote --execute`, `ledger --refresh`) built on whatever the tag names, it would sign that replay again
as the newest version, and erase whatever was recorded since. So the authority keeps the version and digest it wrote
last (ledger_state.py: under ``$MCORE_IMAGES_STATE``, which it keeps with its key) and refuses any other head, saying
what it found and how to put its own back. Its writers on one home take turns (a lock): a second `attach` waits, then
builds on the first one's write. A home with no record adopts the ledger it finds, explicitly (`ledger --adopt`).

`mcore-images ledger` shows a repository's ledger as a client accepts it, refreshes its expiry, or adopts it.
"""

from __future__ import annotations

import argparse
import atexit
import datetime as dt
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from mcore_images.catalogue import images
from mcore_images.command import Command, print_json
from mcore_images.errors import InputError
from mcore_images.release import ledger_state, registry
from mcore_images.release.ledger import (
    LIFETIME_DAYS,
    TAG,
    Ledger,
    LedgerRefused,
    accepted,
    checked,
    gone_problem,
    read,
    versions,
    write,
)
from mcore_images.release.ledger_state import Head
from mcore_images.release.registry import Runner


def writer_problem(repository: str, found: Head | None, mine: Head | None) -> str | None:
    """Why the release authority, whose last write was ``mine``, may not build on ``found``, the ledger the
    registry holds (None: it is that write, or neither exists)."""
    restore = f"`oras tag {repository}@{mine.digest} {TAG}`" if mine else ""
    if found == mine:
        return None
    if found is None:
        assert mine is not None
        return (f"{repository} has no release ledger, but this release authority wrote its version {mine.version} "
                f"({mine.digest}): deleted by someone without the key; put it back ({restore}) and write again")
    if mine is None:
        return (f"this release authority has no record of writing the release ledger of {repository}, which is "
                f"version {found.version} ({found.digest}): refusing to build on a ledger it cannot tell from an "
                f"older one put back; if it is the authority's last write, adopt it (`mcore-images ledger {repository}"
                f" --key <public key> --adopt {found.digest}`), or keep the authority's record "
                f"({ledger_state.written_file(repository)}) with its key")
    if found.version <= mine.version:
        what = ("older than" if found.version < mine.version else "another ledger under the number of")
        return (f"the release ledger of {repository} is version {found.version} ({found.digest}), {what} version "
                f"{mine.version} ({mine.digest}) this release authority wrote last: put back by someone without the "
                f"key; refusing to build on it; put the authority's back ({restore})")
    return (f"the release ledger of {repository} is version {found.version} ({found.digest}), newer than version "
            f"{mine.version} ({mine.digest}) this release authority wrote last: written with the key from another "
            "home; refusing to build on it (the writers of one ledger share one record, kept with the key)")


def _public_key(key: str, run: Runner | None) -> Path:
    """The public half of ``key`` (a private key file, an env:// key or a KMS key: `cosign public-key` derives it from
    each), in a file of this process's that lives until it ends."""
    folder = Path(tempfile.mkdtemp(prefix="mcore-images-key-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    public = folder / "cosign.pub"
    registry._run(["cosign", "public-key", "--key", key, "--outfile", str(public)],
                  "deriving the public key of the signing key",
                  env={"COSIGN_PASSWORD": os.environ.get("COSIGN_PASSWORD", "")}, **({"run": run} if run else {}))
    return public


@dataclass
class Writer:
    """The ledger the release authority's last write left, held under this home's lock until ``commit``."""

    repository: str
    key: str
    ledger: Ledger
    head: str | None
    run: Runner | None = None

    def commit(self, change: Callable[[Ledger], None]) -> Ledger:
        """Apply ``change`` and write it as the next version, signed; record it as this authority's last write."""
        change(self.ledger)
        digest = write(self.ledger, self.key, self.head, self.run)
        self.head = digest
        ledger_state.record_write(self.repository, Head(self.ledger.version, digest))
        ledger_state.remember(self.repository, Head(self.ledger.version, digest))
        return self.ledger


@contextmanager
def writing(repository: str, key: str, run: Runner | None = None) -> Iterator[Writer]:
    """This home's turn to write the repository's ledger with ``key`` (a private key): the head is read and held to
    the authority's last write before the caller changes anything (attach and promote write their referrer or
    tags inside), and a writer of this home that comes meanwhile waits, then builds on this one's write."""
    with ledger_state.writer_lock(repository):
        current = read(repository, str(_public_key(key, run)), run)
        found = None if current is None else Head(current[0].version, current[1])
        if problem := writer_problem(repository, found, ledger_state.written(repository)):
            raise LedgerRefused(problem)
        if current is None and (before := ledger_state.seen(repository)) is not None:
            raise LedgerRefused(f"{repository} has no release ledger, but this machine saw its version "
                                f"{before.version}: deleted by someone without the key; put it back before writing")
        if current is None and (held := versions(repository, run)):
            # No tag, no record, but versions under their own tags: the tag was deleted, not never written. A first
            # write here would sign a version 1 with none of the records, and clients new to the repository would
            # take it.
            raise LedgerRefused(gone_problem(repository, held))
        ledger, head = current if current is not None else (Ledger(repository), None)
        yield Writer(repository, key, ledger, head, run)


def update(repository: str, key: str, change: Callable[[Ledger], None], run: Runner | None = None) -> Ledger:
    """Write ``change(ledger)`` as the next version of the repository's ledger, signed with ``key``; a repository
    without one starts at version 1."""
    with writing(repository, key, run) as writer:
        return writer.commit(change)


def adopt(repository: str, key: str, digest: str | None, run: Runner | None = None) -> str:
    """Take the ledger the registry holds (``digest``, where given) as this release authority's last write: for a
    new home of the authority, or one whose record predates it. A client's checks apply, and a record of its own
    is never replaced. Returns what was done, in one line."""
    with ledger_state.writer_lock(repository):
        found = checked(repository, key, run)  # a tag gone while versions remain is refused there too
        mine = ledger_state.written(repository)
        if found is None:
            if mine is None and (held := versions(repository, run)):
                raise LedgerRefused(gone_problem(repository, held))
            if digest is not None or mine is not None:
                raise LedgerRefused(writer_problem(repository, None, mine) if mine else
                                    f"{repository} has no release ledger to adopt: `attach` and `promote --execute` "
                                    "start it")
            return f"{repository} has no release ledger yet: this release authority's first write starts it"
        ledger, at = found
        head = Head(ledger.version, at)
        if mine is not None:
            if problem := writer_problem(repository, head, mine):
                raise LedgerRefused(problem)
            return f"version {head.version} ({at}) of the release ledger of {repository} is this authority's last write"
        if digest is not None and digest != at:
            raise LedgerRefused(f"the release ledger of {repository} is version {head.version} ({at}), not {digest} "
                                "named to adopt: refusing to adopt it")
        ledger_state.record_write(repository, head)
        ledger_state.remember(repository, head)
        return (f"adopted version {head.version} ({at}) of the release ledger of {repository}, signed, as this "
                "release authority's last write: its next write builds on it")


def start_over(repository: str, key: str, run: Runner | None = None) -> Ledger:
    """Start a new ledger for a repository whose ledger tag is gone, told to explicitly (`ledger --start-over`): its
    first version is numbered above every version the repository holds, so none is overwritten, and names no previous
    one, so every client that saw the old ledger refuses it until its owner removes that machine's record. The old
    records are not carried over: a writer without the key deleted the tag, and nothing here can tell which of the
    versions left is the last the key signed. Returns the ledger written."""
    with ledger_state.writer_lock(repository):
        public = _public_key(key, run)
        if (current := read(repository, str(public), run)) is not None:
            raise LedgerRefused(f"the release ledger of {repository} is there (version {current[0].version}, "
                                f"{current[1]}): refresh it (`--refresh`) or adopt it (`--adopt`); --start-over is for "
                                f"a repository whose {TAG} tag is gone")
        held = versions(repository, run)
        ledger = Ledger(repository, version=max(held, default=0))
        digest = write(ledger, key, None, run)
        ledger_state.record_write(repository, Head(ledger.version, digest))
        ledger_state.remember(repository, Head(ledger.version, digest))
        return ledger


# ---------------------------------------------------------------------------------------------
# `mcore-images ledger`


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("repository", help="the repository whose release ledger to read, e.g. ghcr.io/acme/mcore-images")
    p.add_argument("--key", required=True, help="the cosign public key (file or KMS URI) the ledger is signed with")
    action = p.add_mutually_exclusive_group()
    action.add_argument("--refresh", metavar="SIGN_KEY", help="write the ledger again as its next version, unchanged "
                        f"but for a new expiry ({LIFETIME_DAYS:g} days), signed with this private key: what the "
                        "release process runs before the ledger expires")
    action.add_argument("--adopt", metavar="DIGEST", nargs="?", const="", help="take the ledger the registry holds "
                        "(the one with DIGEST, where given) as this release authority's last write, which its writes "
                        "build on: for a new home of the authority; never replaces a record of its own")
    action.add_argument("--start-over", metavar="SIGN_KEY", help=f"where the {TAG} tag is gone: start a new ledger, "
                        f"signed with this private key, numbered above every {TAG}-N version the repository holds "
                        "(none is overwritten) and carrying none of their records; clients that saw the old one "
                        "refuse it until their record is removed")


def _run(args: argparse.Namespace) -> int:

    try:
        parsed = images.parse(f"{args.repository}:{TAG}")
    except ValueError as exc:
        raise InputError(f"{exc}; give a repository such as ghcr.io/acme/mcore-images") from None
    if parsed.repository != args.repository:
        raise InputError(f"{args.repository!r} is not a repository: give it without a tag or digest")
    if args.adopt and not images.is_digest(args.adopt):
        raise InputError(f"--adopt {args.adopt!r} is not a digest: give the ledger's sha256:<64 hex>, or no value to "
                         "adopt the one the registry holds")
    for option, key, private in (("--key", args.key, False), ("--refresh", args.refresh, True),
                                 ("--start-over", args.start_over, True)):
        if key and (problem := registry.key_problem(key, option, private)):
            raise InputError(problem)
    now = dt.datetime.now(dt.UTC)
    if args.adopt is not None:
        said = adopt(args.repository, args.key, args.adopt or None)
        if args.json:
            print_json({"repository": args.repository, "adopted": said})
        else:
            print(said)
        return 0
    if args.start_over:
        found = start_over(args.repository, args.start_over)
        if args.json:
            print_json(asdict(found))
        else:
            print(f"started a new release ledger of {found.repository}: version {found.version}, signed, expires "
                  f"{found.expires}; no earlier record carried over")
        return 0
    if args.refresh:
        current = read(args.repository, args.key)
        if current is None:
            raise InputError(f"{args.repository} has no release ledger to refresh: `attach` and `promote --execute` "
                             "write it")
        found = update(args.repository, args.refresh, lambda ledger: None)
    else:
        found = accepted(args.repository, args.key, now)
        if found is None:
            raise InputError(f"{args.repository} has no release ledger yet: `attach` and `promote --execute` write it")
    if args.json:
        print_json(asdict(found))
    else:
        print(f"release ledger of {found.repository}: version {found.version}, signed, issued {found.issued}, expires "
              f"{found.expires}")
        for tag, entry in sorted(found.tags.items()):
            print(f"  {tag} → {entry['digest']} (since version {entry['version']})")
        for digest, records in sorted(found.certificates.items()):
            print(f"  {digest}: " + ", ".join(f"{r['certificate'][:19]}… {r['status']} ({r['created']})"
                                              for r in records))
    return 0


COMMANDS = (Command("ledger", "Show a repository's signed release ledger (where its tags must point), or refresh or "
                    "adopt it.",
                    _arguments, _run, prints_data=True,
                    description="Reads the release ledger `attach` and `promote --execute` write (docs/release.md), "
                    "checks its signature, that it follows the version this machine saw (not older, not another "
                    "under its number, descended from it) and that it has not expired. --refresh and --adopt act as "
                    "the release authority, which builds only on its own last write."),)
