"""No process outlives the smoke: after it passes, fails, or is stopped by SIGTERM or Ctrl-C while a background
save's helpers run, the container holds nothing but its shell. Before: megatron-core's result-queue manager and
its resource tracker stayed alive with parent 1 after every run that saved in the background (8 pairs after one
CPU certify), and the ranks outlived a torchrun that the launcher had to kill.

Each test starts its own container and counts the processes in it from /proc, before and after.
"""

from __future__ import annotations

import shlex
from typing import Any

import pytest
from tests.image.runtime.test_checkpoint_dir import SMOKE, run
from tests.image.utils import negatives
from tests.image.utils.negatives import Negative

LIST = ("python -c \"import os; me = os.getpid(); "
        "[print(p, open(f'/proc/{p}/cmdline').read().replace(chr(0), ' ')[:160]) for p in sorted(os.listdir('/proc'), "
        "key=lambda q: (len(q), q)) if p.isdigit() and int(p) not in (1, me) and os.path.exists(f'/proc/{p}/cmdline') "
        "and open(f'/proc/{p}/cmdline').read()]\"")
"""Prints every process of the container but its first (the test's shell) and itself."""

HELPER_UP = ("i=0; while [ $i -lt 1200 ]; do grep -qs 'spawn_[m]ain' /proc/[0-9]*/cmdline && break; sleep 0.1; "
             "i=$((i+1)); done; [ $i -lt 1200 ] || { echo 'no save helper started' >&2; exit 3; }")
"""Waits until the background save's helper process runs (megatron-core's spawned result-queue manager; the
bracket keeps the pattern from matching this script's own text in /proc/1/cmdline)."""


SETTLE_S = 10
"""How long the processes a run leaves may take to go (a SIGKILLed rank's memory is unmapped, a resource tracker
reads the end of its pipe and cleans up): they must be gone by then."""


def left_after(image: Any, script: str, *docker: str) -> tuple[int, list[str], str]:
    """Run ``script``, then list what is still running once nothing has been for a moment, or after SETTLE_S: (the
    script's exit code, the processes left, the output)."""
    settle = (f"t=0; while [ $t -lt {SETTLE_S * 5} ] && [ -n \"$({LIST})\" ]; do sleep 0.2; t=$((t+1)); done")
    done = run(image, f"{script}; rc=$?; {settle}; echo '--- left:'; {LIST}; exit $rc", *docker)
    output = done.stdout + done.stderr
    left = done.stdout.split("--- left:\n", 1)[1].splitlines() if "--- left:\n" in done.stdout else ["(not listed)"]
    return done.returncode, left, output


def test_nothing_is_left_after_a_run_that_saves_in_the_background(image: Any) -> None:
    rc, left, output = left_after(image, f"{shlex.join(SMOKE)} > /tmp/smoke.log 2>&1")
    assert rc == 0, output[-3000:]
    assert left == [], f"processes outlived the smoke: {left}"


def test_nothing_is_left_after_a_run_that_fails_in_a_save(image: Any) -> None:
    """A full checkpoint folder (a 256 KiB tmpfs) fails the round trip on rank 0 mid-save."""
    rc, left, output = left_after(image, f"{shlex.join(SMOKE)} > /tmp/smoke.log 2>&1", "--tmpfs", "/ck:size=256k")
    assert rc == 1, output[-3000:]
    assert left == [], f"processes outlived the failed smoke: {left}"


@pytest.mark.parametrize(("signal", "code"), [("TERM", 143), ("INT", 130)])
def test_nothing_is_left_after_a_signal_during_a_background_save(image: Any, signal: str, code: int) -> None:
    """SIGTERM (docker stop, Slurm, a timeout) or Ctrl-C reaches the smoke while its save helpers run: it stops
    the ranks (their own session) and leaves with 128 + the signal, one line and no traceback."""
    two_ranks = [*SMOKE[:SMOKE.index("--nproc")], "--nproc", "2", "--layouts", "dp2,tp2", "--models", "dense",
                 "--spec", "local", "--steps", "2", "--checkpoint-dir", "/ck"]
    script = (f"{shlex.join(two_ranks)} > /tmp/smoke.log 2>/tmp/smoke.err & pid=$!; {HELPER_UP}; kill -{signal} $pid; "
              "wait $pid; rc=$?; cat /tmp/smoke.err; (exit $rc)")
    rc, left, output = left_after(image, script)
    assert rc == code, output[-3000:]
    assert f"smoke: stopped by SIG{signal}" in output and "Traceback" not in output, output[-3000:]
    assert left == [], f"processes outlived the smoke stopped by SIG{signal}: {left}"


LIFETIME_UNTIED = (
    "RUN python -c \"import mcore_images.smoke.kit.lifetime as m, pathlib; p = pathlib.Path(m.__file__); "
    "p.write_text(p.read_text() + chr(10).join(['', 'def die_with_parent(parent=None):', "
    "'    import atexit, time', '    atexit.register(time.sleep, 60)', "
    "'def helpers_die_with_rank():', '    pass', '']))\"\n"
)
"""The smoke as it was: no process it starts is tied to the one that started it. Each rank also stays 60 s at its
exit, as the ranks of a real job would still be running: a two-step run's ranks, once untied, may otherwise finish
within the settle time and leave nothing to see, and the negative would pass or fail by the machine's speed."""


UNTIED = Negative("untied", LIFETIME_UNTIED)


@pytest.mark.negatives(UNTIED)
def test_negative_untied_helpers_outlive_a_stopped_smoke(negative_images: negatives.NegativeImages) -> None:
    """On an image whose smoke does not tie its processes to their parents, the signal test fails: the ranks and
    their save helpers outlive the smoke."""
    rc, failed, output = negatives.failures(negative_images.ref(UNTIED),
                                            test_nothing_is_left_after_a_signal_during_a_background_save)
    expected = {"test_nothing_is_left_after_a_signal_during_a_background_save[TERM-143]",
                "test_nothing_is_left_after_a_signal_during_a_background_save[INT-130]"}
    assert rc == 1 and expected <= failed, f"exit {rc}, failed {sorted(failed)}:\n{output[-3000:]}"
