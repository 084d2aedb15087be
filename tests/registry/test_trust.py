"""Trust against a registry writer who has push rights but not the key, in the real local registry with stock oras:
a document that is both an image manifest and an index is refused by what it says it is, not read as whichever
suits the reader."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from mcore_images import cli, registry
from mcore_images import tags as tag_scheme
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
    """docs/release.md's stock recipe: cosign alone, the claims as cosign's own -a flags."""
    flags = [a for k, v in claims.items() for a in ("-a", f"io.mcore-images.{k.replace('_', '-')}={v}")]
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
