""".ci/clean-host.sh, which `make test-unit` runs the unit tests through: a variable inherited from its caller never
makes it skip its own mount namespace, and no command is one line and exit 2. Each run here happens inside a mount
namespace of the test's own, so that what the script mounts can never reach this machine's /proc/meminfo."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.support.host import need
from tests.unit.conftest import ROOT

SCRIPT = ROOT / ".ci" / "clean-host.sh"


def in_a_namespace_of_its_own(script: str, **env: str) -> subprocess.CompletedProcess:
    """``script`` (sh) in a private mount namespace: the caller the clean-host script sees."""
    userns = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    return subprocess.run(["unshare", *userns, "--mount", "--propagation", "private", "sh", "-c", script],
                          env={**os.environ, **env}, capture_output=True, text=True, timeout=120)


def test_an_inherited_inside_variable_does_not_mount_over_the_callers_meminfo(tmp_path: Path) -> None:
    """Before: with MCORE_CLEAN_HOST_INSIDE=1 inherited, the script skipped its own namespace and bind-mounted the
    file MCORE_CLEAN_HOST_MEMINFO names over the caller's /proc/meminfo."""
    need("unshare")
    sentinel = tmp_path / "sentinel"
    sentinel.write_text("MemTotal: 1 kB (a sentinel: mounted over the caller's /proc/meminfo)\n")
    done = in_a_namespace_of_its_own(f'bash "{SCRIPT}" head -1 /proc/meminfo; head -1 /proc/meminfo',
                                     MCORE_CLEAN_HOST_INSIDE="1", MCORE_CLEAN_HOST_MEMINFO=str(sentinel))
    assert done.returncode == 0, done.stderr
    seen_inside, seen_by_caller = done.stdout.splitlines()
    assert seen_inside == f"MemTotal:       {64 * 1024 * 1024} kB"  # the script's own namespace and file
    assert "sentinel" not in seen_by_caller and "sentinel" not in seen_inside, done.stdout


def test_no_command_is_one_line_and_exit_2() -> None:
    done = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "[clean-host] error: give the command to run: .ci/clean-host.sh python3 -m pytest -q tests/unit"]
