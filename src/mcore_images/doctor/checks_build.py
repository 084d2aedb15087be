"""Build side: the MAX_JOBS the planner picks here, and whether a compile already running may OOM."""

from __future__ import annotations

import math
import re

from mcore_images.doctor.model import Context, Outcome, Status, check, ok, trip, warn
from mcore_images.errors import InputError
from mcore_images.image_build import jobs

GIB = 1024**3


def arch_count(ctx: Context) -> int:
    """Number of CUDA architectures a TE build here would compile (NVTE_CUDA_ARCHS, default one)."""
    archs = [a for a in re.split(r"[;,\s]+", ctx.environ.get("NVTE_CUDA_ARCHS", "")) if a]
    return max(1, len(archs))


def resources(ctx: Context) -> jobs.Resources:
    return jobs.detect(cgroup_root=ctx.cgroup, meminfo=ctx.proc / "meminfo")


@check(
    "build.max-jobs",
    Status.WARN,
    "leave MAX_JOBS unset so the planner picks, or lower it to the planner's number",
)
def max_jobs(ctx: Context) -> Outcome:
    """The MAX_JOBS the planner (mcore_images.image_build.jobs) picks here; an explicit MAX_JOBS that would not fit."""
    archs = arch_count(ctx)
    found = resources(ctx)
    plans = {c: jobs.plan(found, c, archs) for c in jobs.PROFILES}
    te = plans["te"]
    picks = ", ".join(f"{c} MAX_JOBS={p.max_jobs} NVCC_THREADS={p.nvcc_threads}" for c, p in plans.items())
    details = {
        "plans": {c: p.env() for c, p in plans.items()},
        "reason": te.reason,
        "cpus": found.cpus,
        "available_gib": found.available_gib,
    }
    explicit = ctx.environ.get("MAX_JOBS")
    if explicit is not None:
        try:
            chosen = jobs.plan(found, "te", archs, max_jobs=explicit)
        except InputError as error:
            return trip(str(error), **details)
        usable = found.available_gib - te.headroom_gib
        if chosen.max_jobs * te.per_job_gib > usable:
            return trip(
                f"MAX_JOBS={explicit} may need {chosen.max_jobs * te.per_job_gib:.1f} GiB for a TE build, "
                f"{usable:.1f} GiB usable here; the planner picks {te.max_jobs}",
                **details,
            )
    return ok(f"{picks} ({archs} arch(s); {te.reason})", **details)


HEAVY = ("cc1plus", "cicc", "ptxas", "cudafe++", "nvcc", "nvlink", "fatbinary")


def compile_processes(ctx: Context) -> list[tuple[int, str, float]]:
    """(pid, name, RSS GiB) of running compiler processes, from /proc/<pid>/status."""
    found = []
    for entry in ctx.proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:  # the process ended while we looked
            continue
        name = re.search(r"^Name:\s*(\S+)", status, re.MULTILINE)
        rss = re.search(r"^VmRSS:\s*(\d+)\s*kB", status, re.MULTILINE)
        if name and name.group(1) in HEAVY:
            found.append((int(entry.name), name.group(1), int(rss.group(1)) * 1024 / GIB if rss else 0.0))
    return found


@check("build.oom-risk", Status.FAIL, "stop the build and restart it with fewer jobs (MAX_JOBS)")
def oom_risk(ctx: Context) -> Outcome:
    """A compile running now (cc1plus/cicc/ptxas/nvcc) still has memory to grow into."""
    procs = compile_processes(ctx)
    if not procs:
        return ok("no compiler processes running")
    found = resources(ctx)
    available = found.available_gib
    total = sum(rss for *_, rss in procs)
    largest = max(rss for *_, rss in procs)
    jobs_now = sum(1 for _, name, _ in procs if name in ("cc1plus", "cicc", "ptxas"))
    per_job = max(largest, jobs.PROFILES["te"].host_gib)
    safe = max(1, math.floor((available + total - 2.0) / per_job))
    details = {
        "processes": [f"{pid} {name} {rss:.2f} GiB" for pid, name, rss in procs],
        "available_gib": available,
        "compiler_rss_gib": round(total, 2),
        "safe_jobs": safe,
    }
    summary = (
        f"{len(procs)} compiler processes ({jobs_now} compile jobs) use {total:.1f} GiB, largest "
        f"{largest:.1f} GiB; {available:.1f} GiB left"
    )
    if available < max(1.0, largest):
        return trip(
            f"{summary}: one more job at the current peak would not fit",
            f"stop the build and restart it with MAX_JOBS={safe}",
            **details,
        )
    if available < jobs_now * largest * 0.5:
        return warn(
            f"{summary}: thin if every job grows to the current peak (safe: MAX_JOBS={safe})",
            f"lower MAX_JOBS to {safe} next time",
            **details,
        )
    return ok(f"{summary}: room to grow", **details)
