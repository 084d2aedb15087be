""".ci/commit-messages.sh on a repository of its own: a subject over 72 characters and a body with no blank line
before it fail, each named by its commit; what comes before the base is never read; a base the clone lacks, or one
HEAD does not descend from, is one line and exit 2. `make lint` runs it (CI's lint phase)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.unit.conftest import ROOT
from tests.unit.repo.make_dry import dry_run

SCRIPT = ROOT / ".ci" / "commit-messages.sh"
IDENTITY = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@example.com", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True,
                          env={**os.environ, **IDENTITY})
    return done.stdout.strip()


def commit(repo: Path, message: str) -> str:
    """A commit with exactly ``message`` (git keeps it as written: no cleanup of its lines)."""
    git(repo, "commit", "-q", "--allow-empty", "--cleanup=verbatim", "-m", message)
    return git(repo, "rev-parse", "--short", "HEAD")


def check(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=repo, capture_output=True, text=True, timeout=60,
                          env={**os.environ, **IDENTITY})


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    git(tmp_path, "init", "-q", "-b", "main")
    commit(tmp_path, "x" * 200 + "\nno blank line before this body, before the base: never read")
    return tmp_path


def test_good_messages_pass(repo: Path) -> None:
    base = git(repo, "rev-parse", "HEAD")
    commit(repo, "A subject alone")
    commit(repo, "s" * 72)
    commit(repo, "é" * 72)  # 72 characters, 144 bytes
    commit(repo, "A subject\n\nand a body\nof two lines")
    done = check(repo, base)
    assert done.returncode == 0, done.stderr
    assert "4 commit message(s) after" in done.stderr


def test_a_long_subject_and_a_body_without_a_blank_line_fail_each_named(repo: Path) -> None:
    base = git(repo, "rev-parse", "HEAD")
    long = commit(repo, "s" * 73)
    glued = commit(repo, "A subject\nglued to its body")
    fine = commit(repo, "Fine")
    done = check(repo, base)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    assert any(line.startswith(f"[commit-messages] {long}: the subject is 73 characters, over 72") for line in lines)
    assert any(line.startswith(f"[commit-messages] {glued}: no blank line between the subject and the body")
               for line in lines)
    assert not any(fine in line for line in lines), done.stderr
    assert lines[-1].startswith("[commit-messages] 2 problem(s) in the 3 commit message(s) after"), lines[-1]


def test_a_base_not_in_the_clone_or_not_below_head_is_one_line_and_exit_2(repo: Path) -> None:
    done = check(repo, "0123456789abcdef0123456789abcdef01234567")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "is not in this clone: fetch the whole history" in done.stderr
    git(repo, "checkout", "-q", "--orphan", "other")
    elsewhere = commit(repo, "Another root")
    git(repo, "checkout", "-q", "main")
    done = check(repo, elsewhere)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "HEAD does not descend from" in done.stderr


def test_lint_runs_it() -> None:
    assert "bash .ci/commit-messages.sh" in dry_run("lint", {})
