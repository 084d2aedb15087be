"""What this machine keeps of release ledgers: the newest version (and digest) a client saw, the authority's last
write, and the lock that makes one home's writers take turns."""

from __future__ import annotations

import json
import threading
import time

import pytest

from mcore_images.errors import InputError
from mcore_images.release import ledger_state
from mcore_images.release.ledger_state import Head

REPO = "127.0.0.1:5000/mcore-images"
D = {n: "sha256:" + str(n) * 64 for n in range(1, 6)}


def test_a_client_keeps_the_newest_version_and_its_digest() -> None:
    assert ledger_state.seen(REPO) is None
    ledger_state.remember(REPO, Head(3, D[3]))
    ledger_state.remember(REPO, Head(2, D[2]))  # older: kept is the newest
    assert ledger_state.seen(REPO) == Head(3, D[3])
    ledger_state.remember(REPO, Head(3, D[4]))  # the same number again never replaces the digest seen
    assert ledger_state.seen(REPO) == Head(3, D[3])
    ledger_state.remember(REPO, Head(4, D[4]))
    assert ledger_state.seen(REPO) == Head(4, D[4])


def test_a_record_made_before_digests_were_kept_learns_its_digest() -> None:
    path = ledger_state.seen_file(REPO)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"repository": REPO, "version": 4}))
    assert ledger_state.seen(REPO) == Head(4, None)
    ledger_state.remember(REPO, Head(4, D[4]))
    assert ledger_state.seen(REPO) == Head(4, D[4])


def test_the_authority_keeps_its_last_write_and_an_unreadable_record_is_one_line() -> None:
    assert ledger_state.written(REPO) is None
    ledger_state.record_write(REPO, Head(5, D[5]))
    assert ledger_state.written(REPO) == Head(5, D[5])
    assert ledger_state.written("127.0.0.1:5000/other") is None  # per repository
    ledger_state.written_file(REPO).write_text("{not json")
    with pytest.raises(InputError, match=r"cannot be read .*--adopt DIGEST"):
        ledger_state.written(REPO)


def test_one_homes_writers_take_turns() -> None:
    """Two writers (threads here, processes in use: an flock) never hold the lock together; the second waits."""
    inside, overlaps, order = [0], [], []

    def writer(name: str) -> None:
        with ledger_state.writer_lock(REPO):
            inside[0] += 1
            overlaps.append(inside[0])
            order.append(name)
            time.sleep(0.5)
            inside[0] -= 1

    threads = [threading.Thread(target=writer, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlaps == [1, 1] and sorted(order) == ["a", "b"]


def test_a_writer_that_waits_too_long_is_told_who_holds_the_lock() -> None:
    held, release = threading.Event(), threading.Event()

    def holder() -> None:
        with ledger_state.writer_lock(REPO):
            held.set()
            release.wait(10)

    thread = threading.Thread(target=holder)
    thread.start()
    held.wait(10)
    try:
        with (pytest.raises(InputError, match=r"another writer of the release ledger .* has held .*\.lock for 0\.3 s"),
              ledger_state.writer_lock(REPO, wait_s=0.3)):
            pass
    finally:
        release.set()
        thread.join()
