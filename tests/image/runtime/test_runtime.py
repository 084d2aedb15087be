"""megatron-core and the bridges as labelled; env; the smoke suite and the doctor inside the image."""

from __future__ import annotations

import json
from typing import Any

import imagecheck as ic
import pytest

SMOKE = "cd /workspace 2>/dev/null; timeout {t} python -m smoke {args}"


@pytest.mark.parametrize("key", ic.components_of("runtime"))
def test_version_label_matches_installed(key: str, labels: dict[str, str], facts: dict[str, Any]) -> None:
    problems = ic.version_problems(key, labels, facts)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("key", ic.components_of("runtime"))
def test_imports(key: str, labels: dict[str, str], facts: dict[str, Any]) -> None:
    problems = ic.import_problems(key, labels, facts)
    assert not problems, "\n".join(problems)


def test_mcore_at_least_013(facts: dict[str, Any]) -> None:
    problems = ic.mcore_floor_problems(facts)
    assert not problems, "\n".join(problems)


def test_python_floor_for_mcore(facts: dict[str, Any]) -> None:
    problems = ic.python_floor_problems(facts)
    assert not problems, "\n".join(problems)


def test_required_env_in_image_config(image: ic.ImageInfo) -> None:
    problems = ic.env_problems(image.env, image.stack_name, "docker image inspect Config.Env")
    assert not problems, "\n".join(problems)


def test_required_env_inside_container(facts: dict[str, Any], image: ic.ImageInfo) -> None:
    problems = ic.env_problems(facts["env"], image.stack_name, "inside the container")
    assert not problems, "\n".join(problems)


def test_tooling_shipped(host: Any, image: ic.ImageInfo) -> None:
    """The smoke suite, the doctor's package and the image's pins are shipped in /opt/mcore-images."""
    for path in (
        "/opt/mcore-images/smoke/__main__.py",
        "/opt/mcore-images/mcore_images/__main__.py",
        "/opt/mcore-images/env/stacks.json",
    ):
        assert host.file(path).is_file, f"{path} is missing from the image"
    problems = ic.shipped_stacks_problems(host.file("/opt/mcore-images/env/stacks.json").content_string, image)
    assert not problems, "\n".join(problems)


def test_smoke_dry_run(host: Any) -> None:
    """`python -m smoke --dry-run` prints the plan without GPUs, naming the layouts it would run."""
    result = host.run(SMOKE.format(t=300, args="--dry-run"))
    output = result.stdout + result.stderr
    assert result.rc == 0, f"smoke --dry-run exited {result.rc}: {output.strip()[-2000:]}"
    assert ic.LAYOUT_NAME.search(result.stdout), f"smoke --dry-run named no layout: {output.strip()[-2000:]}"


def test_smoke_cpu(host: Any) -> None:
    """A short smoke run on CPU (gloo), where the smoke suite offers --cpu."""
    helptext = host.run(SMOKE.format(t=120, args="--help"))
    assert helptext.rc == 0, f"smoke --help exited {helptext.rc}: {helptext.stderr.strip()[-1000:]}"
    if "--cpu" not in helptext.stdout:
        pytest.skip("this smoke suite has no --cpu mode")
    args = ic.smoke_cpu_args(helptext.stdout, out="/tmp/mcore-images-test-smoke")
    result = host.run(SMOKE.format(t=900, args=args))
    output = (result.stdout + result.stderr).strip()
    if result.rc != 0:  # the certificate names the failing run and error; torchrun's trace is the context
        summary = host.run("head -n 12 /tmp/mcore-images-test-smoke/certificate.md 2>/dev/null || true").stdout
        pytest.fail(f"python -m smoke {args} exited {result.rc}:\n{summary.strip()}\n--- output ---\n{output[-2000:]}")
    print(f"python -m smoke {args}:\n{output[-1500:]}")


def test_doctor_reports_no_failures(host: Any) -> None:
    """`python -m mcore_images doctor --json` in the image: no check failed or crashed."""
    result = host.run("cd /workspace 2>/dev/null; timeout 600 python -m mcore_images doctor --json")
    assert result.rc in (0, 1), f"the doctor could not run (exit {result.rc}): {result.stderr.strip()[-2000:]}"
    report = json.loads(result.stdout)
    problems = ic.doctor_problems(report)
    assert not problems, "\n".join(problems)
    assert result.rc == 0, f"the doctor exited {result.rc} with no failing finding: {report.get('counts')}"
