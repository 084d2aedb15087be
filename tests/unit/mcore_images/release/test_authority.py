"""The release authority builds only on its own last write: judged from data, with the registry replaced by a dict
(the real registry, oras and cosign: tests/registry/test_ledger_attacks.py)."""

from __future__ import annotations

import copy
import subprocess
import threading
import time
from typing import Any

import pytest

from mcore_images.release import authority, ledger_state, registry
from mcore_images.release.ledger import Ledger, LedgerRefused
from mcore_images.release.ledger_state import Head

REPO = "127.0.0.1:5000/mcore-images"
KEY = "cosign.key"


def digest(n: int, fork: str = "") -> str:
    return "sha256:" + (fork + str(n)).rjust(64, "0")


class Registry:
    """A ledger tag and the versions under it, as `read` and `write` would find and leave them."""

    def __init__(self) -> None:
        self.versions: dict[str, Ledger] = {}
        self.head: str | None = None

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(registry, "_run", lambda argv, *a, **kw: subprocess.CompletedProcess(argv, 0, "", ""))
        monkeypatch.setattr(authority, "read", self.read)
        monkeypatch.setattr(authority, "checked", self.read)
        monkeypatch.setattr(authority, "write", self.write)
        monkeypatch.setattr(authority, "versions", self.numbers)

    def numbers(self, repository: str, run: Any = None) -> list[int]:
        """The versions under their own tags (mcore-images-ledger-N), which deleting the head tag leaves."""
        return sorted({found.version for found in self.versions.values()})

    def read(self, repository: str, key: str, run: Any = None) -> tuple[Ledger, str] | None:
        return None if self.head is None else (copy.deepcopy(self.versions[self.head]), self.head)

    def write(self, found: Ledger, key: str, previous: str | None, run: Any = None) -> str:
        time.sleep(0.2)  # a write takes a while: a writer that did not wait would overlap it
        found.version += 1
        found.previous = previous
        self.head = digest(found.version, fork=str(len(self.versions)))
        self.versions[self.head] = copy.deepcopy(found)
        return self.head

    def put_back(self, version: int) -> str:
        self.head = next(d for d, found in self.versions.items() if found.version == version)
        return self.head


def record(name: str) -> Any:
    return lambda found: found.tags.__setitem__(name, {"digest": digest(0), "version": found.version + 1})


def test_the_authoritys_view_of_what_it_finds() -> None:
    mine = Head(4, digest(4))
    assert authority.writer_problem(REPO, mine, mine) is None
    assert authority.writer_problem(REPO, None, None) is None  # the first write
    older = authority.writer_problem(REPO, Head(2, digest(2)), mine)
    assert older == (f"the release ledger of {REPO} is version 2 ({digest(2)}), older than version 4 ({digest(4)}) "
                     "this release authority wrote last: put back by someone without the key; refusing to build on "
                     f"it; put the authority's back (`oras tag {REPO}@{digest(4)} mcore-images-ledger`)")
    assert "another ledger under the number of version 4" in authority.writer_problem(REPO, Head(4, "sha256:f"), mine)
    assert "newer than version 4" in authority.writer_problem(REPO, Head(5, digest(5)), mine)
    assert "has no release ledger, but this release authority wrote its version 4" in authority.writer_problem(
        REPO, None, mine)
    unknown = authority.writer_problem(REPO, Head(4, digest(4)), None)
    assert "has no record of writing" in unknown and f"--adopt {digest(4)}" in unknown


def test_an_older_ledger_put_back_is_refused_before_the_caller_changes_anything(
        monkeypatch: pytest.MonkeyPatch) -> None:
    held = Registry()
    held.install(monkeypatch)
    for name in ("a", "b", "c"):
        authority.update(REPO, KEY, record(name))
    assert ledger_state.written(REPO) == Head(3, held.head)
    held.put_back(1)
    acted = []
    with pytest.raises(LedgerRefused, match=r"is version 1 .*older than version 3"), authority.writing(REPO, KEY):
        acted.append("attached a certificate")
    assert acted == [] and held.versions[held.head].version == 1  # nothing attached, nothing written


def test_two_writers_of_one_home_take_turns_and_keep_both_records(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: each read version N and wrote its own N+1; the second one's tag won and the first one's record was
    lost. The second now waits for the lock, then builds on the first one's write."""
    held = Registry()
    held.install(monkeypatch)
    authority.update(REPO, KEY, record("first"))
    errors: list[BaseException] = []

    def write(name: str) -> None:
        try:
            authority.update(REPO, KEY, record(name))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(name,)) for name in ("x", "y")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    head = held.versions[held.head]
    assert head.version == 3 and set(head.tags) == {"first", "x", "y"}


def test_a_new_home_adopts_the_ledger_it_finds_and_never_over_its_own_record(monkeypatch: pytest.MonkeyPatch) -> None:
    held = Registry()
    held.install(monkeypatch)
    assert "no release ledger yet" in authority.adopt(REPO, "cosign.pub", None)
    authority.update(REPO, KEY, record("a"))
    first = held.head
    assert "is this authority's last write" in authority.adopt(REPO, "cosign.pub", None)
    ledger_state.written_file(REPO).unlink()  # a new home: the ledger is there, no record of writing it
    with pytest.raises(LedgerRefused, match="has no record of writing"):
        authority.update(REPO, KEY, record("b"))
    with pytest.raises(LedgerRefused, match=r"not sha256:0+9 named to adopt"):
        authority.adopt(REPO, "cosign.pub", digest(9))
    assert authority.adopt(REPO, "cosign.pub", first).startswith(f"adopted version 1 ({first})")
    authority.update(REPO, KEY, record("b"))
    held.put_back(1)
    with pytest.raises(LedgerRefused, match="older than version 2"):
        authority.adopt(REPO, "cosign.pub", None)  # a record of its own is never replaced


def test_a_writer_without_its_record_does_not_restart_a_ledger_whose_tag_was_deleted(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: someone without the key deleted the ledger tag; the next `attach` from an empty state folder (a new
    machine, a hosted runner) exited 0 having signed a version 1 with no previous version and none of the records,
    which fresh clients then took. Now it is refused, naming the versions left and the two ways on."""
    held = Registry()
    held.install(monkeypatch)
    for name in ("a", "b", "c"):
        authority.update(REPO, KEY, record(name))
    held.head = None  # `oras manifest delete` of the tag's manifest: the -N tags stay
    ledger_state.written_file(REPO).unlink()  # a new home of the authority: an empty state folder
    ledger_state.seen_file(REPO).unlink()
    written = dict(held.versions)
    acted = []
    with pytest.raises(LedgerRefused) as refused, authority.writing(REPO, KEY):
        acted.append("attached a certificate")
    assert acted == [] and held.versions == written and held.head is None
    assert str(refused.value) == (
        f"{REPO} has no mcore-images-ledger tag, but holds versions 1, 2, 3 of its release ledger "
        "(mcore-images-ledger-N): the tag was deleted by someone without the key; put the newest back (`oras tag "
        f"{REPO}:mcore-images-ledger-3 mcore-images-ledger`) and adopt it (`mcore-images ledger {REPO} --key <public "
        f"key> --adopt`), or start a new ledger above them (`mcore-images ledger {REPO} --key <public key> "
        "--start-over <private key>`)")
    with pytest.raises(LedgerRefused, match="has no mcore-images-ledger tag, but holds versions 1, 2, 3"):
        authority.adopt(REPO, "cosign.pub", None)


def test_starting_over_is_explicit_numbered_above_every_version_and_only_where_the_tag_is_gone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    held = Registry()
    held.install(monkeypatch)
    for name in ("a", "b"):
        authority.update(REPO, KEY, record(name))
    with pytest.raises(LedgerRefused, match=r"is there \(version 2, .*--start-over is for a repository whose"):
        authority.start_over(REPO, KEY)
    held.head = None
    ledger_state.written_file(REPO).unlink()
    new = authority.start_over(REPO, KEY)
    assert new.version == 3 and new.previous is None and not new.tags and not new.certificates
    assert ledger_state.written(REPO) == Head(3, held.head)
    authority.update(REPO, KEY, record("c"))  # its next write builds on it
    assert held.versions[held.head].version == 4
