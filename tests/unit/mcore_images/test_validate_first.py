"""Every command judges all its inputs before it acts: a bad input is one line and exit 2, with no program
started that changes anything (docker, oras, cosign, debootstrap, kubectl, uv are recorders on PATH here) and
no file or folder written, removed or changed. Each command runs in a temporary root of sentinel files, never
a real system path."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcore_images import cli
from tests.support.sentinels import make_root, snapshot

RECORDED = ("docker", "oras", "cosign", "debootstrap", "kubectl", "uv", "skopeo", "sbatch", "srun")
"""Programs a command could start to change something; each is a recorder that writes its argv and fails."""

READS = (
    ("docker", "image", "inspect"), ("docker", "inspect"), ("docker", "info"), ("docker", "version"),
    ("docker", "buildx", "version"), ("docker", "buildx", "imagetools", "inspect"), ("docker", "image", "ls"),
    ("docker", "images"), ("docker", "ps"), ("docker", "manifest", "inspect"), ("oras", "manifest", "fetch"),
    ("oras", "discover"), ("oras", "repo", "tags"), ("oras", "blob", "fetch"), ("oras", "version"),
    ("cosign", "verify"), ("cosign", "version"), ("cosign", "tree"),
)
"""Calls that only read; a bad input may still have been found by one (an image that is not there)."""

DIGEST = "127.0.0.1:5000/mcore-images@sha256:" + "a" * 64
SHA = "0123456789abcdef0123456789abcdef01234567"

CASES = {
    "plan registry": (["plan", "--registry", "bad!host"], "is not a registry"),
    "plan stack": (["plan", "--stack", "nope"], "unknown stack 'nope'"),
    "jobs archs": (["jobs", "--archs", "0"], "at least one CUDA architecture"),
    "lock stack": (["lock", "--stack", "nope"], "unknown stack 'nope'"),
    "lock base-from": (["lock", "--stack", "debian", "--base-from", "nope"], "unknown stack 'nope'"),
    "update passthrough": (["update", "--", "x"], "takes no arguments after --"),
    "validate passthrough": (["validate", "--", "x"], "takes no arguments after --"),
    "base stack": (["base", "--stack", "nope"], "unknown stack 'nope'"),
    "base mirror": (["base", "--mirror", "notaurl"], "is not a mirror address"),
    "base file mirror": (["base", "--mirror", "file:///no/such/mirror"], "is not a folder"),
    "base platform": (["base", "--platform", "linux/s390x"], "is not one of linux/amd64"),
    "build stack": (["build", "--stack", "nope"], "unknown stack 'nope'"),
    "build max-jobs": (["build", "--max-jobs", "0"], "MAX_JOBS=0 is invalid"),
    "build push": (["build", "--", "--push"], "would push uncertified images"),
    "build base context": (["build", "--stack", "debian", "--candidate", SHA, "--registry", "127.0.0.1:5000", "--",
                            "--set", "*.contexts.base=docker-image://alpine"], "overrides 'contexts.base'"),
    "build locks context": (["build", "--stack", "debian", "--", "--set", "*.contexts.locks=etc"],
                            "overrides 'contexts.locks'"),
    "build mirror": (["build", "--stack", "debian", "--dry-run"], "DEBIAN_MIRROR 'ftp:mirror' is not a mirror"),
    "doctor only": (["doctor", "--only", "nope"], "unknown check 'nope'"),
    "doctor hf-config": (["doctor", "--hf-config", "no-such-config"],
                         "no-such-config not found: give a HF config.json or the folder holding one"),
    "smoke image": (["smoke", "--image", "bad!ref"], "is not a valid name"),
    "smoke out file": (["smoke", "--image", "x", "--out", "file.txt"], "--out file.txt is a file"),
    "smoke out system folder": (["smoke", "--image", "x", "--out", "etc"], "did not write"),
    "bridge certificate": (["bridge", "--image", "x", "--certificate", "no-such-folder"], "not found"),
    "bridge out home": (["bridge", "--image", "x", "--out", "home/user"], "did not write"),
    "bench out checkout": (["bench", "--image", "x", "--out", "checkout"], "did not write"),
    "run image": (["run", "bad!ref"], "is not a valid name"),
    "run gpus": (["run", "x", "--gpus", "bogus"], "is not a GPU selection"),
    "run out file": (["run", "x", "--out", "file.txt"], "--out file.txt is a file"),
    "run out under a file": (["run", "x", "--out", "file.txt/out", "--print"], "file.txt is a file"),
    "certify image": (["certify", "bad!ref"], "is not a valid name"),
    "certify out": (["certify", "x", "--out", "etc"], "did not write"),
    "attach image": (["attach", "x", "--certificate", "c", "--key", "k"], "must name the candidate by digest"),
    "attach key": (["attach", DIGEST, "--certificate", "home/user", "--key", "no-such.key"], "no-such.key"),
    "promote policy": (["promote", DIGEST, "--stack", "debian", "--key", "k", "--policy", "nope"],
                       "unknown policy 'nope'"),
    "promote stack": (["promote", DIGEST, "--stack", "nope", "--key", "k"], "unknown stack 'nope'"),
    "verify image": (["verify", "bad!ref", "--key", "k"], "is not a valid name"),
    "verify key": (["verify", DIGEST, "--key", "no-such.key"], "--key no-such.key does not exist"),
    "tags stack": (["tags", "--stack", "nope"], "unknown stack 'nope'"),
    "ledger repository": (["ledger", "127.0.0.1:5000/x:tag", "--key", "k"], "give a repository such as"),
    "ledger key": (["ledger", "127.0.0.1:5000/x", "--key", "no-such.pub"], "no-such.pub"),
    "ledger adopt": (["ledger", "127.0.0.1:5000/x", "--key", "k", "--adopt", "latest"], "--adopt 'latest' is not a"),
    "promote sign-key": (["promote", DIGEST, "--stack", "debian", "--key", "k", "--execute"], "give --sign-key"),
    "matrix group": (["matrix", "--group", "nope"], "unknown group 'nope'"),
    "index sha": (["index", "--candidates", "checkout", "--sha", "x"], "is not a git commit"),
    "outdated stack": (["outdated", "--stack", "nope"], "unknown stack 'nope'"),
    "outdated bump": (["outdated", "--bump", "nope"], "unknown stack 'nope'"),
    "reproduce image": (["reproduce", "bad!ref"], "is not a valid name"),
    "build-timing stack, cold": (["build-timing", "--stack", "nope", "--scenarios", "cold", "--prune-build-cache"],
                                 "unknown stack 'nope'"),
    "build-timing pin": (["build-timing", "--scenarios", "cold,mcore", "--mcore", "0.12.0", "--prune-build-cache"],
                         "[mcore-min]"),
    "build-timing out file": (["build-timing", "--scenarios", "warm", "--out", "etc/passwd"],
                              "`mcore-images build-timing` did not write"),
    "build-timing out folder": (["build-timing", "--scenarios", "warm", "--out", "etc"], "--out etc is a folder"),
    "report out": (["report", "--out", "etc"], "did not write"),
    "report input": (["report", "--out", "site", "no-such-folder"], "no such file or folder"),
    "kube-manifest image": (["kube-manifest", "bad!ref"], "is not a valid name"),
    "from-make command": (["from-make", "nope"], "nope"),
}


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Path]]:
    """(fake root as the working folder, the recorders' log): PATH starts with the recorders, HOME is the fake
    root's home folder, DEBIAN_MIRROR is unset."""
    root = make_root(tmp_path)
    bin_dir, log = tmp_path / "bin", tmp_path / "recorded.log"
    bin_dir.mkdir()
    log.touch()
    for name in RECORDED:
        recorder = bin_dir / name
        recorder.write_text(f'#!/bin/sh\nprintf "%s" "{name}" >> "{log}"\nfor a in "$@"; do printf " %s" "$a" >> '
                            f'"{log}"; done\necho >> "{log}"\necho "{name}: a recorder, nothing ran" >&2\nexit 1\n')
        recorder.chmod(recorder.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("HOME", str(root / "home" / "user"))
    monkeypatch.delenv("DEBIAN_MIRROR", raising=False)
    monkeypatch.chdir(root)
    yield root, log


def actions(log: Path) -> list[str]:
    """The recorded calls that are not reads."""
    calls = [line.split() for line in log.read_text().splitlines() if line.strip()]
    return [" ".join(c) for c in calls if not any(tuple(c[:len(r)]) == r or (c[:3] == ["docker", "buildx", "bake"]
                                                                          and "--print" in c) for r in READS)]


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_a_bad_input_is_refused_before_anything_acts(case: str, sandbox: tuple[Path, Path],
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture) -> None:
    root, log = sandbox
    argv, needle = CASES[case]
    if case == "build mirror":
        monkeypatch.setenv("DEBIAN_MIRROR", "ftp:mirror")
    before = snapshot(root)
    code = cli.main(argv)
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert code == 2 and len(lines) == 1, f"exit {code}\n{captured.err}"
    assert needle in lines[0], lines[0]
    assert not actions(log), f"started before judging its input: {actions(log)}"
    assert snapshot(root) == before, "the fake root changed"


def test_every_command_has_a_bad_input_here() -> None:
    covered = {argv[0] for argv, _ in CASES.values()}
    assert covered == {c.name for c in cli.commands()}, sorted({c.name for c in cli.commands()} - covered)
