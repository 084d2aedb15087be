"""A crashed or hung rank ends the smoke in time, and the certificate names the rank and the collective.

These run the image's own smoke on CPU (gloo, two ranks). A timed run goes through ``timed.py`` (below), which
notes when the planted fault fires and when the launcher exits, so the bound is on the hang itself, not on
how long two ranks took to import torch and megatron-core on a small CI machine.

Every limit is a native-speed promise, multiplied by the ``slowdown`` fixture: 1 for an image of this machine's
platform, emulation.SLOWDOWN for one under QEMU, where the stretched limit still tells a run the fault handling
ended from one that only its outer timeout or the watchdog would have ended.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

TIMEOUT_S = 10
"""The collective timeout the hang tests give: small, so a slow path shows."""
SLACK_S = 15
"""A hung collective must end the run within the timeout plus this (issue: `--timeout` + 15 s)."""
OUTER_S = 600
"""What a timed run may take in all before `timeout` stops it; the hang tests' watchdog, so that it never fires
before the path under test."""

TIMED = r'''
import json, subprocess, sys, time
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
start, fault, tail = time.monotonic(), None, []
for line in proc.stdout:
    if fault is None and "injected fault" in line:
        fault = time.monotonic()
    tail = (tail + [line])[-400:]
rc = proc.wait()
end = time.monotonic()
print(json.dumps({"rc": rc, "wall_s": end - start, "after_fault_s": None if fault is None else end - fault,
                  "tail": "".join(tail)}))
'''


def seconds(limit: float) -> str:
    """A limit as the smoke's command line takes it."""
    return f"{limit:.0f}"


def timed(host: Any, slowdown: float, *argv: str) -> dict[str, Any]:
    """Run ``argv`` in the container through TIMED; its timings, exit code and last lines of output."""
    cmd = " ".join(shlex.quote(a) for a in argv)
    result = host.run(f"cd /tmp && timeout {seconds(OUTER_S * slowdown)} python -c {shlex.quote(TIMED)} {cmd}")
    assert result.rc == 0, f"the timing driver failed (exit {result.rc}): {result.stderr[-2000:]}"
    return json.loads(result.stdout.strip().splitlines()[-1])


def certificate(host: Any, out: str) -> dict[str, Any]:
    return json.loads(host.file(f"{out}/certificate.json").content_string)


SMOKE_FAULT = ("python", "-m", "mcore_images.smoke", "--cpu", "--nproc", "2", "--layouts", "tp2", "--models", "dense",
               "--spec", "local", "--steps", "3", "--no-attention")
"""A faulty run; the attention check, which runs after the ranks, is not what these tests judge."""


def test_a_hung_rank_ends_the_run_within_the_timeout_and_is_named(host: Any, slowdown: float) -> None:
    out = "/tmp/fail-fast-hang"
    run = timed(host, slowdown, *SMOKE_FAULT, "--inject-fault", "hang", "--fault-rank", "1",
                "--timeout", str(TIMEOUT_S), "--watchdog", seconds(OUTER_S * slowdown), "--out", out)
    cert = certificate(host, out)
    assert run["rc"] == 1 and cert["status"] == "failed", run["tail"]
    assert run["after_fault_s"] is not None, f"the planted fault never fired:\n{run['tail']}"
    limit = TIMEOUT_S + SLACK_S * slowdown
    assert run["after_fault_s"] < limit, (
        f"the run ended {run['after_fault_s']:.1f} s after rank 1 stopped answering "
        f"(limit {TIMEOUT_S} s timeout + {SLACK_S} s x {slowdown:g}): {cert['error']}")
    error = cert["error"]
    assert "rank 0" in error and "collective" in error and "on ranks [0, 1]" in error, error
    assert "rank 1 was in no collective" in error, error


def test_a_rank_that_raises_ends_the_run(host: Any, slowdown: float) -> None:
    """The launcher ends the run when a rank dies: well before the collective timeout would."""
    out = "/tmp/fail-fast-raise"
    run = timed(host, slowdown, *SMOKE_FAULT, "--inject-fault", "raise", "--fault-rank", "1",
                "--timeout", seconds(60 * slowdown), "--out", out)
    cert = certificate(host, out)
    assert run["rc"] == 1 and "injected fault: rank 1 raised" in cert["error"], run["tail"]
    assert run["after_fault_s"] is None or run["after_fault_s"] < SLACK_S * slowdown, run


# The path NCCL needs: the backend itself never gives up (gloo's own timeout here is 10 minutes), so only the
# collective monitor can end the rank that waits. Rank 1 says when it stops answering, so the bound is on the
# monitor, not on two ranks importing torch.
MONITOR = r'''
import datetime, os, sys, time
import torch, torch.distributed as dist
from mcore_images.smoke.kit import collectives
collectives.install(3.0)
dist.init_process_group("gloo", timeout=datetime.timedelta(minutes=10))
if dist.get_rank() == 1:
    print("injected fault: rank 1 stops answering", flush=True)
    time.sleep(600)
dist.all_reduce(torch.ones(4))
print("all_reduce returned", flush=True)
'''


def test_the_collective_monitor_ends_a_rank_the_backend_leaves_waiting(host: Any, slowdown: float) -> None:
    host.run(f"cat > /tmp/monitor_probe.py <<'EOF'\n{MONITOR}\nEOF")
    run = timed(host, slowdown, "python", "-m", "torch.distributed.run", "--standalone", "--local-addr",
                "127.0.0.1", "--nproc-per-node", "2", "/tmp/monitor_probe.py")
    assert run["rc"] != 0, run["tail"]
    assert "all_reduce returned" not in run["tail"], run["tail"]
    assert "[collectives] rank 0: collective all_reduce #" in run["tail"], run["tail"]
    assert "did not complete within the 3 s timeout" in run["tail"], run["tail"]
    assert run["after_fault_s"] is not None, f"rank 1 never stopped answering:\n{run['tail']}"
    limit = 3 + SLACK_S * slowdown
    assert run["after_fault_s"] < limit, (
        f"{run['after_fault_s']:.0f} s after rank 1 stopped answering (limit {limit:g} s): the monitor did not end "
        f"the waiting rank\n{run['tail']}")


def test_the_watchdog_ends_a_single_stuck_rank(host: Any, slowdown: float) -> None:
    out = "/tmp/fail-fast-watchdog"
    watchdog = 30 * slowdown
    run = timed(host, slowdown, "python", "-m", "mcore_images.smoke", "--cpu", "--nproc", "1", "--layouts", "dp1",
                "--models", "dense", "--spec", "local", "--steps", "3", "--no-attention",
                "--inject-fault", "hang", "--fault-rank", "0",
                "--watchdog", seconds(watchdog), "--out", out)
    cert = certificate(host, out)
    assert run["rc"] == 1 and "watchdog" in cert["error"], run["tail"]
    assert run["wall_s"] < watchdog + 60 * slowdown, run
