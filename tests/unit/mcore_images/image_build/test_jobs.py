"""MAX_JOBS planner against fake cgroup v1/v2 trees and meminfo files."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcore_images.errors import InputError
from mcore_images.image_build import jobs

GIB = 1024**3


def meminfo(tmp: Path, available_gib: float) -> Path:
    path = tmp / "meminfo"
    path.write_text(f"MemTotal: {int(64 * GIB / 1024)} kB\nMemAvailable: {int(available_gib * GIB / 1024)} kB\n")
    return path


def cgroup_v2(tmp: Path, cpu_max: str = "max 100000", mem_max: str = "max", current: int = 0) -> Path:
    root = tmp / "v2"
    root.mkdir()
    (root / "cpu.max").write_text(cpu_max + "\n")
    (root / "memory.max").write_text(mem_max + "\n")
    (root / "memory.current").write_text(f"{current}\n")
    return root


def cgroup_v1(tmp: Path, quota: int, period: int, limit: int, usage: int) -> Path:
    root = tmp / "v1"
    (root / "cpu").mkdir(parents=True)
    (root / "memory").mkdir()
    (root / "cpu" / "cpu.cfs_quota_us").write_text(f"{quota}\n")
    (root / "cpu" / "cpu.cfs_period_us").write_text(f"{period}\n")
    (root / "memory" / "memory.limit_in_bytes").write_text(f"{limit}\n")
    (root / "memory" / "memory.usage_in_bytes").write_text(f"{usage}\n")
    return root


def test_v2_cpu_quota_caps_affinity(tmp_path: Path) -> None:
    res = jobs.detect(cgroup_v2(tmp_path, "400000 100000"), meminfo(tmp_path, 100), affinity=64)
    assert res.cpus == 4
    assert jobs.plan(res).max_jobs == 4


def test_v2_memory_limit_bounds_jobs(tmp_path: Path) -> None:
    root = cgroup_v2(tmp_path, "max 100000", str(10 * GIB), current=2 * GIB)
    res = jobs.detect(root, meminfo(tmp_path, 100), affinity=32)
    assert res.available_gib == pytest.approx(8.0)
    plan = jobs.plan(res)
    # 8 GiB - 2 GiB headroom = 6 GiB usable; 2.7 GiB per TE job -> 2 jobs
    assert plan.max_jobs == 2
    assert "memory-bound" in plan.reason


def test_v1_quota_and_limit(tmp_path: Path) -> None:
    root = cgroup_v1(tmp_path, 250000, 100000, 40 * GIB, 4 * GIB)
    res = jobs.detect(root, meminfo(tmp_path, 100), affinity=16)
    assert res.cpus == 2
    assert res.available_gib == pytest.approx(36.0)


def test_v1_unlimited_uses_meminfo(tmp_path: Path) -> None:
    root = cgroup_v1(tmp_path, -1, 100000, 1 << 62, 0)
    res = jobs.detect(root, meminfo(tmp_path, 12), affinity=8)
    assert res.cpus == 8 and res.available_gib == pytest.approx(12.0)


def test_flash_attn_profile_is_memory_hungry(tmp_path: Path) -> None:
    res = jobs.Resources(cpus=64, available_gib=64, cpu_source="", memory_source="")
    fa = jobs.plan(res, component="flash-attn", archs=2)
    te = jobs.plan(res, component="te", archs=2)
    assert fa.max_jobs < te.max_jobs
    assert fa.nvcc_threads == 2 and fa.max_jobs * fa.nvcc_threads <= 64


def test_threads_never_divide_explicit_jobs() -> None:
    """vLLM's trap: MAX_JOBS=4 with NVCC_THREADS=4 must stay 4 jobs, not become 1."""
    res = jobs.Resources(cpus=16, available_gib=100, cpu_source="", memory_source="")
    plan = jobs.plan(res, archs=4, max_jobs="4", nvcc_threads="4")
    assert plan.max_jobs == 4 and plan.nvcc_threads == 4
    assert plan.env()["MAX_JOBS"] == "4" and plan.env()["NVTE_BUILD_THREADS_PER_JOB"] == "4"


def test_nvcc_threads_bounded_by_archs() -> None:
    res = jobs.Resources(cpus=16, available_gib=100, cpu_source="", memory_source="")
    assert jobs.plan(res, component="apex", archs=1).nvcc_threads == 1
    assert jobs.plan(res, component="apex", archs=3).nvcc_threads == 3


def test_te_extension_jobs_ignore_the_architectures() -> None:
    """TE's PyTorch extension is host C++ only: declaring Blackwell beside Hopper must not turn the 2-core
    builder's two compile jobs into one job with two idle nvcc threads (before: 1 job × 2 threads)."""
    res = jobs.Resources(cpus=2, available_gib=22, cpu_source="", memory_source="")
    one, two = jobs.plan(res, component="te", archs=1), jobs.plan(res, component="te", archs=2)
    assert (two.max_jobs, two.nvcc_threads, two.per_job_gib) == (one.max_jobs, one.nvcc_threads, one.per_job_gib)
    assert (two.max_jobs, two.nvcc_threads) == (2, 1)


def test_tiny_machine_still_gets_one_job() -> None:
    res = jobs.Resources(cpus=1, available_gib=1.0, cpu_source="", memory_source="")
    assert jobs.plan(res).max_jobs == 1


def test_explicit_jobs_over_memory_are_refused_with_the_planners_numbers() -> None:
    """Before: `jobs --max-jobs 100000` printed "may need 270000 GiB of 17.2 GiB usable" and exited 0."""
    res = jobs.Resources(cpus=64, available_gib=10, cpu_source="", memory_source="")
    with pytest.raises(InputError) as err:
        jobs.plan(res, max_jobs="32")
    message = str(err.value)
    assert "86.4 GiB" in message and "8.0 GiB is usable" in message and "MAX_JOBS=2 or less" in message
    assert "--force" in message and "\n" not in message


def test_forced_jobs_over_memory_run_and_say_so() -> None:
    res = jobs.Resources(cpus=64, available_gib=10, cpu_source="", memory_source="")
    plan = jobs.plan(res, max_jobs="32", force=True)
    assert plan.max_jobs == 32 and "planner would pick" in plan.reason


def test_more_nvcc_threads_than_cpus_are_refused() -> None:
    res = jobs.Resources(cpus=2, available_gib=20, cpu_source="", memory_source="")
    with pytest.raises(InputError, match="NVCC_THREADS=99999 exceeds the 2 CPUs"):
        jobs.plan(res, nvcc_threads="99999")
    assert jobs.plan(res, nvcc_threads="99999", force=True).nvcc_threads == 99999


@pytest.mark.parametrize("value", [" 4", "+4", "4_0", "٤", "4 "])
def test_only_plain_digits_are_a_job_count(value: str) -> None:
    with pytest.raises(InputError, match="is not a number"):
        jobs.parse_positive("MAX_JOBS", value)


def test_build_refuses_oversized_jobs_before_docker(capsys: pytest.CaptureFixture) -> None:
    from mcore_images import cli

    assert cli.main(["build", "--stack", "debian", "--max-jobs", "100000", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "stack debian: MAX_JOBS=100000" in err[0] and "GiB is usable here" in err[0]
    assert cli.main(["build", "--stack", "debian", "--max-jobs", "100000", "--force", "--dry-run"]) == 0


@pytest.mark.parametrize("value", ["0", "-2", "four", "1.5"])
def test_bad_max_jobs_is_one_line_error(value: str) -> None:
    res = jobs.Resources(cpus=4, available_gib=16, cpu_source="", memory_source="")
    with pytest.raises(InputError) as err:
        jobs.plan(res, max_jobs=value)
    assert "MAX_JOBS" in str(err.value) and "\n" not in str(err.value)


def test_bad_nvcc_threads_and_component() -> None:
    res = jobs.Resources(cpus=4, available_gib=16, cpu_source="", memory_source="")
    with pytest.raises(InputError):
        jobs.plan(res, nvcc_threads="0")
    with pytest.raises(InputError):
        jobs.plan(res, component="xformers")


def test_meminfo_without_available_is_an_error(tmp_path: Path) -> None:
    bad = tmp_path / "meminfo"
    bad.write_text("MemTotal: 1000 kB\n")
    with pytest.raises(InputError):
        jobs.detect(cgroup_v2(tmp_path), bad, affinity=2)
