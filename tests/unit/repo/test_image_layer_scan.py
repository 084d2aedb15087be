"""The image tests' layer scan (tests/image/utils/saved_layers.py) on a content store written here: the blobs of an
image are read where the engine keeps them, an index is followed to the image's own platform, a secret copied into
one layer and deleted by the next is found, and an image whose blobs are not all there is scanned through docker
save instead."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from tests.image.utils import saved_layers

SECRET = b"-----BEGIN CERTIFICATE-----\n" + b"\n".join([b"Q" * 64, b"private-line-of-key-material-" + b"z" * 35,
                                                       b"R" * 64]) + b"\n-----END CERTIFICATE-----\n"


def layer(files: dict[str, bytes]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue())


def put(store: Path, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    (store / "sha256").mkdir(parents=True, exist_ok=True)
    (store / "sha256" / digest).write_bytes(data)
    return f"sha256:{digest}"


def image(store: Path, layers: list[bytes], arch: str = "amd64") -> str:
    """An image index with the manifest of ``arch`` (and one of another platform), as BuildKit exports it."""
    config = put(store, json.dumps({"architecture": arch, "os": "linux"}).encode())
    manifest = put(store, json.dumps({"config": {"digest": config}, "layers": [
        {"digest": put(store, data)} for data in layers]}).encode())
    other = put(store, json.dumps({"config": {"digest": config}, "layers": []}).encode())
    return put(store, json.dumps({"manifests": [
        {"digest": other, "platform": {"os": "linux", "architecture": "arm64"}},
        {"digest": manifest, "platform": {"os": "linux", "architecture": arch}}]}).encode())


@pytest.fixture
def engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The engine's answers: the content store's folder and `docker image inspect` of each image by its id."""
    inspected: dict[str, str] = {}
    monkeypatch.setattr(saved_layers, "content_store", lambda: tmp_path / "blobs")
    monkeypatch.setattr(saved_layers, "docker", lambda *args, **_: json.dumps(
        [{"Id": inspected[args[-1]], "Os": "linux", "Architecture": "amd64"}]))
    return inspected


def secret(tmp_path: Path) -> saved_layers.Secret:
    path = tmp_path / "ca.pem"
    path.write_bytes(SECRET)
    return saved_layers.make_secret(path, public=[])


def test_a_secret_deleted_by_a_later_layer_is_found_in_the_content_store(tmp_path: Path,
                                                                         engine: dict[str, str]) -> None:
    store = tmp_path / "blobs"
    first = layer({"etc/os-release": b"debian\n"})
    leaked = layer({"root/leaked.pem": SECRET, "opt/venv/site-packages/torch/__init__.py": b"x"})
    deleted = layer({"root/.wh.leaked.pem": b""})
    engine["img"] = image(store, [first, leaked, deleted])
    scan = saved_layers.scan_image("img", [secret(tmp_path)], watch={"torch": saved_layers.TORCH_PATHS})
    assert scan.source.startswith("the engine's content store")
    assert len(scan.layers) == 3 and scan.files == 4
    named = {(scan.layer_index(blob), path) for blob, path, _ in scan.hits}
    assert ("layer 2/3", "/root/leaked.pem") in named, scan.hits
    assert list(scan.touched["torch"]) == [scan.layers[1]]
    again = saved_layers.scan_image("img", [secret(tmp_path)], skip_blobs=scan.layers[:2])
    assert again.files == 1 and not [hit for hit in again.hits if hit[1] != "-"]


def test_an_image_whose_blobs_are_not_all_in_the_store_is_read_through_docker_save(
        tmp_path: Path, engine: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "blobs"
    engine["img"] = image(store, [layer({"a": b"1"}), layer({"b": b"2"})])
    manifest = json.loads((store / "sha256" / engine["img"].split(":")[1]).read_bytes())["manifests"][1]["digest"]
    gone = json.loads((store / "sha256" / manifest.split(":")[1]).read_bytes())["layers"][1]["digest"]
    (store / "sha256" / gone.split(":")[1]).unlink()  # a layer the store no longer holds
    saved: list[str] = []
    monkeypatch.setattr(saved_layers, "scan_saved_image", lambda ref, *_: saved.append(ref) or saved_layers.LayerScan())
    scan = saved_layers.scan_image("img", [secret(tmp_path)])
    assert saved == ["img"] and scan.source.startswith("docker save (img's blobs are not all in ")


def test_blob_names_of_docker_save_are_the_stores_digests() -> None:
    assert saved_layers._digest_name("blobs/sha256/" + "ab" * 32) == "sha256:" + "ab" * 32
    assert saved_layers._digest_name("manifest.json") == "manifest.json"
