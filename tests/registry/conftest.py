"""Fixtures for the release-path tests against the real local registry (`.ci/registry.sh start`), oras and
cosign: a small image with an mcore-images stack's labels pushed by digest, certificates written by the real
writers, and cosign key pairs made for the test session."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import tarfile
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from mcore_images.catalogue import images
from mcore_images.catalogue.stacks import Stack, load_stacks
from mcore_images.release import registry
from tests.support.certificates import labels_of, write_certificate

PORT = os.environ.get("MCORE_REGISTRY_PORT", "5000")
HOST = f"127.0.0.1:{PORT}"
STORAGE = Path(os.environ.get("MCORE_REGISTRY_STATE", "/var/lib/mcore-images-registry")) / "storage"
"""The local registry's blob store (.ci/registry.sh): where a test plays the attacker who edits a blob."""


def registry_answers() -> bool:
    try:
        urllib.request.urlopen(f"http://{HOST}/v2/", timeout=5).close()
    except OSError:
        return False
    return True


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    missing = [what for what, ok in (("the registry on " + HOST, registry_answers()),
                                     ("docker", shutil.which("docker") is not None),
                                     ("oras", shutil.which("oras") is not None),
                                     ("cosign", shutil.which("cosign") is not None)) if not ok]
    if missing:
        raise pytest.UsageError(f"the registry tests need {', '.join(missing)}: run `make registry` (.ci/registry.sh "
                                "start) and `make docker-engine` first")


def tag_list(repository: str) -> list[str]:
    """The repository's tags as the registry API lists them."""
    path = repository.split("/", 1)[1]
    try:
        with urllib.request.urlopen(f"http://{HOST}/v2/{path}/tags/list", timeout=10) as response:
            return sorted(json.load(response).get("tags") or [])
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return []
        raise


@pytest.fixture(autouse=True)
def ledger_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """What this machine has seen of release ledgers, kept per test (a test plays one client)."""
    monkeypatch.setenv("MCORE_IMAGES_STATE", str(tmp_path / "state"))
    return tmp_path / "state"


@pytest.fixture(scope="session")
def stacks() -> dict[str, Stack]:
    return load_stacks()


@pytest.fixture(scope="session")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two cosign key pairs: ours, and another one nobody trusts."""
    out = {}
    for name in ("ours", "other"):
        folder = tmp_path_factory.mktemp(f"key-{name}")
        subprocess.run(["cosign", "generate-key-pair"], cwd=folder, env={**os.environ, "COSIGN_PASSWORD": ""},
                       check=True, capture_output=True)
        out[f"{name}.key"], out[f"{name}.pub"] = folder / "cosign.key", folder / "cosign.pub"
    os.environ["COSIGN_PASSWORD"] = ""
    return out


@dataclass
class Pushed:
    """An image in the registry, by digest, with the labels of a stack's layer."""

    repository: str
    digest: str
    stack: Stack
    labels: dict[str, str]

    @property
    def ref(self) -> str:
        return f"{self.repository}@{self.digest}"

    @property
    def image(self) -> images.ImageRef:
        return images.parse(self.ref)

    def tags(self) -> list[str]:
        return tag_list(self.repository)

    def certificate(self, out: Path, **kwargs: object) -> Path:
        """A certificate of this image, written by the real writers (passed, from 8 GPUs, an hour ago)."""
        out.mkdir(parents=True, exist_ok=True)
        created = kwargs.pop("created", dt.datetime.now(dt.UTC) - dt.timedelta(hours=1))
        digest = kwargs.pop("digest", self.digest)
        return write_certificate(out, self.stack, repository=self.repository, digest=digest, created=created,
                                 **kwargs)


@pytest.fixture(scope="session")
def small_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-file root filesystem, as a tar for `docker import`."""
    folder = tmp_path_factory.mktemp("rootfs")
    (folder / "etc").mkdir()
    (folder / "etc" / "release").write_text("mcore-images registry test\n")
    archive = folder / "rootfs.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(folder / "etc", arcname="etc")
    return archive


@pytest.fixture
def push(small_root: Path, stacks: dict[str, Stack]) -> Iterator[Callable[..., Pushed]]:
    """Push an image labelled as a layer of a stack to a fresh repository; returns it by digest."""
    made: list[str] = []

    def make(stack: str = "debian", layer: str = "runtime", repository: str | None = None,
             **label_changes: str) -> Pushed:
        chosen = stacks[stack]
        labels = {**labels_of(chosen, layer), **label_changes}
        repository = repository or f"{HOST}/test-{uuid.uuid4().hex[:10]}/mcore-images"
        ref = f"{repository}:candidate-0123456-{layer}-{stack}"
        # Quoted as a Dockerfile string: a value may hold spaces (io.mcore-images.gpus: "sm_90 H100/H200/GH200; …").
        changes = [a for k, v in labels.items() for a in ("--change", f"LABEL {k}={json.dumps(v)}")]
        subprocess.run(["docker", "import", *changes, str(small_root), ref], check=True, capture_output=True)
        made.append(ref)
        subprocess.run(["docker", "push", "-q", ref], check=True, capture_output=True)
        digest = registry.resolve(images.parse(ref)).digest
        assert digest is not None
        return Pushed(repository, digest, chosen, labels)

    yield make
    for ref in made:
        subprocess.run(["docker", "image", "rm", "-f", ref], capture_output=True, check=False)
