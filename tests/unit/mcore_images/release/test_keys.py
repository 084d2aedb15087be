"""verify, promote and attach judge --key before any registry call: a missing, empty or foreign key file is
one line and exit 2, and nothing is asked of oras or cosign."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mcore_images import cli
from mcore_images.release import registry

DIGEST = "sha256:" + "1" * 64
IMAGE = f"127.0.0.1:5999/mcore-images@{DIGEST}"


@pytest.fixture
def no_tools(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """oras and cosign that record any call (there must be none)."""
    log = tmp_path / "calls.log"
    for tool in ("oras", "cosign"):
        path = tmp_path / tool
        path.write_text(f"#!/bin/sh\necho {tool} \"$@\" >> {log}\nexit 1\n")
        path.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    return log


@pytest.mark.parametrize("argv", [
    ["verify", IMAGE, "--policy", "ci"],
    ["promote", IMAGE, "--stack", "debian", "--policy", "ci"],
    ["attach", IMAGE, "--certificate", "."],
])
@pytest.mark.parametrize(("key", "needle"), [("missing.pub", "does not exist"), ("folder", "is a folder"),
                                             ("empty.pub", "is not a PEM key")])
def test_a_bad_key_is_refused_before_the_registry(argv: list[str], key: str, needle: str, tmp_path: Path,
                                                   no_tools: Path, capsys: pytest.CaptureFixture) -> None:
    """Before: verify and promote went to the registry first and failed later (or looked like a refusal)."""
    (tmp_path / "folder").mkdir()
    (tmp_path / "empty.pub").write_text("")
    assert cli.main([*argv, "--key", str(tmp_path / key)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
    assert not no_tools.exists(), no_tools.read_text()


def test_kms_references_and_pem_files_pass(tmp_path: Path) -> None:
    pem = tmp_path / "cosign.pub"
    pem.write_text("-----BEGIN PUBLIC KEY-----\nMFkw\n-----END PUBLIC KEY-----\n")
    assert registry.key_problem(str(pem)) is None
    assert registry.key_problem("awskms:///arn:aws:kms:us-east-1:1:key/abc") is None


PUBLIC = "-----BEGIN PUBLIC KEY-----\nMFkw\n-----END PUBLIC KEY-----\n"
PRIVATE = "-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\neyJr\n-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n"


@pytest.mark.parametrize(("argv", "wants_private"), [
    (["verify", IMAGE, "--policy", "ci", "--key"], False),
    (["promote", IMAGE, "--stack", "debian", "--policy", "ci", "--key"], False),
    (["ledger", "127.0.0.1:5999/mcore-images", "--key"], False),
    (["attach", IMAGE, "--certificate", ".", "--key"], True),
    (["promote", IMAGE, "--stack", "debian", "--policy", "ci", "--key", "PUB", "--execute", "--sign-key"], True),
    (["ledger", "127.0.0.1:5999/mcore-images", "--key", "PUB", "--refresh"], True),
])
def test_the_wrong_half_of_the_key_pair_is_refused_naming_the_right_one(argv: list[str], wants_private: bool,
                                                                        tmp_path: Path, no_tools: Path,
                                                                        capsys: pytest.CaptureFixture) -> None:
    """Before: `verify REF --key cosign.key` (the private key) passed the key check and went to the registry."""
    (tmp_path / "cosign.pub").write_text(PUBLIC)
    (tmp_path / "cosign.key").write_text(PRIVATE)
    wrong = tmp_path / ("cosign.pub" if wants_private else "cosign.key")
    argv = [str(tmp_path / "cosign.pub") if a == "PUB" else a for a in argv]
    assert cli.main([*argv, str(wrong)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    fix = "give the private half of the pair, cosign.key" if wants_private else "give its public half, cosign.pub"
    assert len(err) == 1 and f"{wrong} is a {'PEM PUBLIC KEY, not a private key' if wants_private else 'private key'}" \
        in err[0] and fix in err[0], err
    assert not no_tools.exists(), no_tools.read_text()


@pytest.mark.parametrize(("path", "kind"), [("/dev/zero", "a character device"), ("/dev/null", "a character device"),
                                            ("fifo", "a pipe")])
def test_a_key_that_is_not_a_regular_file_is_named_as_such(path: str, kind: str, tmp_path: Path, no_tools: Path,
                                                            capsys: pytest.CaptureFixture) -> None:
    """Before: `verify REF --key /dev/zero` said "does not exist". Nothing is read from it (a pipe would block)."""
    if path == "fifo":
        path = str(tmp_path / "fifo")
        os.mkfifo(path)
    assert cli.main(["verify", IMAGE, "--policy", "ci", "--key", path]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: --key {path} is {kind}, not a regular file: give the public key of whoever signed the "
                   f"image (its publisher's cosign.pub; {registry.PUBLISHER} says where this project's is) or a KMS "
                   "URI (awskms://…)"], err
    assert not no_tools.exists()


def test_each_half_passes_where_it_belongs(tmp_path: Path) -> None:
    (tmp_path / "cosign.pub").write_text(PUBLIC)
    (tmp_path / "cosign.key").write_text(PRIVATE)
    assert registry.key_problem(str(tmp_path / "cosign.pub")) is None
    assert registry.key_problem(str(tmp_path / "cosign.key"), "--sign-key", private=True) is None
    (tmp_path / "cert.pem").write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    assert "is a PEM CERTIFICATE, not a public key" in str(registry.key_problem(str(tmp_path / "cert.pem")))


@pytest.mark.parametrize(("argv", "signing"), [
    (["verify", IMAGE, "--policy", "ci"], False),
    (["promote", IMAGE, "--stack", "debian", "--policy", "ci"], False),
    (["attach", IMAGE, "--certificate", "."], True),
])
def test_a_missing_public_key_names_its_publisher_and_a_missing_signing_key_how_to_make_one(
        argv: list[str], signing: bool, tmp_path: Path, no_tools: Path, capsys: pytest.CaptureFixture) -> None:
    """Before: verify told a user without the key to run `cosign generate-key-pair`, which makes a key that no
    published image is signed with; the public key comes from whoever signed the image."""
    assert cli.main([*argv, "--key", str(tmp_path / "cosign.pub")]) == 2
    (err,) = capsys.readouterr().err.strip().splitlines()
    if signing:
        assert "cosign generate-key-pair" in err, err
    else:
        assert "generate-key-pair" not in err and "the public key of whoever signed the image" in err, err
        assert registry.PUBLISHER in err, err
