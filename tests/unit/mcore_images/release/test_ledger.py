"""What a client refuses of a release ledger, judged from data (the real registry and cosign: tests/registry):
another ledger under the number it saw, one that does not descend from it, and a recorded certificate whose
signature is gone."""

from __future__ import annotations

import pytest

from mcore_images.release import ledger, registry
from mcore_images.release.ledger import Ledger
from mcore_images.release.ledger_state import Head

REPO = "127.0.0.1:5000/mcore-images"


def digest(name: str) -> str:
    return "sha256:" + name.encode().hex().ljust(64, "0")[:64]


def chain(*names: str) -> dict[str, Ledger]:
    """Ledgers by digest, version 1… in order, each naming the one before it."""
    out, previous = {}, None
    for version, name in enumerate(names, start=1):
        out[digest(name)] = Ledger(REPO, version=version, previous=previous)
        previous = digest(name)
    return out


def descent(store: dict[str, Ledger], head: str, before: Head) -> str | None:
    return ledger.descent_problem(REPO, store[head], head, before, lambda link: _load(store, link))


def _load(store: dict[str, Ledger], link: str) -> Ledger:
    if link not in store:
        raise registry.RegistryError(f"fetching the release ledger of {REPO} ({link}) failed (not found)")
    return store[link]


def test_another_ledger_under_the_number_seen_is_refused_and_an_older_one_too() -> None:
    seen = Head(4, digest("v4"))
    assert ledger.seen_problem(REPO, Head(4, digest("v4")), seen) is None
    assert ledger.seen_problem(REPO, Head(5, digest("v5")), seen) is None  # newer: descent_problem's to judge
    assert "older than version 4 this machine saw: rolled back" in ledger.seen_problem(REPO, Head(3, "x"), seen)
    same = ledger.seen_problem(REPO, Head(4, digest("fork")), seen)
    assert same == (f"the release ledger of {REPO} is version 4 ({digest('fork')}), but the version 4 this machine saw "
                    f"is {digest('v4')}: another ledger under the same number, built on an older one put back by "
                    "someone without the key")
    assert ledger.seen_problem(REPO, Head(4, digest("fork")), Head(4, None)) is None  # a record without its digest


def test_a_newer_ledger_must_descend_from_the_version_seen() -> None:
    store = chain("v1", "v2", "v3", "v4", "v5", "v6")
    assert descent(store, digest("v6"), Head(4, digest("v4"))) is None
    assert descent(store, digest("v5"), Head(4, digest("v4"))) is None  # one step
    assert descent(store, digest("v6"), Head(6, digest("v6"))) is None  # not newer: nothing to follow
    assert descent(store, digest("v6"), Head(4, None)) is None  # a record without its digest: number only


def test_a_ledger_written_over_an_older_one_put_back_does_not_descend() -> None:
    """Version 2 put back, versions 3' 4' 5' written on top: 5' reaches version 4 at 4', not at the 4 seen."""
    store = {**chain("v1", "v2", "v3", "v4"), **{d: Ledger(REPO, version=v, previous=p) for d, v, p in (
        (digest("f3"), 3, digest("v2")), (digest("f4"), 4, digest("f3")), (digest("f5"), 5, digest("f4")))}}
    assert descent(store, digest("f5"), Head(4, digest("v4"))) == (
        f"the release ledger of {REPO} version 5 ({digest('f5')}) descends from version 4 {digest('f4')}, not "
        f"version 4 ({digest('v4')}) this machine saw: written on top of an older ledger put back by someone without "
        "the key")
    assert "descends from version 3" in descent(store, digest("f5"), Head(3, digest("v3")))


def test_a_chain_that_cannot_be_followed_is_refused() -> None:
    store = chain("v1", "v2", "v3", "v4", "v5")
    gone = dict(store)
    del gone[digest("v4")]
    assert "which the registry no longer holds" in descent(gone, digest("v5"), Head(3, digest("v3")))
    renumbered = dict(store)
    renumbered[digest("v4")] = Ledger(REPO, version=7, previous=digest("v3"))
    assert "but it is version 7: its chain of versions is broken" in descent(renumbered, digest("v5"),
                                                                             Head(2, digest("v2")))
    fresh = {digest("n5"): Ledger(REPO, version=5, previous=None)}
    assert "names no previous version, but this machine saw version 4" in descent(fresh, digest("n5"),
                                                                                  Head(4, digest("v4")))


def test_a_registry_that_cannot_answer_is_not_a_refusal() -> None:
    store = chain("v1", "v2", "v3")

    def unreachable(link: str) -> Ledger:
        raise registry.RegistryError("fetching … failed (connection refused); check the registry address")

    with pytest.raises(registry.RegistryError, match="connection refused"):
        ledger.descent_problem(REPO, store[digest("v3")], digest("v3"), Head(1, digest("v1")), unreachable)


def test_a_recorded_certificate_whose_signature_is_gone_is_named() -> None:
    image, kept, hidden, stray = digest("image"), digest("passed"), digest("failed"), digest("stray")
    record = Ledger(REPO, version=3, certificates={image: [
        {"certificate": kept, "status": "passed", "created": "2026-12-01T10:00:00+00:00", "version": 1},
        {"certificate": hidden, "status": "failed", "created": "2026-12-01T11:00:00+00:00", "version": 2}]})
    assert ledger.unsigned_certificates(record, image, {}, "cosign.pub") == []
    assert ledger.unsigned_certificates(record, image, {stray: "it is not signed"}, "cosign.pub") == []  # unrecorded
    assert ledger.unsigned_certificates(record, image, {hidden: "it is not signed"}, "cosign.pub") == [
        f"certificate {hidden} (failed, created 2026-12-01T11:00:00+00:00), recorded in the signed release ledger "
        "(version 2), is no longer signed with cosign.pub (it is not signed): its signature removed by someone without "
        "the key"]


def test_a_version_is_never_pushed_over_its_own_tag(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: the restarted writer pushed its version 1 over the existing mcore-images-ledger-1 tag. A write whose
    version's tag already names something is refused before anything is pushed."""
    tags = {ledger.TAG: digest("v2"), f"{ledger.TAG}-1": digest("v1"), f"{ledger.TAG}-2": digest("v2")}
    calls: list[list[str]] = []
    monkeypatch.setattr(ledger, "tag_digest", lambda repository, tag, run=None: tags.get(tag))
    monkeypatch.setattr(registry, "_run", lambda argv, *a, **kw: calls.append(argv))
    written = Ledger(REPO, version=0)  # a writer that believes it starts the ledger
    tags.pop(ledger.TAG)
    with pytest.raises(ledger.LedgerRefused, match=rf"{REPO}:{ledger.TAG}-1 already names {digest('v1')}: version 1 "
                       "of the release ledger .* is never written twice; version 1 was not pushed"):
        ledger.write(written, "cosign.key", None)
    assert calls == []  # nothing pushed, nothing signed


def test_a_fresh_client_refuses_a_repository_whose_ledger_tag_is_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    """A client that never read the ledger used to take "no ledger" for a repository whose tag was deleted and whose
    versions remain, and then judged its tags and certificates without it."""
    monkeypatch.setattr(ledger, "read", lambda repository, key, run=None: None)
    monkeypatch.setattr(ledger, "versions", lambda repository, run=None: [1, 2, 3, 4])
    with pytest.raises(ledger.LedgerRefused, match=r"has no mcore-images-ledger tag, but holds versions 1 … 4 of"):
        ledger.checked(REPO, "cosign.pub")
    monkeypatch.setattr(ledger, "versions", lambda repository, run=None: [])
    assert ledger.checked(REPO, "cosign.pub") is None  # a repository that never had one
