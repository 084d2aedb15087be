"""The release ledger against a registry writer without the key, in the real local registry with stock oras and
cosign: a recorded certificate's signature deleted, an older ledger put back for the release authority to sign again,
and writers racing. Each is refused in one line (or, for two writers of one home, loses nothing)."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mcore_images import cli
from mcore_images.release import ledger, promote, registry
from tests.registry.conftest import Pushed
from tests.registry.test_trust import attach, failed_over_passed, oras_tag, two_releases, verdict  # noqa: F401 (a fixture)


def repository_args(pushed: Pushed, keys: dict[str, Path]) -> list[str]:
    return [pushed.repository, "--key", str(keys["ours.pub"])]


def one_line_error(capsys: pytest.CaptureFixture) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    return err


def test_a_recorded_certificate_whose_signature_was_deleted_is_refused(
        push: Callable[..., Pushed], keys: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture) -> None:
    """Before: a passed and a newer failed certificate, both signed and recorded; `oras manifest delete
    …:sha256-<failed artifact>.sig` (push rights, no key), and verify said `PASSED … ignored: certificate …: it is
    not signed`, for a client that saw the ledger and for a fresh one; a promote dry run accepted it too."""
    pushed = push()
    bad = failed_over_passed(pushed, keys, tmp_path, capsys)
    signature = f"{pushed.repository}:sha256-{bad.removeprefix('sha256:')}.sig"
    subprocess.run(["oras", "manifest", "delete", "--plain-http", "--force", signature], check=True,
                   capture_output=True)
    assert bad in {r.digest for r in registry.certificates(pushed.image)}  # still attached, no longer signed
    for client in ("saw the ledger", "fresh"):
        if client == "fresh":
            monkeypatch.setenv("MCORE_IMAGES_STATE", str(tmp_path / "fresh-client"))
        code, found = verdict(pushed.ref, keys, capsys)
        assert code == 1 and found["status"] == "refused", (client, found)
        assert len(found["problems"]) == 1 and found["problems"][0].startswith(f"certificate {bad} (failed, created ")
        assert found["problems"][0].endswith(f"is no longer signed with {keys['ours.pub']} (it is not signed): its "
                                             "signature removed by someone without the key"), found["problems"]
    dry_run = cli.main(["promote", pushed.ref, "--stack", "debian", "--key", str(keys["ours.pub"]), "--policy", "ci"])
    err = one_line_error(capsys)
    assert dry_run == 1 and f"certificate {bad} (failed" in err and "is no longer signed" in err, err


def test_the_authority_does_not_sign_an_older_ledger_put_back(
        two_releases: tuple[Pushed, Pushed], keys: dict[str, Path], tmp_path: Path,  # noqa: F811
        capsys: pytest.CaptureFixture) -> None:
    """Before: `oras tag REPO:mcore-images-ledger-2 mcore-images-ledger` (no key), and the authority's next routine
    write (`ledger --refresh`, or any `attach`) built version 5 on top of version 2: its signed content said
    runtime-debian → the older digest, and a failed verdict recorded since was erased."""
    _, newer = two_releases  # versions 1 and 3: attach; 2 and 4: promote
    current = registry.resolve(newer.image.with_tag(ledger.TAG)).digest
    oras_tag(f"{newer.repository}:{ledger.TAG}-2", ledger.TAG)
    put_back = registry.resolve(newer.image.with_tag(ledger.TAG)).digest
    tags_before, certificates_before = newer.tags(), registry.certificates(newer.image)
    refused = (f"the release ledger of {newer.repository} is version 2 ({put_back}), older than version 4 ({current}) "
               "this release authority wrote last: put back by someone without the key; refusing to build on it; put "
               f"the authority's back (`oras tag {newer.repository}@{current} {ledger.TAG}`)")
    assert cli.main(["ledger", *repository_args(newer, keys), "--refresh", str(keys["ours.key"])]) == 1
    assert one_line_error(capsys) == f"error: {refused}"
    folder = newer.certificate(tmp_path / "failed", smoke_status="failed").parent
    assert cli.main(["attach", newer.ref, "--certificate", str(folder), "--key", str(keys["ours.key"])]) == 1
    assert one_line_error(capsys) == f"error: {refused}"
    assert newer.tags() == tags_before and registry.certificates(newer.image) == certificates_before  # nothing written
    oras_tag(f"{newer.repository}@{current}", ledger.TAG)  # the fix the refusal names
    assert cli.main(["ledger", *repository_args(newer, keys), "--refresh", str(keys["ours.key"])]) == 0
    assert "version 5, signed" in capsys.readouterr().out


def test_a_client_refuses_a_ledger_written_over_an_older_one_put_back(
        two_releases: tuple[Pushed, Pushed], keys: dict[str, Path], tmp_path: Path,  # noqa: F811
        capsys: pytest.CaptureFixture) -> None:
    """Before: a client that saw version 4 refused only an older number. A holder of the key that builds on what it
    finds (as the authority did before it kept its last write) writes over version 2 put back, and the registry
    writer moves runtime-debian to the older digest its versions 4 and 5 now name: both were accepted. (The registry
    writer deletes versions 3 and 4 first: a version is never pushed over its own tag.)"""
    older, newer = two_releases
    alias = f"{newer.repository}:runtime-debian"
    assert verdict(alias, keys, capsys)[0] == 0  # this client saw version 4
    seen = registry.resolve(newer.image.with_tag(ledger.TAG)).digest
    oras_tag(f"{newer.repository}:{ledger.TAG}-2", ledger.TAG)
    for version in (3, 4):
        delete_manifest(newer.repository, registry.resolve(newer.image.with_tag(f"{ledger.TAG}-{version}")).digest)

    def signed_again() -> str:
        found = ledger.read(newer.repository, str(keys["ours.pub"]))
        assert found is not None
        found[0].tags["runtime-debian"] = {"digest": older.digest, "version": found[0].version + 1}
        return ledger.write(found[0], str(keys["ours.key"]), found[1])

    signed_again()  # version 3 on top of version 2: older than the one seen (refused before, too)
    forked = signed_again()  # version 4 on top of it
    oras_tag(older.ref, "runtime-debian")  # where the forked ledger says the alias points
    code, found = verdict(alias, keys, capsys)
    assert code == 1 and found["problems"] == [
        f"the release ledger of {newer.repository} is version 4 ({forked}), but the version 4 this machine saw is "
        f"{seen}: another ledger under the same number, built on an older one put back by someone without the key"]
    newest = signed_again()  # version 5
    code, found = verdict(alias, keys, capsys)
    assert code == 1 and found["problems"] == [
        f"the release ledger of {newer.repository} version 5 ({newest}) descends from version 4 {forked}, not version "
        f"4 ({seen}) this machine saw: written on top of an older ledger put back by someone without the key"]


def delete_manifest(repository: str, digest: str | None) -> None:
    """What anyone who can push may do: delete a manifest by digest (every tag naming it goes with it)."""
    subprocess.run(["oras", "manifest", "delete", "--plain-http", "--force", f"{repository}@{digest}"], check=True,
                   capture_output=True)


def test_a_writer_without_its_record_does_not_restart_a_ledger_deleted_by_digest(
        two_releases: tuple[Pushed, Pushed], keys: dict[str, Path], tmp_path: Path,  # noqa: F811
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """Before: someone without the key deleted the newest ledger by digest (the ledger tag and mcore-images-ledger-4
    went with it); the next ordinary `attach` from an empty state folder (a new machine, a hosted runner) exited 0,
    having signed a version 1 with no previous version and none of the earlier records, moved the ledger tag and
    pushed over mcore-images-ledger-1; fresh clients then took the alias moved back to an older digest. Now that
    attach is refused with nothing written, a fresh client refuses the repository, and the fix named works."""
    older, newer = two_releases
    head = registry.resolve(newer.image.with_tag(ledger.TAG)).digest
    version_1 = registry.resolve(newer.image.with_tag(f"{ledger.TAG}-1")).digest
    delete_manifest(newer.repository, head)
    tags_before, certificates_before = newer.tags(), registry.certificates(newer.image)
    assert ledger.TAG not in tags_before and f"{ledger.TAG}-4" not in tags_before, tags_before
    monkeypatch.setenv("MCORE_IMAGES_STATE", str(tmp_path / "a-new-home"))
    gone = (f"{newer.repository} has no {ledger.TAG} tag, but holds versions 1, 2, 3 of its release ledger "
            f"({ledger.TAG}-N): the tag was deleted by someone without the key; put the newest back (`oras tag "
            f"{newer.repository}:{ledger.TAG}-3 {ledger.TAG}`) and adopt it (`mcore-images ledger {newer.repository} "
            f"--key <public key> --adopt`), or start a new ledger above them (`mcore-images ledger {newer.repository} "
            "--key <public key> --start-over <private key>`)")
    folder = newer.certificate(tmp_path / "again", smoke_status="failed").parent
    assert cli.main(["attach", newer.ref, "--certificate", str(folder), "--key", str(keys["ours.key"])]) == 1
    assert one_line_error(capsys) == f"error: {gone}"
    assert newer.tags() == tags_before and registry.certificates(newer.image) == certificates_before  # nothing written
    assert registry.resolve(newer.image.with_tag(f"{ledger.TAG}-1")).digest == version_1
    oras_tag(older.ref, "runtime-debian")  # the same writer moves the alias back
    monkeypatch.setenv("MCORE_IMAGES_STATE", str(tmp_path / "a-fresh-client"))
    code, found = verdict(f"{newer.repository}:runtime-debian", keys, capsys)
    assert code == 1 and found["problems"] == [gone], found
    monkeypatch.setenv("MCORE_IMAGES_STATE", str(tmp_path / "a-new-home"))
    oras_tag(f"{newer.repository}:{ledger.TAG}-3", ledger.TAG)  # the fix the refusal names
    assert cli.main(["ledger", *repository_args(newer, keys), "--adopt"]) == 0
    assert "adopted version 3" in capsys.readouterr().out
    assert cli.main(["attach", newer.ref, "--certificate", str(folder), "--key", str(keys["ours.key"])]) == 0
    found_now = ledger.read(newer.repository, str(keys["ours.pub"]))
    assert found_now is not None and found_now[0].version == 4 and found_now[0].previous is not None


def test_a_new_ledger_over_a_deleted_one_is_started_only_when_told_and_above_every_version(
        two_releases: tuple[Pushed, Pushed], keys: dict[str, Path], tmp_path: Path,  # noqa: F811
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    _, newer = two_releases
    delete_manifest(newer.repository, registry.resolve(newer.image.with_tag(ledger.TAG)).digest)
    kept = {tag: registry.resolve(newer.image.with_tag(tag)).digest for tag in newer.tags()
            if tag.startswith(f"{ledger.TAG}-")}
    monkeypatch.setenv("MCORE_IMAGES_STATE", str(tmp_path / "a-new-home"))
    assert cli.main(["ledger", *repository_args(newer, keys), "--start-over", str(keys["ours.key"])]) == 0
    assert "started a new release ledger" in capsys.readouterr().out
    started = ledger.read(newer.repository, str(keys["ours.pub"]))
    assert started is not None and started[0].version == 4 and started[0].previous is None
    assert {tag: registry.resolve(newer.image.with_tag(tag)).digest for tag in kept} == kept  # none overwritten
    assert cli.main(["ledger", *repository_args(newer, keys), "--start-over", str(keys["ours.key"])]) == 1
    assert "--start-over is for a repository whose" in one_line_error(capsys)


def pausing(when: Callable[[list[str]], bool], then: Callable[[], None]) -> Callable[..., Any]:
    """registry._run that runs ``then`` right after the first command of each thread that ``when`` picks."""
    real, done = registry._run, threading.local()

    def run(argv: list[str], *args: Any, **kwargs: Any) -> Any:
        proc = real(argv, *args, **kwargs)
        if not getattr(done, "paused", False) and when(argv):
            done.paused = True
            then()
        return proc
    return run


def test_two_attaches_at_once_keep_both_records(push: Callable[..., Pushed], keys: dict[str, Path], tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: two `attach` at once each read the ledger, then each wrote the same next version; the tag named one,
    and the other's record was lost without an error (its failed verdict could then be removed unnoticed). Here each
    waits, once it has read the ledger's tag, until the other has too (or 8 s): a writer of the same home now waits
    for the first one's turn and builds on its write."""
    now = dt.datetime.now(dt.UTC)
    pushed = push()
    arrived, turn = [0], threading.Condition()

    def meet() -> None:
        with turn:
            arrived[0] += 1
            turn.notify_all()
            turn.wait_for(lambda: arrived[0] >= 2, timeout=8)

    folders = [pushed.certificate(tmp_path / name, created=now - dt.timedelta(hours=hours), **extra).parent
               for name, hours, extra in (("passed", 2, {}), ("failed", 1, {"smoke_status": "failed"}))]
    errors: list[BaseException] = []

    def attach_one(folder: Path) -> None:
        try:
            promote.attach(pushed.ref, folder, str(keys["ours.key"]))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=attach_one, args=(folder,)) for folder in folders]
    with monkeypatch.context() as patched:
        patched.setattr(registry, "_run", pausing(lambda argv: argv[1:2] == ["resolve"] and
                                                  argv[-1].endswith(f":{ledger.TAG}"), meet))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
    assert not errors, errors
    found = ledger.read(pushed.repository, str(keys["ours.pub"]))
    assert found is not None
    attached = {r.digest for r in registry.certificates(pushed.image)}
    recorded = {r["certificate"]: r["version"] for r in found[0].certificates.get(pushed.digest, [])}
    assert len(attached) == 2 and set(recorded) == attached, (recorded, attached)
    assert found[0].version == 2 and sorted(recorded.values()) == [1, 2]


def test_a_write_whose_tag_moved_under_it_fails(two_releases: tuple[Pushed, Pushed], keys: dict[str, Path],  # noqa: F811
                                               monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """Before: the ledger's tag moved while the authority wrote (by a writer of another home, or, here, by a
    registry writer putting version 2 back) and the write went on over it, reporting success."""
    _, newer = two_releases
    current = registry.resolve(newer.image.with_tag(ledger.TAG)).digest
    moved_to: list[str] = []

    def replay() -> None:
        oras_tag(f"{newer.repository}:{ledger.TAG}-2", ledger.TAG)
        moved_to.append(registry.resolve(newer.image.with_tag(ledger.TAG)).digest or "")

    with monkeypatch.context() as patched:
        patched.setattr(registry, "_run", pausing(lambda argv: argv[1:2] == ["sign"] and any(
            a.startswith(ledger.VERSION_ANNOTATION) for a in argv), replay))
        code = cli.main(["ledger", *repository_args(newer, keys), "--refresh", str(keys["ours.key"])])
    assert code == 1
    assert one_line_error(capsys) == (
        f"error: the release ledger of {newer.repository} moved from {current} to {moved_to[0]} while this writer made "
        f"version 5 on top of it: another writer at the same time, or someone without the key; version 5 stays under "
        f"{ledger.TAG}-5, not current; write again")
    assert registry.resolve(newer.image.with_tag(ledger.TAG)).digest == moved_to[0]  # left where the other put it
    kept = subprocess.run(["oras", "manifest", "fetch", "--plain-http", f"{newer.repository}:{ledger.TAG}-5"],
                          check=True, capture_output=True, text=True).stdout
    assert json.loads(kept)["artifactType"] == ledger.ARTIFACT_TYPE
