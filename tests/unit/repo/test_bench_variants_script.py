""".ci/gpu/bench-variants.sh does on the CPU everything that comes before its first command that needs a GPU: the
one device call it is written for must not fail on a bad flag, a missing file or a replica not installed. Run on this
machine with BENCH_VARIANTS_STOP_AT_GPU=1 (it names the first GPU command and stops), in a temporary root of
sentinel files standing for the replica."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.unit.conftest import ROOT

SCRIPT = ROOT / ".ci" / "gpu" / "bench-variants.sh"
GROUPS = ("graphs", "8b", "moe", "fused", "unfused")


def replica(tmp_path: Path) -> dict[str, str]:
    """A replica as `image-env-replica.sh install` leaves it, and the carried folder: empty sentinels."""
    (tmp_path / "replica" / "site" / "megatron").mkdir(parents=True)
    (tmp_path / "replica" / "bin").mkdir()
    python = tmp_path / "replica" / "bin" / "python"
    python.write_text("#!/bin/sh\nexit 99\n")
    python.chmod(0o755)
    (tmp_path / "carried").mkdir()
    for name in ("image-env.json", "constraints.txt", "path-tools.txt"):
        (tmp_path / "carried" / name).write_text("[]\n" if name.endswith(".json") else "")
    return {"REPLICA": str(tmp_path / "replica"), "OUT": str(tmp_path / "out"), "BENCH_VARIANTS_STOP_AT_GPU": "1"}


def run(script: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    keep = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MCORE_IMAGES_STACK", "NVTE_FLASH_ATTN",
                                                             "NVTE_FUSED_ATTN", "NVTE_UNFUSED_ATTN")}
    return subprocess.run(["bash", str(script), *args], capture_output=True, text=True, env={**keep, **env},
                          timeout=120)


def test_measure_checks_every_group_on_the_cpu_then_stops_at_the_first_gpu_command(tmp_path: Path) -> None:
    out = run(SCRIPT, "measure", str(tmp_path / "carried"), env=replica(tmp_path))
    assert out.returncode == 0, out.stderr
    for group in GROUPS:
        assert f"[bench-variants] {group}: python -m mcore_images.smoke.bench --configs" in out.stdout
    assert "dense-8b: N=3.708 B active" in out.stdout  # each group's --dry-run ran
    first = out.stdout.strip().splitlines()[-1]
    assert first.startswith("[bench-variants] first command that needs a GPU: timeout --kill-after=10 140 bash ")
    assert first.endswith(f"--cuda-graphs local,te --out {tmp_path}/out/graphs --write-baselines "
                          f"{tmp_path}/out/bench-baselines.json")
    stored = (ROOT / "env" / "bench-baselines.json").read_text()
    assert (tmp_path / "out" / "bench-baselines.json").read_text() == stored  # this call's rows go into a copy


def test_a_bad_flag_in_a_group_stops_the_call_before_the_gpu(tmp_path: Path) -> None:
    """The negative of the test above: the script with one group's flag broken fails in its CPU part."""
    tree = tmp_path / "tree"
    (tree / ".ci" / "gpu").mkdir(parents=True)
    for part in ("src", "env"):
        (tree / part).symlink_to(ROOT / part)
    shutil.copy(ROOT / ".ci" / "image-env-replica.sh", tree / ".ci")
    broken = tree / ".ci" / "gpu" / "bench-variants.sh"
    broken.write_text(SCRIPT.read_text().replace("--dispatcher alltoall --cuda-graphs te", "--cuda-graphs te"))
    out = run(broken, "measure", str(tmp_path / "carried"), env=replica(tmp_path))
    assert out.returncode == 2
    assert "needs the alltoall MoE dispatcher" in out.stderr
    assert "[bench-variants] error: group moe: the bench refuses its flags (above)" in out.stderr
    assert "first command that needs a GPU" not in out.stdout


@pytest.mark.parametrize(("breaks", "message"), [
    (lambda t: (t / "carried" / "constraints.txt").unlink(), "constraints.txt not found: carry it with this call"),
    (lambda t: shutil.rmtree(t / "replica" / "site"), "no replica installed under"),
])
def test_what_the_call_needs_is_checked_first(tmp_path: Path, breaks: Callable[[Path], object], message: str) -> None:
    env = replica(tmp_path)
    breaks(tmp_path)
    out = run(SCRIPT, "measure", str(tmp_path / "carried"), env=env)
    assert out.returncode == 2 and message in out.stderr
    assert "first command that needs a GPU" not in out.stdout
