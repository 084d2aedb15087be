"""The CLI at its edges: Ctrl-C is one line and exit 130; `plan` stays linear in the stacks and refuses an
oversized stacks file; a name from a file or the command line is echoed escaped; a refusal's first line names
the rule the input breaks, not what follows from it."""

from __future__ import annotations

import copy
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mcore_images import __main__ as entry_point
from mcore_images import cli
from mcore_images.catalogue import stacks
from mcore_images.resolve.plan import make_plan
from tests.unit.conftest import ROOT


def env_copy(tmp_path: Path, change=None) -> Path:
    """A copy of env/ under ``tmp_path`` whose stacks document ``change`` edits; returns the copy's root."""
    shutil.copytree(ROOT / "env", tmp_path / "env", symlinks=True)
    if change is not None:
        path = tmp_path / "env" / "stacks.json"
        doc = json.loads(path.read_text())
        change(doc["stacks"])
        path.write_text(json.dumps(doc))
    return tmp_path


def as_from_a_terminal() -> None:
    """In the child before exec: SIGINT as a terminal's command gets it. A shell without job control starts its
    background commands with SIGINT ignored, pytest's children inherit that, and Python then leaves it ignored:
    the tool must be tested as users start it, whatever started pytest."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_is_one_line_and_exit_130(tmp_path: Path) -> None:
    """Before: a KeyboardInterrupt traceback. `lock` is stopped while its resolver runs (a stand-in uv that
    says when it started)."""
    root = env_copy(tmp_path / "root")
    bin_dir, started = tmp_path / "bin", tmp_path / "uv-started"
    bin_dir.mkdir()
    (bin_dir / "uv").write_text(f'#!/bin/sh\ntouch "{started}"\nexec sleep 60\n')
    (bin_dir / "uv").chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", MCORE_IMAGES_ROOT=str(root),
               PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.Popen([sys.executable, "-m", "mcore_images", "lock", "--stack", "debian", "--full"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=as_from_a_terminal)
    deadline = time.monotonic() + 60
    while not started.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert started.exists(), proc.communicate(timeout=10)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    lines = err.strip().splitlines()
    assert proc.returncode == entry_point.INTERRUPTED and len(lines) == 1 and lines[0].startswith("interrupted"), err
    assert "Traceback" not in err and not list((root / "env" / "locks").rglob("*.new"))


ENTRIES = {"python -m mcore_images": ["-m", "mcore_images"],
           "the mcore-images script": ["-c", "import sys; from mcore_images.__main__ import main; sys.exit(main())"]}
"""How the tool starts: ``-m``, and what pyproject's entry point (``mcore_images.__main__:main``) runs."""


def interrupted_while_importing(entry: list[str], command: list[str], delay: float) -> tuple[int | None, str]:
    """Start the tool, wait until it runs its own code (its first module of the tool imported, as ``-X importtime``
    reports), wait ``delay`` more, send SIGINT; (exit code, stderr without the import times), or (None, …) when it
    had finished before the signal was due."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.Popen([sys.executable, "-X", "importtime", *entry, *command], env=env, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=as_from_a_terminal)
    assert proc.stderr is not None
    lines = []
    for line in proc.stderr:  # import times arrive as each import finishes
        lines.append(line)
        if line.split("|")[-1].strip() == "mcore_images.errors":  # the tool's own code runs from here
            break
    time.sleep(delay)
    running = proc.poll() is None
    if running:
        proc.send_signal(signal.SIGINT)
    rest = proc.stderr.read()
    proc.wait(timeout=60)
    said = "".join(line for line in [*lines, *rest.splitlines(keepends=True)] if not line.startswith("import time:"))
    return (proc.returncode if running else None), said


@pytest.mark.parametrize("entry", list(ENTRIES))
@pytest.mark.parametrize("command", [["plan"], ["lock", "--check"]], ids=["plan", "lock --check"])
def test_ctrl_c_while_the_tool_imports_is_one_line_and_exit_130(entry: str, command: list[str]) -> None:
    """Before: Ctrl-C within the first quarter second of `plan` or `lock --check` (its imports: every package of the
    tool) ended in `Traceback … KeyboardInterrupt`. The signal comes at several moments from there on, the first
    at once: each is the CLI's one line and exit 130, or the command had finished (exit 0) before it came."""
    landed = 0
    for delay in (0.0, 0.01, 0.05, 0.1, 0.2, 0.3):
        code, said = interrupted_while_importing(ENTRIES[entry], command, delay)
        if code is None or (code == 0 and not said.strip()):  # it had finished its work before the signal came
            continue
        landed += 1
        assert code == entry_point.INTERRUPTED and said.strip().splitlines() == [entry_point.INTERRUPTED_LINE], \
            f"SIGINT {delay} s after its first import: exit {code}\n{said}"
    assert landed, "every run had finished before its signal: none was interrupted"


def test_the_installed_command_starts_where_ctrl_c_is_handled_first() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    assert 'mcore-images = "mcore_images.__main__:main"' in text


def generated(count: int) -> tuple[dict[str, stacks.Stack], dict[str, str]]:
    """``count`` stacks made from the committed ones (each a copy under a new name), and each one's source."""
    every = list(stacks.load_stacks().values())
    made, source = {}, {}
    for i in range(count):
        original = every[i % len(every)]
        made[f"gen{i}"] = original.replace(name=f"gen{i}", groups=(), layers_from="")
        source[f"gen{i}"] = original.name
    return made, source


def test_plan_stays_linear_in_the_stacks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: every stack was compared with every other under each shared tag (400 stacks: 24 s, 4000: past
    300 s). 1000 stacks (each reading its source's locks, so shared tags are compared by content) must plan
    within 3 x the linear bound from 10; quadratic would be 100 x that."""
    from mcore_images.resolve import lock_files

    every, source = generated(1000)
    real = lock_files.lock_path
    monkeypatch.setattr(lock_files, "lock_path", lambda s, layer, **kw: real(
        s.replace(name=source.get(s.name, s.name)), layer, **kw))

    def timed(count: int) -> float:
        some = dict(list(every.items())[:count])
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            plans = make_plan(list(some.values()), every=some)
            best = min(best, time.perf_counter() - t0)
        assert not any(v.rule == "tag-content" for p in plans for v in p.violations)
        return best

    small, large = timed(10), timed(1000)
    assert large < 3 * 100 * small, f"10 stacks {small:.3f} s, 1000 stacks {large:.3f} s"


def test_an_oversized_stacks_file_is_refused_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture) -> None:
    root = env_copy(tmp_path, lambda entries: entries.extend(
        dict(copy.deepcopy(entries[2]), name=f"gen{i}", groups=[]) for i in range(stacks.MAX_STACKS_BYTES // 1000)))
    monkeypatch.setenv("MCORE_IMAGES_ROOT", str(root))
    assert cli.main(["plan"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"over the {stacks.MAX_STACKS_BYTES >> 20} MiB this tool reads" in err[0], err


@pytest.mark.parametrize(("name", "needle"), [
    ("a\nb\x1b[31m", r"stack 'a\nb\x1b[31m'"),
    ("a\x00b", r"stack 'a\x00b'"),
    ("a" * 200, "at most 48 lowercase letters"),
])
def test_a_bad_stack_name_in_the_file_is_escaped_and_the_limit_named(
        name: str, needle: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture) -> None:
    root = env_copy(tmp_path, lambda entries: entries[1].update(name=name))
    monkeypatch.setenv("MCORE_IMAGES_ROOT", str(root))
    assert cli.main(["plan"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err and "\x1b" not in err and "\x00" not in err, repr(err)
    assert len(err) < 400, err


def test_an_unknown_stack_on_the_command_line_is_escaped(capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["plan", "--stack", "x\x1b[2Jy\n"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and r"unknown stack 'x\x1b[2Jy\n'" in err and "\x1b" not in err, repr(err)


def test_a_duplicate_stack_name_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture) -> None:
    """Before: all 12 names were listed, not which one was given twice."""
    root = env_copy(tmp_path, lambda entries: entries[1].update(name="debian"))
    monkeypatch.setenv("MCORE_IMAGES_ROOT", str(root))
    assert cli.main(["plan"]) == 2
    err = capsys.readouterr().err
    assert "stack name 'debian' used more than once" in err and "ngc" not in err, err


@pytest.mark.parametrize(("stack", "field", "value", "rule"), [
    ("debian", "mcore", "0.12.0", "[mcore-min]"),  # before: the stale lock came first
    ("cuda", "base_digest", "", "[release-pinned]"),  # before: tag-content came first
])
def test_a_refusals_first_line_names_the_broken_rule(stack: str, field: str, value: str, rule: str, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture) -> None:
    root = env_copy(tmp_path, lambda entries: next(e for e in entries if e["name"] == stack).update({field: value}))
    monkeypatch.setenv("MCORE_IMAGES_ROOT", str(root))
    assert cli.main(["build", "--stack", stack, "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {rule}"), err


def test_the_release_group_refuses_a_locally_built_base(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture) -> None:
    """Before: `debian` (a debootstrap'd base, no digest anyone can pull) in the release group read `rules: ok`."""
    root = env_copy(tmp_path, lambda entries: next(e for e in entries if e["name"] == "debian")["groups"].append(
        "release"))
    monkeypatch.setenv("MCORE_IMAGES_ROOT", str(root))
    assert cli.main(["plan", "--stack", "debian"]) == 1
    assert "[release-pinned] stack 'debian': the release group refuses a locally built base" in capsys.readouterr().out
