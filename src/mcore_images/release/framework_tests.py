"""The frameworks' own tests, run in the image they are meant to run in: verl's CPU unit tests, as its own CI
selects them (``python_files = *_on_cpu.py`` under ``tests/``, pytest with ``--asyncio-mode=auto``), from the
sdist of the verl release the image carries.

The host fetches the sdist from PyPI (checked against the index's sha256) and the test runner's wheels (pytest
and pytest-asyncio, which the image does not carry), and the tests run in a container with no network, the
image's own verl installed where they import it from. The counts, and each failure with its first line, go into
the image's certificate (``framework_tests``). A release's sdist carries part of the repository's tests (verl
of the 0.8 line: 13 of the 50 ``*_on_cpu.py`` files at its tag;
the 0.9 line's sdist: 30); those are what PyPI lets CI run. The release is the image's own (its label, which the image
tests hold to what is installed), so an image of another verl runs that release's tests.

A failure that is the image's is fixed in the image; one that is the tests' own setup (a model folder to
download, a file of the repository that the sdist leaves out) is listed in ``KNOWN`` with why, and counted apart.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcore_images import docker_cli, progress
from mcore_images.catalogue import images
from mcore_images.release.pytest_steps import VERBOSE, PytestSteps
from mcore_images.resolve import pypi

INSIDE = "/tmp/framework-tests"
"""Where the tests run in the container: a checkout's layout (tests/, and verl/ linked to the installed package)."""


@dataclass(frozen=True)
class Suite:
    """One framework's own CPU tests."""

    component: str
    """The catalogue key whose label names the release (its sdist is the tests' source)."""
    distribution: str
    package: str
    """The import package a test may open files of as a checkout would (verl/trainer/config/...)."""
    python_files: str
    pytest_args: tuple[str, ...]
    runner: tuple[str, ...]
    """What the test runner needs that the image need not carry (installed into a folder of the container's own)."""
    known: Mapping[str, str] = field(default_factory=dict)
    """Test ids whose failure is their own setup's, not the image's, with why."""
    timeout_s: int = 1500


SUITES: tuple[Suite, ...] = (
    Suite("verl", "verl", "verl", "*_on_cpu.py", ("--asyncio-mode=auto",), ("pytest", "pytest-asyncio")),
)


def carried(labels: Mapping[str, str]) -> list[Suite]:
    """The suites of the frameworks an image carries (by its labels)."""
    return [s for s in SUITES if labels.get(images.label(s.component), "none") != "none"]


def fetch_sdist(distribution: str, version: str, into: Path,
                opener: Callable[..., Any] = urllib.request.urlopen) -> tuple[Path, str]:
    """The release's sdist from PyPI's simple index (JSON), checked against the index's sha256: (path, sha256)."""
    files = pypi.index_files(distribution, opener)
    normal = distribution.replace("-", "_")
    wanted = {f"{normal}-{version}.tar.gz", f"{distribution}-{version}.tar.gz"}
    entry = next((f for f in files if f["filename"] in wanted), None)
    if entry is None:
        raise FileNotFoundError(f"PyPI lists no sdist of {distribution} {version}")
    path = into / entry["filename"]
    with opener(entry["url"], timeout=600) as reply:
        path.write_bytes(reply.read())
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != entry["hashes"]["sha256"]:
        raise ValueError(f"{entry['filename']}: sha256 {digest} is not the index's {entry['hashes']['sha256']}")
    return path, digest


def runner_wheels(suite: Suite, python: str, machine: str, into: Path) -> None:
    """The test runner's wheels for the image's Python and machine (pure-Python ones: what pip picks)."""
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--only-binary", ":all:", "--dest", str(into),
                    "--python-version", python, "--implementation", "cp", "--platform",
                    f"manylinux2014_{machine}", *suite.runner], check=True, capture_output=True, text=True,
                   timeout=600)


SCRIPT = r'''
set -eu
python - <<'PY'
import importlib.metadata as md, os, pathlib, re, subprocess, sys
def has(name):
    try:
        md.version(name)
        return True
    except md.PackageNotFoundError:
        return False
# the runner's wheels, but none of a distribution the image already has (it would shadow the image's copy)
keep = [str(w) for w in sorted(pathlib.Path("/mnt/runner").glob("*.whl"))
        if not has(re.sub(r"[-_.]+", "-", w.name.split("-")[0]).lower())]
env = dict(os.environ, PIP_CONSTRAINT="")
subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target",
                "/tmp/test-runner", *keep], check=True, env=env)
PY
mkdir -p "$INSIDE"
tar -C "$INSIDE" --strip-components=1 -xzf "/mnt/sdist/$SDIST" --wildcards '*/tests'
ln -s "$(python -c "import importlib.util as u, os; print(os.path.dirname(u.find_spec('$PACKAGE').origin))")" \
  "$INSIDE/$PACKAGE"
cd "$INSIDE"
printf '[pytest]\npython_files = %s\n' "$PYTHON_FILES" > pytest.ini
PYTHONPATH=/tmp/test-runner timeout "$TIMEOUT" python -m pytest -p no:cacheprovider \
  --continue-on-collection-errors "$@" --junitxml=/out/junit.xml tests/ 2>&1 | tee /out/pytest.log
'''
"""Run in the container: the runner into its own folder, the sdist's tests/ in a checkout's layout whose package
folder is the image's installed one, then pytest with the framework's own selection, its output streamed (the host
makes steps of it) and kept in /out/pytest.log."""


def counts(junit: Path, suite: Suite) -> dict[str, Any]:
    """The run's counts and failures from pytest's JUnit XML; a known failure is counted apart with its reason."""
    root = ET.parse(junit).getroot()
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for found in root.iter("testsuite"):
        for key in totals:
            totals[key] += int(found.get(key, 0))
    failed, known = [], []
    for case in root.iter("testcase"):
        problem = case.find("failure")
        problem = problem if problem is not None else case.find("error")
        if problem is None:
            continue
        test_id = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
        first = (problem.get("message") or "").strip().splitlines()[:1]
        entry = {"test": test_id, "error": first[0][:300] if first else ""}
        if test_id in suite.known:
            known.append({**entry, "why": suite.known[test_id]})
        else:
            failed.append(entry)
    passed = totals["tests"] - totals["failures"] - totals["errors"] - totals["skipped"]
    return {"passed": passed, "failed": len(failed), "known": len(known), "skipped": totals["skipped"],
            "total": totals["tests"], "failures": failed[:50], "known_failures": known}


def run_suite(ref: str, labels: Mapping[str, str], suite: Suite, python: str, machine: str,
              say: progress.Progress | None = None) -> dict[str, Any] | None:
    """The suite's outcome for the image (None when the image does not carry the framework); its progress is a step
    per test file (pytest_steps.py)."""
    version = labels.get(images.label(suite.component))
    if not version or version == "none":
        return None
    with tempfile.TemporaryDirectory(prefix="framework-tests-") as tmp:
        work = Path(tmp)
        for name in ("sdist", "runner", "out"):
            (work / name).mkdir()
        (work / "out").chmod(0o777)
        try:
            sdist, digest = fetch_sdist(suite.distribution, version, work / "sdist")
            runner_wheels(suite, python, machine, work / "runner")
        except (OSError, ValueError, subprocess.CalledProcessError) as exc:
            return {"version": version, "ran": False, "error": f"could not fetch the tests: {exc}"}
        cmd = docker_cli.argv("run", "--rm", "--network", "none", "-e", f"INSIDE={INSIDE}", "-e", f"SDIST={sdist.name}",
                              "-e", f"PACKAGE={suite.package}", "-e", f"PYTHON_FILES={suite.python_files}",
                              "-e", f"TIMEOUT={suite.timeout_s}", "-v", f"{work / 'sdist'}:/mnt/sdist:ro",
                              "-v", f"{work / 'runner'}:/mnt/runner:ro", "-v", f"{work / 'out'}:/out", "--entrypoint",
                              "sh", ref, "-c", SCRIPT, "framework-tests", *VERBOSE, *suite.pytest_args)
        steps = PytestSteps(f"{suite.distribution} {version}'s own tests",
                            say or progress.Progress("certify", sys.stdout))
        steps.progress.say(f"{suite.distribution} {version}'s own CPU tests ({suite.python_files} of {sdist.name}), "
                           "offline in the image: started")
        done = progress.follow(cmd, steps, timeout=suite.timeout_s + 300)
        steps.finish()
        steps.progress.say(f"{suite.distribution} {version}'s own CPU tests: {steps.last or 'no summary'}")
        junit = work / "out" / "junit.xml"
        if not junit.is_file():
            said = done.output.strip().splitlines()[-1:] or ["no output"]
            if done.returncode is None:
                said = [f"stopped after {suite.timeout_s + 300} s"]
            return {"version": version, "ran": False, "error": f"pytest wrote no report ({said[0][:300]})"}
        return {"version": version, "ran": True, "source": f"{sdist.name} (sha256:{digest})",
                "selection": f"tests/**/{suite.python_files}", "pytest_args": list(suite.pytest_args),
                **counts(junit, suite)}
