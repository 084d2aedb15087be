"""megatron-core's floors; env; the smoke suite and the doctor inside the image. Its components' labels and imports:
tests/image/test_versions.py."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.image.shared_checks import environment, tooling, versions
from tests.image.utils import docker

from mcore_images.doctor.isolate import DEFAULT_TIMEOUT_S

SMOKE = "cd /workspace 2>/dev/null; timeout {t} python -m mcore_images.smoke {args}"


def test_mcore_at_least_013(facts: dict[str, Any]) -> None:
    problems = versions.mcore_floor_problems(facts)
    assert not problems, "\n".join(problems)


def test_python_floor_for_mcore(facts: dict[str, Any]) -> None:
    problems = versions.python_floor_problems(facts)
    assert not problems, "\n".join(problems)


def test_required_env_in_image_config(image: docker.ImageInfo) -> None:
    problems = environment.env_problems(image.env, image.stack_name, "docker image inspect Config.Env")
    assert not problems, "\n".join(problems)


def test_required_env_inside_container(facts: dict[str, Any], image: docker.ImageInfo) -> None:
    problems = environment.env_problems(facts["env"], image.stack_name, "inside the container")
    assert not problems, "\n".join(problems)


def test_tooling_is_installed_in_the_venv_and_only_there(host: Any, image: docker.ImageInfo) -> None:
    """The project's wheel is installed in the image's venv (the `mcore-images` command, `python -m mcore_images.smoke`,
    the doctor); another Python in the image does not see its packages; the pins ship as data."""
    where = host.run("python -c 'import mcore_images.smoke as s, mcore_images as m; print(m.__file__, s.__file__)'")
    assert where.rc == 0, f"the venv's Python cannot import the tooling: {where.stderr.strip()[-1000:]}"
    assert all("/site-packages/" in line for line in where.stdout.split()), where.stdout
    version = host.run("mcore-images --version")
    assert version.rc == 0 and version.stdout.startswith("mcore-images "), version.stderr
    if host.file("/usr/bin/python3").exists:
        system = host.run("/usr/bin/python3 -c 'import mcore_images.smoke'")
        assert system.rc != 0 and "No module named 'mcore_images'" in system.stderr, (
            f"/usr/bin/python3 imports the smoke package (exit {system.rc}): {system.stderr.strip()[-500:]}")
    for path in ("stacks.json", "bench-baselines.json"):
        assert host.file(f"{environment.TOOLING_DATA}/env/{path}").is_file, f"env/{path} is missing from the image"
    shipped = host.file(f"{environment.TOOLING_DATA}/env/stacks.json").content_string
    problems = tooling.shipped_stacks_problems(shipped, image)
    assert not problems, "\n".join(problems)


def test_smoke_dry_run(host: Any) -> None:
    """`python -m mcore_images.smoke --dry-run` prints the plan without GPUs, naming the layouts it would run."""
    result = host.run(SMOKE.format(t=300, args="--dry-run"))
    output = result.stdout + result.stderr
    assert result.rc == 0, f"smoke --dry-run exited {result.rc}: {output.strip()[-2000:]}"
    assert tooling.LAYOUT_NAME.search(result.stdout), f"smoke --dry-run named no layout: {output.strip()[-2000:]}"


def test_smoke_cpu(host: Any) -> None:
    """A short smoke run on CPU (gloo), where the smoke suite offers --cpu."""
    helptext = host.run(SMOKE.format(t=120, args="--help"))
    assert helptext.rc == 0, f"smoke --help exited {helptext.rc}: {helptext.stderr.strip()[-1000:]}"
    if "--cpu" not in helptext.stdout:
        pytest.skip("this smoke suite has no --cpu mode")
    args = tooling.smoke_cpu_args(helptext.stdout, out="/tmp/mcore-images-test-smoke")
    result = host.run(SMOKE.format(t=900, args=args))
    output = (result.stdout + result.stderr).strip()
    if result.rc != 0:  # the certificate names the failing run and error; torchrun's trace is the context
        summary = host.run("head -n 12 /tmp/mcore-images-test-smoke/certificate.md 2>/dev/null || true").stdout
        pytest.fail(f"python -m mcore_images.smoke {args} exited {result.rc}:\n{summary.strip()}\n--- output ---\n"
                    f"{output[-2000:]}")
    print(f"python -m mcore_images.smoke {args}:\n{output[-1500:]}")


def test_doctor_reports_no_failures(host: Any, slowdown: float) -> None:
    """`python -m mcore_images doctor --json` in the image: no check failed or crashed (under QEMU, with each
    check's timeout stretched as much as the image's programs are slowed)."""
    per_check = DEFAULT_TIMEOUT_S * slowdown
    result = host.run(f"cd /workspace 2>/dev/null; timeout {600 * slowdown:.0f} python -m mcore_images doctor --json "
                      f"--timeout {per_check:g}")
    assert result.rc in (0, 1), f"the doctor could not run (exit {result.rc}): {result.stderr.strip()[-2000:]}"
    report = json.loads(result.stdout)
    problems = tooling.doctor_problems(report)
    assert not problems, "\n".join(problems)
    assert result.rc == 0, f"the doctor exited {result.rc} with no failing finding: {report.get('counts')}"
