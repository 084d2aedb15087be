"""The build checks (src/mcore_images/doctor/checks_build.py) made to fail and made to pass in the fake world of
world.py: the build side: the job planner's MAX_JOBS and the compile's memory."""

from __future__ import annotations

from mcore_images.doctor.model import Status
from tests.unit.mcore_images.doctor.world import GIB_KB, World, status


def test_max_jobs(world: World) -> None:
    found = world.run("build.max-jobs")
    assert found.status == Status.OK and "MAX_JOBS=" in found.finding
    world.meminfo(total_gib=16, available_gib=8)
    world.environ["MAX_JOBS"] = "64"
    found = world.run("build.max-jobs")
    assert found.status == Status.WARN and "the planner picks" in found.finding
    world.environ["MAX_JOBS"] = "lots"
    assert "not a number" in world.run("build.max-jobs").finding


def compiler(world: World, pid: int, name: str, rss_gib: float) -> None:
    (world.proc / str(pid)).mkdir()
    (world.proc / str(pid) / "status").write_text(f"Name:\t{name}\nVmRSS:\t{int(rss_gib * GIB_KB)} kB\n")


def test_oom_risk(world: World) -> None:
    found = world.run("build.oom-risk")
    assert found.status == Status.OK and "no compiler" in found.finding
    for pid in range(100, 104):
        compiler(world, pid, "cc1plus", 2.5)
    world.meminfo(total_gib=16, available_gib=1.5)
    found = world.run("build.oom-risk")
    assert found.status == Status.FAIL and "MAX_JOBS=" in found.fix
    world.meminfo(total_gib=32, available_gib=4)
    assert status(world, "build.oom-risk") == Status.WARN
    world.meminfo(total_gib=64, available_gib=40)
    assert status(world, "build.oom-risk") == Status.OK
