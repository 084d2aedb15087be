"""The release path against the real registry: a signed, passing certificate promotes; every other one is
refused with the registry's tag list unchanged (read back through the registry API); verify says the same."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from mcore_images import cli
from mcore_images.catalogue import tags
from mcore_images.release import ledger, registry, verify
from tests.registry.conftest import STORAGE, Pushed


def promote(pushed: Pushed, key: Path, *extra: str) -> int:
    """`promote --execute`, the ledger signed with the private half of ``key`` (cosign.key beside cosign.pub)."""
    return cli.main(["promote", pushed.ref, "--stack", pushed.stack.name, "--key", str(key), "--execute",
                     "--sign-key", str(key.with_name("cosign.key")), *extra])


def attach_and_sign(pushed: Pushed, folder: Path, key: Path) -> registry.Referrer:
    referrer = registry.attach(pushed.image, folder / "certificate.json")
    registry.sign(pushed.image, referrer, str(key))
    return referrer


def refused(pushed: Pushed, keys: dict[str, Path], capsys: pytest.CaptureFixture, *extra: str) -> str:
    """Promote must refuse (exit 1, one line) and leave every tag of the repository where it was."""
    before = pushed.tags()
    code = promote(pushed, keys["ours.pub"], *extra)
    err = capsys.readouterr().err.strip()
    assert code == 1, err
    assert len(err.splitlines()) == 1 and err.startswith("error: refusing to promote"), err
    assert pushed.tags() == before
    return err


def test_a_signed_passing_certificate_promotes_with_moving_and_immutable_tags(
        push: Callable[..., Pushed], keys: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    pushed = push()
    capsys.readouterr()
    assert cli.main(["attach", pushed.ref, "--certificate", str(pushed.certificate(tmp_path).parent),
                     "--key", str(keys["ours.key"])]) == 0
    attached = capsys.readouterr().out
    assert "through the referrers tag schema (the registry has no referrers API" in attached
    before = pushed.tags()
    assert f"sha256-{pushed.digest.removeprefix('sha256:')}" in before  # the tag schema's index
    assert promote(pushed, keys["ours.pub"], "--json") == 0
    promotion = json.loads(capsys.readouterr().out)
    content = promotion["moving_tags"][0]
    assert promotion["moving_tags"][1] == "runtime-debian"
    assert promotion["immutable_tag"].startswith(content + "-") and promotion["immutable_tag"].endswith(
        pushed.digest.removeprefix("sha256:")[:12])
    after = pushed.tags()
    recorded = {t for t in set(after) - set(before) if t.startswith(ledger.TAG) or t.endswith(".sig")}
    assert set(after) - set(before) - recorded == {content, "runtime-debian", promotion["immutable_tag"]}
    assert f"{ledger.TAG}-2" in recorded  # the release ledger's new version, recording the tags (and its signature)
    for tag in promotion["moving_tags"] + [promotion["immutable_tag"]]:
        assert registry.resolve(pushed.image.with_tag(tag)).digest == pushed.digest

    # verify the public tag: passed (exit 0), and its JSON names the signed certificate
    assert cli.main(["verify", f"{pushed.repository}:runtime-debian", "--key", str(keys["ours.pub"]),
                     "--policy", "release", "--json"]) == 0
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["status"] == "passed" and verdict["digest"] == pushed.digest and verdict["gpus"] == 8
    assert verdict["referrers"] == "tag schema"


def test_no_certificate(push: Callable[..., Pushed], keys: dict[str, Path], capsys: pytest.CaptureFixture) -> None:
    pushed = push()
    assert "no certificate is attached to this digest" in refused(pushed, keys, capsys)


def test_a_failed_certificate(push: Callable[..., Pushed], keys: dict[str, Path], tmp_path: Path,
                              capsys: pytest.CaptureFixture) -> None:
    pushed = push()
    attach_and_sign(pushed, pushed.certificate(tmp_path, smoke_status="failed").parent, keys["ours.key"])
    assert "the certificate did not pass (certify failed, smoke failed" in refused(pushed, keys, capsys)


def test_a_certificate_of_another_digest(push: Callable[..., Pushed], keys: dict[str, Path], tmp_path: Path,
                                         capsys: pytest.CaptureFixture) -> None:
    pushed, other = push(), push()
    folder = other.certificate(tmp_path).parent
    # `mcore-images attach` refuses this; a registry user with push rights can still do it by hand.
    assert cli.main(["attach", pushed.ref, "--certificate", str(folder), "--key", str(keys["ours.key"])]) == 2
    assert f"certifies {other.digest}, not {pushed.digest}" in capsys.readouterr().err
    attach_and_sign(pushed, folder, keys["ours.key"])
    assert f"the certificate is for {other.digest}, not {pushed.digest}" in refused(pushed, keys, capsys)


def test_a_tampered_certificate(push: Callable[..., Pushed], keys: dict[str, Path], tmp_path: Path,
                                capsys: pytest.CaptureFixture) -> None:
    """A failed certificate, signed; then someone attaches an edited copy that says 'passed' and copies the
    genuine signature onto it. The signature does not verify for the edited artifact."""
    pushed = push()
    genuine = attach_and_sign(pushed, pushed.certificate(tmp_path / "a", smoke_status="failed").parent,
                              keys["ours.key"])
    path = tmp_path / "a" / "certificate.json"
    cert = json.loads(path.read_text())
    cert.update(status="passed", exit_code=0, error=None)
    cert["certify"] = {"status": "passed", "exit_code": 0}
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "certificate.json").write_text(json.dumps(cert))
    forged = registry.attach(pushed.image, tmp_path / "b" / "certificate.json")
    repo = pushed.image
    sig = f"{repo.repository}:sha256-{genuine.digest.removeprefix('sha256:')}.sig"
    copy = f"{repo.repository}:sha256-{forged.digest.removeprefix('sha256:')}.sig"
    subprocess.run([shutil.which("oras") or "oras", "cp", "--from-plain-http", "--to-plain-http", sig, copy],
                   check=True, capture_output=True)
    err = refused(pushed, keys, capsys)
    assert f"certificate {forged.digest}: its signature does not verify" in err
    assert "the certificate did not pass" in err  # judged by the genuine, signed one


def test_a_certificate_signed_with_another_key(push: Callable[..., Pushed], keys: dict[str, Path], tmp_path: Path,
                                               capsys: pytest.CaptureFixture) -> None:
    pushed = push()
    attach_and_sign(pushed, pushed.certificate(tmp_path).parent, keys["other.key"])
    err = refused(pushed, keys, capsys)
    assert "no attached certificate is signed with" in err
    assert f"its signature does not verify with the key {keys['ours.pub']}" in err


def test_an_unsigned_certificate(push: Callable[..., Pushed], keys: dict[str, Path], tmp_path: Path,
                                 capsys: pytest.CaptureFixture) -> None:
    pushed = push()
    registry.attach(pushed.image, pushed.certificate(tmp_path))
    assert "it is not signed" in refused(pushed, keys, capsys)


def test_a_stale_certificate(push: Callable[..., Pushed], keys: dict[str, Path], tmp_path: Path,
                             capsys: pytest.CaptureFixture) -> None:
    pushed = push()
    old = dt.datetime.now(dt.UTC) - dt.timedelta(days=9)
    attach_and_sign(pushed, pushed.certificate(tmp_path, created=old).parent, keys["ours.key"])
    assert "the certificate is stale: 9.0 days old" in refused(pushed, keys, capsys)


def test_a_stack_or_version_mismatch(push: Callable[..., Pushed], keys: dict[str, Path], tmp_path: Path,
                                     capsys: pytest.CaptureFixture) -> None:
    pushed = push(**{"io.mcore-images.mcore": "0.16.0"})
    attach_and_sign(pushed, pushed.certificate(tmp_path).parent, keys["ours.key"])
    err = refused(pushed, keys, capsys)
    assert "the certificate measured megatron-core 0.16.1 but the image is labelled mcore=0.16.0" in err
    assert "the image says mcore=0.16.0 but env/stacks.json pins 0.16.1" in err
    err = refused(pushed, keys, capsys, "--stack", "cuda")
    assert "the image is stack 'debian', not 'cuda'" in err


def test_a_cpu_certificate_is_refused_by_the_release_policy_and_accepted_by_ci(
        push: Callable[..., Pushed], keys: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    pushed = push()
    attach_and_sign(pushed, pushed.certificate(tmp_path, gpus=0).parent, keys["ours.key"])
    assert "policy 'release' requires GPUs" in refused(pushed, keys, capsys, "--policy", "release")
    assert promote(pushed, keys["ours.pub"], "--policy", "ci") == 0
    assert "runtime-debian" in pushed.tags()


def test_verify_exit_codes(push: Callable[..., Pushed], keys: dict[str, Path], tmp_path: Path,
                           capsys: pytest.CaptureFixture) -> None:
    pushed = push()
    assert cli.main(["verify", pushed.ref, "--key", str(keys["ours.pub"])]) == 1
    assert "REFUSED" in capsys.readouterr().out
    missing = f"{pushed.repository}:no-such-tag"
    assert cli.main(["verify", missing, "--key", str(keys["ours.pub"]), "--json"]) == 2
    assert json.loads(capsys.readouterr().out)["status"] == "could-not-check"


def test_verify_names_a_registry_that_does_not_answer(keys: dict[str, Path], capsys: pytest.CaptureFixture) -> None:
    """The real oras against a port where no registry listens: could not check, naming the host and the refusal."""
    assert cli.main(["verify", "127.0.0.1:9/none:tag", "--key", str(keys["ours.pub"])]) == 2
    out = capsys.readouterr().out
    assert "COULD-NOT-CHECK" in out and "127.0.0.1:9" in out and "connection refused" in out, out


def test_a_tag_moved_to_another_stacks_certified_digest_is_refused(
        push: Callable[..., Pushed], keys: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Push rights without the key: `oras tag` points runtime-debian at a digest certified (and promoted) as
    debian-mcore019. Its certificate is real and signed, so only the tag gives the swap away."""
    pushed = push(stack="debian-mcore019")
    attach_and_sign(pushed, pushed.certificate(tmp_path).parent, keys["ours.key"])
    assert promote(pushed, keys["ours.pub"]) == 0
    capsys.readouterr()
    own = f"{pushed.repository}:runtime-debian-mcore019"
    assert cli.main(["verify", own, "--key", str(keys["ours.pub"]), "--policy", "release"]) == 0
    capsys.readouterr()
    subprocess.run(["oras", "tag", "--plain-http", pushed.ref, "runtime-debian"], check=True, capture_output=True)
    assert registry.resolve(pushed.image.with_tag("runtime-debian")).digest == pushed.digest
    assert cli.main(["verify", f"{pushed.repository}:runtime-debian", "--key", str(keys["ours.pub"]),
                     "--policy", "release", "--json"]) == 1
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["status"] == "refused", verdict
    content, short = tags.layer_tag("runtime", pushed.stack), pushed.digest.removeprefix("sha256:")[:12]
    assert verdict["problems"] == [
        f"tag runtime-debian is not a tag of what it points to: {pushed.digest} is stack 'debian-mcore019', layer "
        f"'runtime', whose tags are runtime-debian-mcore019, {content} and {content}-<date>-{short}; the tag was "
        "moved to another image"], verdict["problems"]
    for tag in (content, f"{content}-20261201-{short}"):  # the content tag and an immutable one of this digest
        assert verify.tag_problem(tag, pushed.digest, pushed.labels) is None, tag
    assert verify.tag_problem(f"{content}-20261201-{'0' * 12}", pushed.digest, pushed.labels)


def test_stock_cosign_verifies_the_image_digest_of_a_passing_certificate(
        push: Callable[..., Pushed], keys: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """docs/release.md's commands with stock cosign: the image digest is signed when its certificate passed,
    naming the certificate artifact; a failed certificate leaves the image unsigned."""
    passed, failed = push(), push()
    assert cli.main(["attach", passed.ref, "--certificate", str(passed.certificate(tmp_path / "p").parent),
                     "--key", str(keys["ours.key"])]) == 0
    referrer = registry.certificates(passed.image)[0].digest
    assert f"signed {passed.digest} itself, naming {referrer}" in capsys.readouterr().out
    stock = ["cosign", "verify", "--key", str(keys["ours.pub"]), "--insecure-ignore-tlog", "--output", "json"]
    done = subprocess.run([*stock, "-a", f"io.mcore-images.certificate={referrer}", passed.ref],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-1500:]
    claims = json.loads(done.stdout)
    assert claims[0]["critical"]["image"]["docker-manifest-digest"] == passed.digest
    assert claims[0]["optional"]["io.mcore-images.certificate.status"] == "passed"
    other = subprocess.run([*stock[:3], str(keys["other.pub"]), *stock[4:], passed.ref], capture_output=True, text=True,
                           check=False)
    assert other.returncode != 0, "another key verified the image"

    assert cli.main(["attach", failed.ref, "--certificate",
                     str(failed.certificate(tmp_path / "f", smoke_status="failed").parent),
                     "--key", str(keys["ours.key"])]) == 0
    assert "itself" not in capsys.readouterr().out
    unsigned = subprocess.run([*stock, failed.ref], capture_output=True, text=True, check=False)
    assert unsigned.returncode != 0 and "no signatures found" in unsigned.stderr.lower(), unsigned.stderr[-800:]


def test_a_certificate_blob_altered_in_the_registry_is_an_integrity_failure(
        push: Callable[..., Pushed], keys: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """One byte of the certificate's blob edited in the registry's storage (same length): oras finds the
    digest mismatch, and verify names it as an integrity failure, exit 1 (not "check `docker login`")."""
    pushed = push()
    referrer = attach_and_sign(pushed, pushed.certificate(tmp_path).parent, keys["ours.key"])
    manifest = registry.manifest(pushed.image.with_digest(referrer.digest))
    blob = manifest["layers"][0]["digest"].removeprefix("sha256:")
    data_file = STORAGE / "docker" / "registry" / "v2" / "blobs" / "sha256" / blob[:2] / blob / "data"
    data = data_file.read_bytes()
    assert b'"passed"' in data
    data_file.write_bytes(data.replace(b'"passed"', b'"Passed"', 1))
    assert cli.main(["verify", pushed.ref, "--key", str(keys["ours.pub"]), "--policy", "release"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("REFUSED:") and "does not match its digest" in out and "docker login" not in out, out
    assert "refusing to promote" in refused(pushed, keys, capsys)


def test_the_judged_certificate_is_chosen_by_signed_content_not_by_the_index(
        push: Callable[..., Pushed], keys: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A passing certificate, then a newer failing one, both signed. Push rights without the key rewrite the
    referrers index so the passing one's (unsigned) created annotation is the newest: the failed one is still
    judged, as its signed certificate.json says it is newer."""
    pushed = push()
    now = dt.datetime.now(dt.UTC)
    good = attach_and_sign(pushed, pushed.certificate(tmp_path / "good", created=now - dt.timedelta(hours=2)).parent,
                           keys["ours.key"])
    bad = attach_and_sign(pushed, pushed.certificate(tmp_path / "bad", created=now - dt.timedelta(hours=1),
                                                     smoke_status="failed").parent, keys["ours.key"])
    index_ref = f"{pushed.repository}:sha256-{pushed.digest.removeprefix('sha256:')}"  # the tag schema's index
    index = json.loads(subprocess.run(["oras", "manifest", "fetch", "--plain-http", index_ref], check=True,
                                      capture_output=True, text=True).stdout)
    for entry in index["manifests"]:
        if entry["digest"] == good.digest:
            entry.setdefault("annotations", {})["org.opencontainers.image.created"] = "2099-01-01T00:00:00Z"
    (tmp_path / "index.json").write_text(json.dumps(index))
    subprocess.run(["oras", "manifest", "push", "--plain-http", "--media-type",
                    "application/vnd.oci.image.index.v1+json", index_ref, str(tmp_path / "index.json")],
                   check=True, capture_output=True)
    assert registry.certificates(pushed.image)[0].digest == good.digest  # the index now puts it first
    assert cli.main(["verify", pushed.ref, "--key", str(keys["ours.pub"]), "--policy", "release", "--json"]) == 1
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["certificate"] == bad.digest, verdict
    assert any("did not pass" in p for p in verdict["problems"]), verdict["problems"]
    assert "did not pass" in refused(pushed, keys, capsys)


def test_an_older_signed_failure_is_reported_next_to_the_newer_pass(
        push: Callable[..., Pushed], keys: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    pushed = push()
    now = dt.datetime.now(dt.UTC)
    bad = attach_and_sign(pushed, pushed.certificate(tmp_path / "bad", created=now - dt.timedelta(hours=2),
                                                     smoke_status="failed").parent, keys["ours.key"])
    good = attach_and_sign(pushed, pushed.certificate(tmp_path / "good", created=now - dt.timedelta(hours=1)).parent,
                           keys["ours.key"])
    assert cli.main(["verify", pushed.ref, "--key", str(keys["ours.pub"]), "--policy", "release", "--json"]) == 0
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["certificate"] == good.digest
    assert len(verdict["earlier"]) == 1 and verdict["earlier"][0].startswith(f"certificate {bad.digest} ")


def test_pinned_references_keep_verifying_after_the_policys_age_and_moving_tags_do_not(
        push: Callable[..., Pushed], keys: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Promoted from a fresh certificate, judged 9 days later (the certificate is what ages): the moving tag is
    stale under the policy's 7 days; the digest and the immutable tag verify (age is a promotion rule for
    them) unless --max-age asks for one."""
    pushed = push()
    old = dt.datetime.now(dt.UTC) - dt.timedelta(days=9)
    attach_and_sign(pushed, pushed.certificate(tmp_path, created=old).parent, keys["ours.key"])
    # what promote wrote 9 days ago: the alias and the immutable tag of this digest on that day
    immutable = tags.immutable_tag(tags.layer_tag("runtime", pushed.stack), pushed.digest, old)
    registry.retag(pushed.image, ["runtime-debian", immutable])
    pub = ["--key", str(keys["ours.pub"]), "--policy", "release"]
    assert cli.main(["verify", f"{pushed.repository}:runtime-debian", *pub]) == 1
    assert "the certificate is stale: 9.0 days old" in capsys.readouterr().out
    for ref in (pushed.ref, f"{pushed.repository}:{immutable}"):
        assert cli.main(["verify", ref, *pub]) == 0, ref
        out = capsys.readouterr().out
        assert out.startswith("PASSED") and "note: age not judged: a pinned reference" in out, out
        assert cli.main(["verify", ref, *pub, "--max-age", "8"]) == 1
        assert "the certificate is stale: 9.0 days old" in capsys.readouterr().out
    assert cli.main(["verify", pushed.ref, *pub, "--max-age", "0"]) == 2
    assert "argument --max-age: 0 is out of range: give a number greater than 0" in capsys.readouterr().err


def test_a_moving_tag_is_not_rolled_back_to_an_older_certificate_without_allow_rollback(
        push: Callable[..., Pushed], keys: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Two builds of one stack in one repository: the newer certificate's digest holds runtime-debian; promoting
    the digest of an older certificate would move the alias back in time, and is refused unless asked."""
    now = dt.datetime.now(dt.UTC)
    newer = push()
    older = push(repository=newer.repository, **{"io.mcore-images.test-build": "older"})
    assert older.digest != newer.digest
    attach_and_sign(newer, newer.certificate(tmp_path / "n", created=now - dt.timedelta(hours=1)).parent,
                    keys["ours.key"])
    attach_and_sign(older, older.certificate(tmp_path / "o", created=now - dt.timedelta(hours=3)).parent,
                    keys["ours.key"])
    assert promote(newer, keys["ours.pub"]) == 0
    capsys.readouterr()
    err = refused(older, keys, capsys)
    assert f"runtime-debian names {newer.digest}, certified " in err and "pass --allow-rollback" in err, err
    assert promote(older, keys["ours.pub"], "--allow-rollback") == 0
    assert registry.resolve(older.image.with_tag("runtime-debian")).digest == older.digest
