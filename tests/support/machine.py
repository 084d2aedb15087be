"""A machine of the test's own for the job planner: the folder ``$MCORE_IMAGES_PROBE_ROOT`` names holds the
proc/meminfo and cgroup files it reads, so a test sees the memory and CPUs it set, never those of the host at that
moment (a busy CI machine once had 1.1 GiB available and a dry run refused MAX_JOBS=3)."""

from __future__ import annotations

from pathlib import Path

GIB = 1024**3


def fake_machine(root: Path, available_gib: float, cpus: int, total_gib: float = 64.0) -> Path:
    """Write a machine with ``available_gib`` of MemAvailable and a cgroup v2 CPU quota of ``cpus`` under ``root``
    (the quota caps the host's affinity mask, so any host with at least that many CPUs plans alike)."""
    proc = root / "proc"
    cgroup = root / "sys" / "fs" / "cgroup"
    proc.mkdir(parents=True, exist_ok=True)
    cgroup.mkdir(parents=True, exist_ok=True)
    (proc / "meminfo").write_text(f"MemTotal: {int(total_gib * GIB / 1024)} kB\n"
                                  f"MemAvailable: {int(available_gib * GIB / 1024)} kB\n")
    (cgroup / "cpu.max").write_text(f"{cpus * 100000} 100000\n")
    (cgroup / "memory.max").write_text("max\n")
    (cgroup / "memory.current").write_text("0\n")
    return root
