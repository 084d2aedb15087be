"""Bad inputs end to end: one clear line, a non-zero exit, and no docker build started."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mcore_images.image_build import jobs
from tests.support.machine import fake_machine
from tests.unit.conftest import write_stacks


@pytest.fixture
def fake_docker(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """A `docker` on PATH that records every call, so tests can prove none happened."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "docker.log"
    docker = bin_dir / "docker"
    docker.write_text(f"#!/bin/sh\necho \"$@\" >> {log}\nexit 0\n")
    docker.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    env.pop("MAX_JOBS", None)
    return env, log


def make(root: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "-s", "-C", str(root), *args], capture_output=True, text=True, env=env,
                          check=False)


@pytest.mark.parametrize(("args", "needle"), [
    (["build", "STACK=nope"], "unknown stack 'nope'"),
    (["build", "MAX_JOBS=0"], "MAX_JOBS=0 is invalid"),
    (["build", "MAX_JOBS=lots"], "is not a number"),
    (["build", "NVCC_THREADS=-1"], "NVCC_THREADS=-1 is invalid"),
    (["build", "GROUP=weekly"], "unknown group 'weekly'"),
    (["build", "STACK=debian", "LAYER=app"], "has no layer 'app'"),
    (["build", "STACK=debian", "GROUP=ci"], "either STACK or GROUP"),
])
def test_bad_make_build_fails_before_docker(root: Path, fake_docker: tuple, args: list[str], needle: str) -> None:
    env, log = fake_docker
    result = make(root, env, *args)
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and needle in errors[0], result.stderr
    assert not log.exists(), "a docker command ran before the input was rejected"


def test_broken_rule_stops_build(root: Path, tmp_path: Path, fake_docker: tuple) -> None:
    env, log = fake_docker
    import json
    entries = json.loads((root / "env" / "stacks.json").read_text())["stacks"]
    bad = next(e for e in entries if e["name"] == "debian")
    bad = {**bad, "mcore": "0.19.2"}  # mbridge 0.15.1 cannot build models on it
    (tmp_path / "env").mkdir()
    write_stacks(tmp_path / "env" / "stacks.json", [bad])
    env = {**env, "MCORE_IMAGES_ROOT": str(tmp_path)}
    result = subprocess.run([sys.executable, "-m", "mcore_images", "build", "--stack", "debian"],
                            capture_output=True, text=True, env=env, check=False)
    assert result.returncode == 2
    assert "[mbridge-mcore]" in result.stderr and "fix:" in result.stderr
    assert not log.exists()


def test_dry_run_prints_bake_and_jobs(root: Path, fake_docker: tuple) -> None:
    env, log = fake_docker  # the planner reads the tests' machine: 24 GiB available, 2 CPUs (conftest)
    result = subprocess.run([sys.executable, "-m", "mcore_images", "build", "--stack", "debian", "--max-jobs", "3",
                             "--dry-run"], capture_output=True, text=True, env=env, check=False, cwd=root)
    assert result.returncode == 0, result.stderr
    assert "MAX_JOBS=3" in result.stdout and "runtime-debian" in result.stdout
    assert not log.exists()


def test_dry_run_refuses_jobs_the_memory_cannot_hold(root: Path, fake_docker: tuple, tmp_path: Path) -> None:
    """The same dry run on a machine with 1 GiB available: one line with the planner's numbers, nothing run."""
    env, log = fake_docker
    env = {**env, jobs.PROBE_ROOT: str(fake_machine(tmp_path / "small", available_gib=1, cpus=2))}
    result = subprocess.run([sys.executable, "-m", "mcore_images", "build", "--stack", "debian", "--max-jobs", "3",
                             "--dry-run"], capture_output=True, text=True, env=env, check=False, cwd=root)
    assert result.returncode == 2 and result.stdout == "", (result.stdout, result.stderr)
    assert result.stderr.count("\n") == 1 and "MAX_JOBS=3 te compile jobs may need" in result.stderr, result.stderr
    assert "1.0 GiB available" in result.stderr and not log.exists()


def test_plan_lists_every_stack(root: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "mcore_images", "plan"], capture_output=True, text=True,
                            check=False, cwd=root)
    assert result.returncode == 0
    for name in ("ngc", "cuda", "debian", "debian-mcore019", "debian-verl"):
        assert f"runtime-{name}" in result.stdout


def test_plan_fails_on_release_with_tag_only_base(root: Path, tmp_path: Path) -> None:
    import json
    entries = json.loads((root / "env" / "stacks.json").read_text())["stacks"]
    cuda = {**next(e for e in entries if e["name"] == "cuda"), "base_digest": ""}
    (tmp_path / "env").mkdir()
    write_stacks(tmp_path / "env" / "stacks.json", [cuda])
    result = subprocess.run([sys.executable, "-m", "mcore_images", "plan", "--group", "release"],
                            capture_output=True, text=True, check=False,
                            env={**os.environ, "MCORE_IMAGES_ROOT": str(tmp_path)})
    assert result.returncode == 1 and "release-pinned" in result.stdout


def test_jobs_rejects_bad_values(root: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "mcore_images", "jobs", "--max-jobs", "0"],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 2 and result.stderr.count("\n") == 1


def _stacks_with(root: Path, tmp_path: Path, **debian_changes: str) -> Path:
    """A checkout root whose env/stacks.json has the debian stack changed and the committed locks beside it."""
    import json
    import shutil
    entries = json.loads((root / "env" / "stacks.json").read_text())["stacks"]
    debian = {**next(e for e in entries if e["name"] == "debian"), **debian_changes}
    (tmp_path / "env").mkdir()
    for name in ("stacks.schema.json", "engines.json"):  # what upstream releases require, as a checkout has it
        shutil.copy(root / "env" / name, tmp_path / "env")
    shutil.copytree(root / "env" / "locks" / "debian", tmp_path / "env" / "locks" / "debian")
    write_stacks(tmp_path / "env" / "stacks.json", [debian])
    return tmp_path


def test_build_refuses_pins_its_locks_do_not_hold(root: Path, tmp_path: Path, fake_docker: tuple) -> None:
    """Before: `make build` went straight to bake with a megatron-core the locks do not hold, and failed inside
    docker after the base and kernels layers were built; `lock --check` named it at once."""
    env, log = fake_docker
    checkout = _stacks_with(root, tmp_path, mcore="0.16.0")
    result = subprocess.run([sys.executable, "-m", "mcore_images", "build", "--stack", "debian"],
                            capture_output=True, text=True, env={**env, "MCORE_IMAGES_ROOT": str(checkout)},
                            check=False)
    assert result.returncode == 2, result.stdout
    first = result.stderr.splitlines()[-1]
    assert "runtime.txt: megatron-core is 0.16.1, env/stacks.json pins 0.16.0" in first
    assert "mcore-images lock --stack debian" in first
    assert not log.exists()


@pytest.mark.parametrize(("option", "value", "needle"), [
    ("--registry", "127.0.0.1:5000,evil.example/x", "is not a registry"),
    ("--registry", "Registry.Example/Acme", "is not a registry"),
    ("--registry", "host/a b", "is not a registry"),
])
def test_registry_values_cannot_smuggle_tags(option: str, value: str, needle: str,
                                             capsys: pytest.CaptureFixture) -> None:
    """Before: a comma in --registry became a second tag in bake's --set …tags=."""
    from mcore_images import cli

    assert cli.main(["build", "--group", "ci", option, value, "--candidate", "0123456", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0]


def test_image_repo_is_a_repository_name(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    from mcore_images import cli

    monkeypatch.setenv("IMAGE_REPO", "mcore-images,evil.example/x")
    assert cli.main(["build", "--group", "ci", "--dry-run"]) == 2
    assert "IMAGE_REPO" in capsys.readouterr().err


def test_an_over_long_stack_name_is_refused(root: Path, tmp_path: Path) -> None:
    """Before: a 120-character stack name passed the schema and produced tags beyond OCI's 128 characters."""
    checkout = _stacks_with(root, tmp_path, name="d" * 120)
    result = subprocess.run([sys.executable, "-m", "mcore_images", "plan"], capture_output=True, text=True,
                            env={**os.environ, "MCORE_IMAGES_ROOT": str(checkout)}, check=False)
    assert result.returncode == 2 and "is too long" in result.stderr and result.stderr.count("\n") == 1
