"""The example training job's tests: `pytest tests/example --base TAG` (or `make test-example`).

The job image is built once per session from examples/train-gpt on the runtime image given, and
removed afterwards; every test runs it on CPU with gloo.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

JOB_DIR = Path(__file__).resolve().parents[2] / "examples" / "train-gpt"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("mcore-images example job").addoption(
        "--base", metavar="TAG", default=None,
        help="the runtime image the example job is built on; without it these tests are skipped")


@pytest.fixture(scope="session")
def base(request: pytest.FixtureRequest) -> str:
    ref = request.config.getoption("--base")
    if not ref:
        pytest.skip("no --base image given")
    if not shutil.which("docker"):
        pytest.exit("docker is not on PATH: run `make docker-engine` first", returncode=2)
    if subprocess.run(["docker", "image", "inspect", ref], capture_output=True, check=False).returncode:
        pytest.exit(f"no image {ref}: build it first (`make build`)", returncode=2)
    return ref


def build_job(base: str, tag: str, extra: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", "build", "--build-arg", f"BASE={base}", "--build-arg",
                           f"EXTRA_REQUIREMENTS={extra}", "-t", tag, str(JOB_DIR)],
                          capture_output=True, text=True, check=False)


@pytest.fixture(scope="session")
def job(base: str) -> Iterator[str]:
    tag = "mcore-images-example:train-gpt-test"
    built = build_job(base, tag)
    assert built.returncode == 0, built.stderr[-3000:]
    yield tag
    subprocess.run(["docker", "image", "rm", "-f", tag], capture_output=True, check=False)
