"""Certificates per platform: the smoke records the platform it ran on; certify runs a foreign image under QEMU
(`docker run --platform`); verify and promote judge an index platform by platform, each on its own manifest's
certificates, and the release policy wants every platform the stack lists. The registry is replaced by what it
would answer (the real one: tests/registry)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from mcore_images.catalogue.stacks import Stack
from mcore_images.errors import InputError
from mcore_images.launch import emulation
from mcore_images.release import certify, ledger, policy, promote, registry, verify
from tests.support.certificates import labels_of, write_certificate

REPOSITORY = "127.0.0.1:5000/mcore-images"
INDEX = "sha256:" + "1" * 64
CHILD = {"linux/amd64": "sha256:" + "a" * 64, "linux/arm64": "sha256:" + "b" * 64}
NOW = dt.datetime(2026, 9, 1, 12, 0, tzinfo=dt.UTC)
CI = policy.Policy("ci", "CPU accepted", require_gpu=False, max_age_days=1)
RELEASE = policy.Policy("release", "GPUs, every platform", require_gpu=True, max_age_days=7,
                        require_every_platform=True)


class Registry:
    """What a registry answers about one tag: an index of the given platforms (or one manifest), and the
    certificates attached to each digest."""

    def __init__(self, stack: Stack, tmp_path: Path, children: dict[str, str] | None, made_on: dict[str, str | None],
                 gpus: int = 0) -> None:
        self.children = children
        self.labels = labels_of(stack, "runtime")
        self.certs: dict[str, dict[str, Any]] = {}
        for platform, digest in (children or {"linux/amd64": CHILD["linux/amd64"]}).items():
            if platform not in made_on:
                continue
            path = write_certificate(tmp_path / digest[7:15], stack, repository=REPOSITORY, digest=digest,
                                     created=NOW - dt.timedelta(hours=2), gpus=gpus, platform=made_on[platform])
            self.certs[digest] = json.loads(path.read_text())

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        top = INDEX if self.children is not None else CHILD["linux/amd64"]
        monkeypatch.setattr(registry, "resolve", lambda ref, **kw: ref.with_digest(top) if not ref.digest else ref)
        monkeypatch.setattr(registry, "registry_labels", lambda image, **kw: self.labels)
        monkeypatch.setattr(registry, "platform_children", lambda image, **kw: None if self.children is None else {
            name: image.with_digest(digest) for name, digest in self.children.items()})
        monkeypatch.setattr(registry, "image_platform", lambda image, **kw: "linux/amd64")
        monkeypatch.setattr(registry, "certificates", lambda image, **kw: [registry.Referrer(
            f"sha256:{'c' * 56}{image.digest[7:15]}", {})] if image.digest in self.certs else [])
        monkeypatch.setattr(registry, "referrers_mode", lambda image, **kw: "tag schema")
        monkeypatch.setattr(registry, "signature_problem", lambda image, referrer, key, **kw: None)
        monkeypatch.setattr(registry, "fetch_certificate", lambda image, referrer, **kw: self.certs[image.digest])
        # no release ledger in this repository (the ledger is judged against a real registry: tests/registry)
        monkeypatch.setattr(ledger, "read", lambda repository, key, run=None: None)
        monkeypatch.setattr(ledger, "versions", lambda repository, run=None: [])


@pytest.fixture
def key(tmp_path: Path) -> str:
    path = tmp_path / "cosign.pub"
    path.write_text("-----BEGIN PUBLIC KEY-----\nx\n-----END PUBLIC KEY-----\n")
    return str(path)


def check(ref: str, key: str, chosen: policy.Policy = CI) -> verify.Verdict:
    return verify.check(ref, key, chosen, NOW)[0]


def test_an_index_passes_when_each_platform_passes_on_its_own_certificate(
        stacks: dict[str, Stack], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str) -> None:
    Registry(stacks["debian"], tmp_path, CHILD, {p: p for p in CHILD}).install(monkeypatch)
    verdict = check(f"{REPOSITORY}:runtime-debian", key)
    assert verdict.status == "passed", verdict.problems
    assert set(verdict.platforms) == set(CHILD)
    assert all(sub["status"] == "passed" and sub["digest"] == CHILD[name] for name, sub in verdict.platforms.items())
    assert "  linux/arm64: PASSED = " + CHILD["linux/arm64"] in "\n".join(verdict.lines())


def test_a_platform_without_a_certificate_is_named(stacks: dict[str, Stack], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch, key: str) -> None:
    Registry(stacks["debian"], tmp_path, CHILD, {"linux/amd64": "linux/amd64"}).install(monkeypatch)
    verdict = check(f"{REPOSITORY}@{INDEX}", key)
    assert verdict.status == "refused" and verdict.exit_code == 1
    assert verdict.problems == ["linux/arm64: no certificate is attached to this digest; certify it (mcore-images "
                                "certify) and attach the signed certificate (mcore-images attach)"]
    with pytest.raises(promote.Refused, match=r"refusing to promote .*: linux/arm64: no certificate is attached"):
        promote.plan(f"{REPOSITORY}@{INDEX}", "debian", key, CI, now=NOW)


def test_a_certificate_made_on_another_platform_is_refused(stacks: dict[str, Stack], tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch, key: str) -> None:
    # amd64's certificate attached to the arm64 manifest cannot speak for it; nor can one that records no platform.
    Registry(stacks["debian"], tmp_path, CHILD, {"linux/amd64": None, "linux/arm64": "linux/amd64"}
             ).install(monkeypatch)
    verdict = check(f"{REPOSITORY}@{INDEX}", key)
    assert [p for p in verdict.problems if "made on" in p] == [
        "linux/arm64: the certificate was made on linux/amd64 (machine x86_64) but the image is linux/arm64; certify "
        "this platform's image"]
    assert not [p for p in verdict.problems if p.startswith("linux/amd64")], "an old amd64 certificate still holds"


def test_the_release_policy_wants_every_platform_the_stack_lists(stacks: dict[str, Stack], tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch, key: str) -> None:
    amd64 = {"linux/amd64": CHILD["linux/amd64"]}
    Registry(stacks["debian"], tmp_path, amd64, {"linux/amd64": "linux/amd64"}, gpus=8).install(monkeypatch)
    assert check(f"{REPOSITORY}@{INDEX}", key, CI).status == "passed"
    refused = check(f"{REPOSITORY}@{INDEX}", key, RELEASE)
    assert refused.problems == [
        "it holds linux/amd64, and stack 'debian' is built for linux/amd64, linux/arm64: linux/arm64 is missing "
        "(policy 'release' requires every platform); promote the index `mcore-images index` assembles from every "
        "platform's certified candidate"]


def test_a_single_manifest_of_an_amd64_stack_is_judged_as_before(stacks: dict[str, Stack], tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch, key: str) -> None:
    Registry(stacks["debian-verl"], tmp_path, None, {"linux/amd64": None}, gpus=8).install(monkeypatch)
    monkeypatch.setattr(registry, "registry_labels", lambda image, **kw: {**labels_of(stacks["debian-verl"], "app")})
    verdict = check(f"{REPOSITORY}@{CHILD['linux/amd64']}", key, RELEASE)
    assert verdict.platform == "linux/amd64" and verdict.platforms == {}
    assert verdict.status == "passed", verdict.problems


def test_policy_platform_problem(stacks: dict[str, Stack], tmp_path: Path) -> None:
    cert = json.loads(write_certificate(tmp_path / "c", stacks["debian"], repository=REPOSITORY,
                                        digest=CHILD["linux/arm64"], created=NOW, platform="linux/arm64").read_text())
    assert policy.platform_problem(cert, "linux/arm64") is None
    assert "made on linux/arm64" in str(policy.platform_problem(cert, "linux/amd64"))
    del cert["environment"]["platform"]
    assert policy.platform_problem(cert, "linux/amd64") is None
    assert "records no platform" in str(policy.platform_problem(cert, "linux/arm64"))


def inspect_runner(arch: str) -> Any:
    def run(argv: list[str], **kwargs: Any) -> Any:
        class Done:
            returncode = 0
            stdout = json.dumps({"Id": "sha256:" + "e" * 64, "Os": "linux", "Architecture": arch,
                                 "RepoDigests": [f"{REPOSITORY}@{CHILD['linux/arm64']}"], "Config": {"Labels": {}}})
            stderr = ""
        return Done()
    return run


def test_certify_runs_a_foreign_image_under_qemu_and_records_its_platform(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(emulation, "machine", lambda: "x86_64")
    digest = certify.resolve_digest(f"{REPOSITORY}@{CHILD['linux/arm64']}", inspect_runner("arm64"))
    assert digest.platform == "linux/arm64" and digest.foreign == "linux/arm64"
    command = certify.docker_smoke_command(digest.ref, Path("/tmp/c"), ["--cpu"], True, digest.foreign)
    assert command[:5] == ["docker", "run", "--rm", "--platform", "linux/arm64"]
    native = certify.resolve_digest(f"{REPOSITORY}@{CHILD['linux/arm64']}", inspect_runner("amd64"))
    assert native.foreign is None
    assert "--platform" not in certify.docker_smoke_command(native.ref, Path("/tmp/c"), ["--cpu"], True,
                                                            native.foreign)


def test_certify_of_a_foreign_image_without_qemu_stops_before_running(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    monkeypatch.setattr(emulation, "machine", lambda: "x86_64")
    monkeypatch.setattr(emulation, "BINFMT", tmp_path)
    runner = inspect_runner("arm64")
    ran: list[list[str]] = []

    def run(argv: list[str], **kwargs: Any) -> Any:
        ran.append(argv)
        return runner(argv, **kwargs)

    with pytest.raises(InputError, match=r"is linux/arm64: linux/arm64 programs on this x86_64 machine need QEMU"):
        certify.certify(f"{REPOSITORY}@{CHILD['linux/arm64']}", tmp_path / "out", ["--cpu"], run=run)
    assert [argv[:3] for argv in ran] == [["docker", "image", "inspect"]]


def test_one_platforms_image_of_a_multi_platform_stack_is_judged_as_one_image(
        stacks: dict[str, Stack], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str) -> None:
    """An image, not an index (the registry tests' images are such): judged on its own platform, with a note naming
    the index."""
    Registry(stacks["debian"], tmp_path, None, {"linux/amd64": None}, gpus=8).install(monkeypatch)
    verdict = check(f"{REPOSITORY}@{CHILD['linux/amd64']}", key, RELEASE)
    assert verdict.status == "passed", verdict.problems
    assert verdict.notes == ["one platform's image (linux/amd64); stack 'debian' is built for linux/amd64, "
                             "linux/arm64: its index (`mcore-images index`) serves them all"]
    monkeypatch.setattr(registry, "image_platform", lambda image, **kw: "linux/arm64")
    refused = check(f"{REPOSITORY}@{CHILD['linux/amd64']}", key, RELEASE)
    assert "the image is linux/arm64, which stack 'debian' is not built for" not in " ".join(refused.problems)
    assert "records no platform and the image is linux/arm64" in " ".join(refused.problems)
    Registry(stacks["debian-verl"], tmp_path / "verl", None, {"linux/amd64": None}, gpus=8).install(monkeypatch)
    monkeypatch.setattr(registry, "registry_labels", lambda image, **kw: labels_of(stacks["debian-verl"], "app"))
    monkeypatch.setattr(registry, "image_platform", lambda image, **kw: "linux/arm64")
    assert "the image is linux/arm64, which stack 'debian-verl' is not built for" in " ".join(
        check(f"{REPOSITORY}@{CHILD['linux/amd64']}", key, RELEASE).problems)
