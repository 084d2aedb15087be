""".ci/release-local.sh says each phase as it starts, with the time since the script started (before: a line after
some phases only, `docker pull -q` silent, no times)."""

from __future__ import annotations

import re
import subprocess

from tests.unit.conftest import ROOT

SCRIPT = (ROOT / ".ci" / "release-local.sh").read_text()


def test_a_step_line_carries_the_time_since_the_start() -> None:
    helpers = "\n".join(line for line in SCRIPT.splitlines() if line.startswith(("elapsed()", "say()")))
    done = subprocess.run(["bash", "-c", f"started=$(( $(date +%s) - 65 ))\n{helpers}\nsay certify 1/2: img"],
                          capture_output=True, text=True, check=True)
    assert re.fullmatch(r"::release-local 1:0[56] certify 1/2: img\n", done.stdout), done.stdout


def test_each_long_phase_is_said_before_it_starts_and_no_pull_is_quiet() -> None:
    lines = [line.strip() for line in SCRIPT.splitlines() if line.strip() and not line.strip().startswith("#")]
    for starts in ("mcore build --stack", "mcore certify", "mcore promote", 'docker pull "$image"',
                   'docker pull "$REGISTRY'):
        at = next(i for i, line in enumerate(lines) if line.startswith(starts))
        assert any(line.startswith("say ") for line in lines[max(0, at - 3):at]), starts
    assert "pull -q" not in SCRIPT
