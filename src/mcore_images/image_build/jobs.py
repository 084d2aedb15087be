"""MAX_JOBS planner: how many parallel compile jobs a CUDA extension build can afford here.

Reads the CPU quota and memory limit from the cgroup (v2 or v1) and MemAvailable from
/proc/meminfo, models the peak memory of one compile job per component, keeps headroom, and
says why it chose what it chose. Build systems treat the numbers differently, so the plan spells
them out: MAX_JOBS is the number of compile processes; NVCC_THREADS (= TE's
NVTE_BUILD_THREADS_PER_JOB) is nvcc's --threads inside each process, which only parallelises
across CUDA architectures. MAX_JOBS × NVCC_THREADS never exceeds the CPUs, and MAX_JOBS is never
divided by NVCC_THREADS afterwards (the trap where MAX_JOBS=4, NVCC_THREADS=4 becomes -j1).

Where the machine is read: ``/proc/meminfo`` and ``/sys/fs/cgroup`` under the folder that
``$MCORE_IMAGES_PROBE_ROOT`` names (default ``/``). Pointing it at a copy of a build box's files plans for
that box; the unit tests point it at a machine of their own, so no test depends on the free memory of the
moment.
"""

from __future__ import annotations

import argparse
import math
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from mcore_images.command import Command, print_json, standalone
from mcore_images.errors import InputError

GIB = 1024**3


@dataclass(frozen=True)
class CompileProfile:
    """Peak resident memory of one compile job: host part + device part per (arch × nvcc thread)."""

    host_gib: float
    per_arch_thread_gib: float
    source: str
    device_code: bool = True
    """Whether the build compiles CUDA device code; without it nvcc never runs, so the number of GPU
    architectures adds neither nvcc threads nor memory."""

    def job_gib(self, archs: int, nvcc_threads: int) -> float:
        # nvcc --threads compiles up to `threads` architectures at once, each with its own cicc/ptxas.
        return self.host_gib + self.per_arch_thread_gib * min(archs, nvcc_threads) + (
            self.per_arch_thread_gib * 0.25 * max(0, archs - nvcc_threads)
        )


PROFILES: dict[str, CompileProfile] = {
    # Measured: TE 2.20 PyTorch extension, one arch (sm_90): largest compiler process 2.35 GiB
    # (16-core H200 box) and 2.7 GB (2-core machine). It is C++ against torch headers only: TE 2.x's
    # build_tools/pytorch.py builds a CppExtension of .cpp sources (its fatbin-less .so is checked by the image
    # tests), so the stack's architectures change nothing here.
    "te": CompileProfile(2.3, 0.4, "TE torch extension (host C++ only), measured 2.35-2.7 GiB per job",
                         device_code=False),
    # apex's CUDA extensions (multi-tensor apply, fused layer norm): template-heavy .cu files.
    "apex": CompileProfile(1.5, 1.5, "apex CUDA extensions, estimated from coreweave's cpus/8 rule"),
    # flash-attn: about 5 GB per nvcc thread (its setup.py and issue #2493).
    "flash-attn": CompileProfile(1.0, 5.0, "flash-attn, ~5 GB per nvcc thread (flash-attn #2493)"),
}


@dataclass(frozen=True)
class Resources:
    cpus: int
    available_gib: float
    cpu_source: str
    memory_source: str


@dataclass(frozen=True)
class JobPlan:
    max_jobs: int
    nvcc_threads: int
    nvte_build_threads_per_job: int
    per_job_gib: float
    headroom_gib: float
    resources: Resources
    component: str
    reason: str

    def env(self) -> dict[str, str]:
        return {
            "MAX_JOBS": str(self.max_jobs),
            "NVCC_THREADS": str(self.nvcc_threads),
            "NVTE_BUILD_THREADS_PER_JOB": str(self.nvte_build_threads_per_job),
        }

    def to_dict(self) -> dict:
        return asdict(self)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def cgroup_cpus(root: Path) -> tuple[float | None, str]:
    """CPU quota in CPUs from cgroup v2 cpu.max or v1 cfs quota/period; None when unlimited."""
    v2 = _read(root / "cpu.max")
    if v2 is not None:
        quota, _, period = v2.partition(" ")
        if quota != "max" and period:
            return int(quota) / int(period), f"cgroup v2 cpu.max={v2}"
        return None, "cgroup v2 cpu.max=max"
    quota = _read(root / "cpu" / "cpu.cfs_quota_us") or _read(root / "cpu.cfs_quota_us")
    period = _read(root / "cpu" / "cpu.cfs_period_us") or _read(root / "cpu.cfs_period_us")
    if quota and period and int(quota) > 0:
        return int(quota) / int(period), f"cgroup v1 cfs_quota_us={quota} period={period}"
    return None, "no cgroup CPU quota"


def cgroup_memory(root: Path) -> tuple[float | None, str]:
    """Bytes still allowed by the cgroup (limit - usage); None when unlimited."""
    limit = _read(root / "memory.max")
    usage = _read(root / "memory.current")
    label = "cgroup v2 memory.max"
    if limit is None:
        limit = _read(root / "memory" / "memory.limit_in_bytes") or _read(root / "memory.limit_in_bytes")
        usage = _read(root / "memory" / "memory.usage_in_bytes") or _read(root / "memory.usage_in_bytes")
        label = "cgroup v1 memory.limit_in_bytes"
    if limit is None or limit == "max" or int(limit) >= 1 << 60:
        return None, "no cgroup memory limit"
    free = int(limit) - int(usage or 0)
    return float(max(free, 0)), f"{label}={int(limit) / GIB:.1f} GiB, in use {int(usage or 0) / GIB:.1f} GiB"


def mem_available(meminfo: Path) -> float:
    text = _read(meminfo) or ""
    for line in text.splitlines():
        if line.startswith("MemAvailable:"):
            return float(line.split()[1]) * 1024
    raise InputError(f"{meminfo} has no MemAvailable line; set MAX_JOBS explicitly (e.g. MAX_JOBS=2)")


PROBE_ROOT = "MCORE_IMAGES_PROBE_ROOT"
"""The variable naming the folder under which the planner reads proc/meminfo and sys/fs/cgroup (default /)."""


def probe_root() -> Path:
    """The folder the machine's memory and CPU limits are read under: ``$MCORE_IMAGES_PROBE_ROOT``, else /."""
    return Path(os.environ.get(PROBE_ROOT) or "/")


def detect(cgroup_root: Path | None = None, meminfo: Path | None = None,
           affinity: int | None = None) -> Resources:
    """Effective CPUs and memory for a build started from here (paths default to those under probe_root())."""
    root = probe_root()
    cgroup_root = cgroup_root if cgroup_root is not None else root / "sys" / "fs" / "cgroup"
    meminfo = meminfo if meminfo is not None else root / "proc" / "meminfo"
    cpus = affinity if affinity is not None else len(os.sched_getaffinity(0))
    quota, cpu_src = cgroup_cpus(cgroup_root)
    cpu_source = f"{cpus} CPUs in affinity mask; {cpu_src}"
    if quota is not None:
        cpus = max(1, min(cpus, math.floor(quota)))
    avail = mem_available(meminfo)
    mem_src = f"MemAvailable {avail / GIB:.1f} GiB"
    limit, limit_src = cgroup_memory(cgroup_root)
    if limit is not None and limit < avail:
        avail = limit
    return Resources(cpus=cpus, available_gib=round(avail / GIB, 2), cpu_source=cpu_source,
                     memory_source=f"{mem_src}; {limit_src}")


def parse_positive(name: str, value: str | None) -> int | None:
    """Validate an explicit job count: unset -> None, else a positive integer or a one-line error."""
    if value is None or value == "":
        return None
    # Digits only: int() would also take " 4", "+4", "4_0" and "٤".
    if not re.fullmatch(r"-?[0-9]+", value):
        raise InputError(f"{name}={value!r} is not a number; use a positive integer such as {name}=4, "
                         "or leave it unset for the planner")
    number = int(value)
    if number < 1:
        raise InputError(f"{name}={number} is invalid; use a positive integer such as {name}=4, "
                         "or leave it unset for the planner")
    return number


def plan(resources: Resources, component: str = "te", archs: int = 1,
         max_jobs: str | None = None, nvcc_threads: str | None = None, force: bool = False) -> JobPlan:
    """Choose MAX_JOBS / NVCC_THREADS for one component build; explicit values win but are validated: a job
    count whose modelled memory exceeds what is usable here, or more nvcc threads than CPUs, is refused
    (with the planner's numbers) unless ``force``, since an OOM-killed compile can take the machine down."""
    if component not in PROFILES:
        raise InputError(f"unknown compile component '{component}'; choose one of {', '.join(PROFILES)}")
    if archs < 1:
        raise InputError("at least one CUDA architecture is needed; set NVTE_CUDA_ARCHS, e.g. '90'")
    profile = PROFILES[component]
    if not profile.device_code:
        archs = 1
    explicit_jobs = parse_positive("MAX_JOBS", max_jobs)
    explicit_threads = parse_positive("NVCC_THREADS", nvcc_threads)
    headroom = max(2.0, 0.2 * resources.available_gib)
    usable = max(0.0, resources.available_gib - headroom)
    # nvcc --threads only helps with several architectures; never more threads than archs.
    threads = explicit_threads or max(1, min(archs, resources.cpus))
    per_job = profile.job_gib(archs, threads)
    by_memory = max(1, math.floor(usable / per_job))
    by_cpu = max(1, resources.cpus // threads)
    chosen = explicit_jobs or min(by_memory, by_cpu)
    if not force:
        refuse_oversized(resources, component, explicit_jobs, explicit_threads, by_memory, by_cpu, per_job, usable)
    if explicit_jobs:
        reason = f"MAX_JOBS={explicit_jobs} given explicitly"
        if explicit_jobs > by_memory:
            reason += f" (planner would pick {min(by_memory, by_cpu)}: {explicit_jobs} jobs may need " \
                      f"{explicit_jobs * per_job:.1f} GiB of {usable:.1f} GiB usable)"
    else:
        bound = "memory" if by_memory < by_cpu else "CPUs"
        reason = (f"{bound}-bound: {resources.cpus} CPUs / {threads} nvcc thread(s) = {by_cpu} jobs; "
                  f"{usable:.1f} GiB usable ({resources.available_gib:.1f} available - {headroom:.1f} "
                  f"headroom) / {per_job:.2f} GiB per {component} job = {by_memory} jobs")
    return JobPlan(max_jobs=chosen, nvcc_threads=threads, nvte_build_threads_per_job=threads,
                   per_job_gib=round(per_job, 2), headroom_gib=round(headroom, 2), resources=resources,
                   component=component, reason=reason)


def refuse_oversized(resources: Resources, component: str, jobs: int | None, threads: int | None, by_memory: int,
                     by_cpu: int, per_job: float, usable: float) -> None:
    """One line naming the planner's numbers when explicit values cannot fit this machine."""
    planned = min(by_memory, by_cpu)
    if jobs and jobs > by_memory:
        raise InputError(f"MAX_JOBS={jobs} {component} compile jobs may need {jobs * per_job:.1f} GiB, and "
                         f"{usable:.1f} GiB is usable here ({resources.available_gib:.1f} GiB available, "
                         f"{per_job:.2f} GiB per job): use MAX_JOBS={by_memory} or less (the planner picks {planned}; "
                         "leave it unset for that), or FORCE=1 / --force to run it anyway")
    if threads and threads > resources.cpus:
        raise InputError(f"NVCC_THREADS={threads} exceeds the {resources.cpus} CPUs here: use NVCC_THREADS="
                         f"{resources.cpus} or less (or leave it unset), or FORCE=1 / --force to run it anyway")


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--component", default="te", choices=sorted(PROFILES), help="what is compiled (its memory model)")
    p.add_argument("--archs", type=int, default=1, help="number of CUDA architectures compiled")
    p.add_argument("--max-jobs", default=None, help="explicit MAX_JOBS (wins over the plan; validated)")
    p.add_argument("--nvcc-threads", default=None, help="explicit NVCC_THREADS (wins over the plan; validated)")
    p.add_argument("--force", action="store_true",
                   help="accept a MAX_JOBS / NVCC_THREADS that the planner's memory model says cannot fit")
    p.add_argument("--env", action="store_true",
                   help="print KEY=VALUE lines and the reason as a # comment (for a shell's eval)")


def _run(args: argparse.Namespace) -> int:
    result = plan(detect(), component=args.component, archs=args.archs, max_jobs=args.max_jobs,
                  nvcc_threads=args.nvcc_threads, force=args.force)
    if args.json:
        print_json(result.to_dict())
    elif args.env:
        print("\n".join(f"{k}={v}" for k, v in result.env().items()))
        print(f"# {result.component} jobs: {result.reason}; {result.resources.cpu_source}; "
              f"{result.resources.memory_source}")
    else:
        print(" ".join(f"{k}={v}" for k, v in result.env().items()))
        print(f"reason: {result.reason}")
        print(f"resources: {result.resources.cpu_source}; {result.resources.memory_source}")
    return 0


COMMANDS = (Command("jobs", "Plan the jobs (MAX_JOBS, NVCC_THREADS) of a CUDA extension compile on this machine.",
                    _arguments, _run, prints_data=True),)



if __name__ == "__main__":  # a build step mounts only this planner: python -m mcore_images.image_build.jobs --env
    raise SystemExit(standalone(COMMANDS[0]))
