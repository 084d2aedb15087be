"""A crashed or hung rank ends the smoke in time, and the certificate names the rank and the collective.

These run the image's own smoke on CPU (gloo, two ranks). A timed run goes through ``timed.py`` (below), which
notes when the planted fault fires and when the launcher exits, so the bound is on the hang itself, not on
how long two ranks took to import torch and megatron-core on a small CI machine.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

TIMEOUT_S = 10
"""The collective timeout the hang tests give: small, so a slow path shows."""
SLACK_S = 15
"""A hung collective must end the run within the timeout plus this (issue: `--timeout` + 15 s)."""

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


def timed(host: Any, *argv: str) -> dict[str, Any]:
    """Run ``argv`` in the container through TIMED; its timings, exit code and last lines of output."""
    cmd = " ".join(shlex.quote(a) for a in argv)
    result = host.run(f"cd /tmp && timeout 600 python -c {shlex.quote(TIMED)} {cmd}")
    assert result.rc == 0, f"the timing driver failed (exit {result.rc}): {result.stderr[-2000:]}"
    return json.loads(result.stdout.strip().splitlines()[-1])


def certificate(host: Any, out: str) -> dict[str, Any]:
    return json.loads(host.file(f"{out}/certificate.json").content_string)


SMOKE_FAULT = ("python", "-m", "smoke", "--cpu", "--nproc", "2", "--layouts", "tp2", "--models", "dense",
               "--spec", "local", "--steps", "3")


def test_a_hung_rank_ends_the_run_within_the_timeout_and_is_named(host: Any) -> None:
    out = "/tmp/fail-fast-hang"
    run = timed(host, *SMOKE_FAULT, "--inject-fault", "hang", "--fault-rank", "1", "--timeout", str(TIMEOUT_S),
                "--watchdog", "600", "--out", out)
    cert = certificate(host, out)
    assert run["rc"] == 1 and cert["status"] == "failed", run["tail"]
    assert run["after_fault_s"] is not None, f"the planted fault never fired:\n{run['tail']}"
    assert run["after_fault_s"] < TIMEOUT_S + SLACK_S, (
        f"the run ended {run['after_fault_s']:.1f} s after rank 1 stopped answering "
        f"(limit {TIMEOUT_S} s timeout + {SLACK_S} s): {cert['error']}")
    error = cert["error"]
    assert "rank 0" in error and "collective" in error and "on ranks [0, 1]" in error, error
    assert "rank 1 was in no collective" in error, error


def test_a_rank_that_raises_ends_the_run(host: Any) -> None:
    out = "/tmp/fail-fast-raise"
    run = timed(host, *SMOKE_FAULT, "--inject-fault", "raise", "--fault-rank", "1", "--timeout", "60",
                "--out", out)
    cert = certificate(host, out)
    assert run["rc"] == 1 and "injected fault: rank 1 raised" in cert["error"], run["tail"]
    assert run["after_fault_s"] is None or run["after_fault_s"] < SLACK_S, run


# The path NCCL needs: the backend itself never gives up (gloo's own timeout here is 10 minutes), so only the
# collective monitor can end the rank that waits.
MONITOR = r'''
import datetime, os, sys, time
import torch, torch.distributed as dist
from smoke.kit import collectives
collectives.install(3.0)
dist.init_process_group("gloo", timeout=datetime.timedelta(minutes=10))
if dist.get_rank() == 1:
    time.sleep(600)
dist.all_reduce(torch.ones(4))
print("all_reduce returned", flush=True)
'''


def test_the_collective_monitor_ends_a_rank_the_backend_leaves_waiting(host: Any) -> None:
    host.run(f"cat > /tmp/monitor_probe.py <<'EOF'\n{MONITOR}\nEOF")
    run = timed(host, "python", "-m", "torch.distributed.run", "--standalone", "--local-addr", "127.0.0.1",
                "--nproc-per-node", "2", "/tmp/monitor_probe.py")
    assert run["rc"] != 0, run["tail"]
    assert "all_reduce returned" not in run["tail"], run["tail"]
    assert "[collectives] rank 0: collective all_reduce #" in run["tail"], run["tail"]
    assert "did not complete within the 3 s timeout" in run["tail"], run["tail"]
    assert run["wall_s"] < 120, f"{run['wall_s']:.0f} s: the monitor did not end the waiting rank\n{run['tail']}"


def test_the_watchdog_ends_a_single_stuck_rank(host: Any) -> None:
    out = "/tmp/fail-fast-watchdog"
    run = timed(host, "python", "-m", "smoke", "--cpu", "--nproc", "1", "--layouts", "dp1", "--models", "dense",
                "--spec", "local", "--steps", "3", "--inject-fault", "hang", "--fault-rank", "0", "--watchdog", "30",
                "--out", out)
    cert = certificate(host, out)
    assert run["rc"] == 1 and "watchdog" in cert["error"], run["tail"]
    assert run["wall_s"] < 30 + 60, run
