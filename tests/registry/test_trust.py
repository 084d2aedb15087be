"""Trust against a registry writer who has push rights but not the key, in the real local registry with stock oras:
a document that is both an image manifest and an index is refused by what it says it is, not read as whichever
suits the reader."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from mcore_images import cli
from mcore_images.catalogue import tags as tag_scheme
from mcore_images.release import ledger, registry
from tests.registry.conftest import Pushed
from tests.registry.test_release import attach_and_sign


def confused(pushed: Pushed, certified: Pushed, tmp_path: Path) -> str:
    """A Docker schema2 manifest carrying ``pushed``'s config and layers plus ``manifests: [certified]``, pushed by
    digest: containerd refuses to pull it ("expected manifest but found index"), a client that follows the mediaType
    gets ``pushed``'s payload, and a reader that looked for ``manifests`` saw ``certified``."""
    body = registry.manifest(pushed.image)
    target = registry.manifest(certified.image)
    size = len(json.dumps(target, separators=(",", ":")))
    body["mediaType"] = "application/vnd.docker.distribution.manifest.v2+json"
    body["manifests"] = [{"mediaType": target.get("mediaType", body["mediaType"]), "digest": certified.digest,
                          "size": size, "platform": {"os": "linux", "architecture": "amd64"}}]
    path = tmp_path / "confused.json"
    path.write_text(json.dumps(body))
    pushed_to = subprocess.run(["oras", "manifest", "push", "--plain-http", "--media-type", body["mediaType"],
                                f"{pushed.repository}:confused", str(path)], capture_output=True, text=True,
                               check=False)
    assert pushed_to.returncode == 0, pushed_to.stderr
    digest = registry.resolve(pushed.image.with_tag("confused")).digest
    return f"{pushed.repository}@{digest}"


def test_a_manifest_that_is_also_an_index_is_refused(push: Callable[..., Pushed], keys: dict[str, Path],
                                                     tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Before: `verify @M` and a promote dry run answered PASSED for the certified digest M listed."""
    certified = push()
    attach_and_sign(certified, certified.certificate(tmp_path / "cert").parent, keys["ours.key"])
    payload = push(stack="debian", repository=certified.repository)
    confused_ref = confused(payload, certified, tmp_path)
    assert cli.main(["verify", certified.ref, "--key", str(keys["ours.pub"]), "--policy", "ci"]) == 0
    capsys.readouterr()
    for argv in (["verify", confused_ref, "--key", str(keys["ours.pub"]), "--policy", "ci"],
                 ["promote", confused_ref, "--stack", "debian", "--key", str(keys["ours.pub"]), "--policy", "ci"]):
        code = cli.main(argv)
        said = capsys.readouterr()
        assert code == 1, said.out + said.err
        assert "is both an index (manifests) and an image manifest (config, layers): refused" in said.out + said.err
        assert "PASSED" not in said.out


def test_the_media_type_alone_decides_what_a_document_is() -> None:
    image = {"mediaType": registry.IMAGE_TYPES[0], "config": {}, "layers": []}
    index = {"mediaType": registry.INDEX_TYPES[0], "manifests": []}
    assert registry.is_index(index, "r") and not registry.is_index(image, "r")
    assert registry.is_index({"manifests": []}, "r") and not registry.is_index({"config": {}, "layers": []}, "r")
    for bad in ({**image, "manifests": []}, {**index, "config": {}}, {"mediaType": registry.INDEX_TYPES[0],
                                                                     "layers": []},
                {"mediaType": registry.IMAGE_TYPES[0], "manifests": []}, {"mediaType": "text/plain"}):
        with pytest.raises(registry.ConfusedManifest):
            registry.is_index(bad, "r")


def stock_verify(ref: str, key: Path, **claims: str) -> subprocess.CompletedProcess[str]:
    """docs/release.md's stock recipe: cosign alone, the claims as cosign's own -a flags (``content_tag`` names
    io.mcore-images.content-tag, ``certificate_status`` io.mcore-images.certificate.status)."""
    names = {"content_tag": "content-tag", "certificate_status": "certificate.status"}
    flags = [a for k, v in claims.items() for a in ("-a", f"io.mcore-images.{names.get(k, k)}={v}")]
    return subprocess.run(["cosign", "verify", "--key", str(key), "--insecure-ignore-tlog", *flags, ref],
                          capture_output=True, text=True, check=False)


def test_stock_cosign_binds_the_tag_to_its_stack_layer_and_content(
        push: Callable[..., Pushed], keys: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Before: `cosign verify --key … REPO:TAG` passed for any signed image under that tag. The image's signature now
    names its stack, layer, alias and content tag, and the recipe asks for them: a tag moved (by anyone who can
    push) to another stack's signed digest fails it."""
    debian = push()
    other = push(stack="debian-mcore019", repository=debian.repository)
    for pushed, folder in ((debian, "d"), (other, "o")):
        assert cli.main(["attach", pushed.ref, "--certificate", str(pushed.certificate(tmp_path / folder).parent),
                         "--key", str(keys["ours.key"])]) == 0
    capsys.readouterr()
    alias = tag_scheme.target("runtime", debian.stack)
    content = tag_scheme.layer_tag("runtime", debian.stack)
    subprocess.run(["oras", "tag", "--plain-http", debian.ref, alias], check=True, capture_output=True)
    tagged = f"{debian.repository}:{alias}"
    good = stock_verify(tagged, keys["ours.pub"], stack="debian", layer="runtime", alias=alias, content_tag=content,
                        certificate_status="passed")
    assert good.returncode == 0, good.stderr[-1500:]
    subprocess.run(["oras", "tag", "--plain-http", other.ref, alias], check=True, capture_output=True)
    moved = stock_verify(tagged, keys["ours.pub"], stack="debian", layer="runtime", alias=alias, content_tag=content,
                         certificate_status="passed")
    assert moved.returncode != 0, "stock cosign accepted a tag moved to another stack's signed digest"
    assert stock_verify(other.ref, keys["ours.pub"], alias=tag_scheme.target("runtime", other.stack)).returncode == 0


# ---------------------------------------------------------------------------------------------
# The release ledger: order that a registry writer without the key cannot forge


def attach(pushed: Pushed, keys: dict[str, Path], folder: Path, **certificate: object) -> str:
    """`mcore-images attach` (which also records the certificate in the signed ledger); the certificate's digest."""
    assert cli.main(["attach", pushed.ref, "--certificate", str(pushed.certificate(folder, **certificate).parent),
                     "--key", str(keys["ours.key"])]) == 0
    return registry.certificates(pushed.image)[-1].digest


def promote(pushed: Pushed, keys: dict[str, Path], *extra: str) -> int:
    return cli.main(["promote", pushed.ref, "--stack", pushed.stack.name, "--key", str(keys["ours.pub"]), "--policy",
                     "ci", "--execute", "--sign-key", str(keys["ours.key"]), *extra])


def verdict(ref: str, keys: dict[str, Path], capsys: pytest.CaptureFixture) -> tuple[int, dict]:
    capsys.readouterr()  # what ran before
    code = cli.main(["verify", ref, "--key", str(keys["ours.pub"]), "--policy", "ci", "--json"])
    return code, json.loads(capsys.readouterr().out)


def failed_over_passed(pushed: Pushed, keys: dict[str, Path], folder: Path, capsys: pytest.CaptureFixture) -> str:
    """A passed certificate and a newer failed one, both attached and recorded, and verify judging the failed one:
    where each attack on a failed verdict starts. The failed certificate's digest."""
    now = dt.datetime.now(dt.UTC)
    attach(pushed, keys, folder / "good", created=now - dt.timedelta(hours=2))
    bad = attach(pushed, keys, folder / "bad", created=now - dt.timedelta(hours=1), smoke_status="failed")
    assert verdict(pushed.ref, keys, capsys)[0] == 1  # the newer, failed certificate is judged
    return bad


def oras_tag(source: str, tag: str) -> None:
    subprocess.run(["oras", "tag", "--plain-http", source, tag], check=True, capture_output=True)


@pytest.fixture
def two_releases(push: Callable[..., Pushed], keys: dict[str, Path], tmp_path: Path,
                 capsys: pytest.CaptureFixture) -> tuple[Pushed, Pushed]:
    """An older and a newer build of one stack, each certified and promoted in turn: the alias names the newer."""
    now = dt.datetime.now(dt.UTC)
    older = push()
    newer = push(repository=older.repository, **{"io.mcore-images.test-build": "newer"})
    attach(older, keys, tmp_path / "o", created=now - dt.timedelta(hours=3))
    assert promote(older, keys) == 0
    attach(newer, keys, tmp_path / "n", created=now - dt.timedelta(hours=1))
    assert promote(newer, keys) == 0
    capsys.readouterr()
    return older, newer


def test_a_tag_moved_back_to_an_older_certified_digest_is_refused(two_releases: tuple[Pushed, Pushed],
                                                                  keys: dict[str, Path],
                                                                  capsys: pytest.CaptureFixture) -> None:
    """Before: `oras tag <older certified digest> runtime-debian`, with no key, then verify of the tag passed."""
    older, newer = two_releases
    alias = f"{newer.repository}:runtime-debian"
    assert verdict(alias, keys, capsys)[0] == 0
    oras_tag(older.ref, "runtime-debian")
    code, found = verdict(alias, keys, capsys)
    assert code == 1 and found["problems"][0].startswith(f"tag runtime-debian points at {older.digest}, but the signed "
                                                         "release ledger"), found["problems"]
    assert "moved by someone without the key (back to an older release)" in found["problems"][0]


def test_the_rollback_guard_does_not_read_the_tag(two_releases: tuple[Pushed, Pushed], push: Callable[..., Pushed],
                                                  keys: dict[str, Path], capsys: pytest.CaptureFixture) -> None:
    """Before: move the alias first to an uncertified digest, then `promote <older> --execute` passed: the guard
    compared against what the tag named. It now compares against the ledger's record."""
    older, newer = two_releases
    uncertified = push(repository=older.repository, **{"io.mcore-images.test-build": "uncertified"})
    oras_tag(uncertified.ref, "runtime-debian")
    assert promote(older, keys) == 1
    err = capsys.readouterr().err
    assert f"runtime-debian names {newer.digest}, certified " in err and "would roll it back" in err, err


def test_a_failed_verdict_removed_from_the_referrers_is_noticed(push: Callable[..., Pushed], keys: dict[str, Path],
                                                                tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Before: remove the failed certificate's referrer from the sha256-<digest> index (push rights, no key), and
    verify judged the older passed certificate."""
    pushed = push()
    bad = failed_over_passed(pushed, keys, tmp_path, capsys)
    index_ref = f"{pushed.repository}:sha256-{pushed.digest.removeprefix('sha256:')}"
    index = json.loads(subprocess.run(["oras", "manifest", "fetch", "--plain-http", index_ref], check=True,
                                      capture_output=True, text=True).stdout)
    index["manifests"] = [m for m in index["manifests"] if m["digest"] != bad]
    (tmp_path / "index.json").write_text(json.dumps(index))
    subprocess.run(["oras", "manifest", "push", "--plain-http", "--media-type", registry.INDEX_TYPES[0], index_ref,
                    str(tmp_path / "index.json")], check=True, capture_output=True)
    assert bad not in {r.digest for r in registry.certificates(pushed.image)}
    code, found = verdict(pushed.ref, keys, capsys)
    assert code == 1 and any(p.startswith(f"certificate {bad} (failed") and "removed by someone without the key" in p
                             for p in found["problems"]), found["problems"]


def test_a_ledger_rolled_back_deleted_or_forged_is_refused(two_releases: tuple[Pushed, Pushed],
                                                           keys: dict[str, Path], tmp_path: Path,
                                                           capsys: pytest.CaptureFixture) -> None:
    _, newer = two_releases
    alias = f"{newer.repository}:runtime-debian"
    assert verdict(alias, keys, capsys)[0] == 0  # this machine has seen the newest version (4)
    oras_tag(f"{newer.repository}:{ledger.TAG}-2", ledger.TAG)  # the ledger's tag moved back to version 2
    code, found = verdict(alias, keys, capsys)
    assert code == 1 and "older than version 4 this machine saw: rolled back" in found["problems"][0], found
    forged = tmp_path / "ledger.json"
    forged.write_text(json.dumps({"repository": newer.repository, "version": 9, "tags": {}, "certificates": {}}))
    subprocess.run(["oras", "push", "--plain-http", "--artifact-type", ledger.ARTIFACT_TYPE,
                    f"{newer.repository}:{ledger.TAG}", f"{forged.name}:application/json"], cwd=tmp_path, check=True,
                   capture_output=True)
    code, found = verdict(alias, keys, capsys)
    assert code == 1 and "(version 9, sha256:" in found["problems"][0] and "is not signed" in found["problems"][0]
    index = f"{newer.repository}@{registry.resolve(newer.image.with_tag(ledger.TAG)).digest}"
    subprocess.run(["oras", "manifest", "delete", "--plain-http", "--force", index], check=True, capture_output=True)
    code, found = verdict(alias, keys, capsys)
    assert code == 1 and "has no release ledger, but this machine saw its version 4" in found["problems"][0], found


def test_an_expired_ledger_is_refused(two_releases: tuple[Pushed, Pushed], keys: dict[str, Path],
                                      capsys: pytest.CaptureFixture) -> None:
    """A registry writer can hold a client on the last signed version only until it expires."""
    _, newer = two_releases
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=ledger.LIFETIME_DAYS + 1)
    with pytest.raises(ledger.LedgerRefused, match="expired at"):
        ledger.accepted(newer.repository, str(keys["ours.pub"]), later)
    assert cli.main(["ledger", newer.repository, "--key", str(keys["ours.pub"]), "--refresh",
                     str(keys["ours.key"])]) == 0
    assert "version 5" in capsys.readouterr().out
