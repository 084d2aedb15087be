"""certify's progress: its steps numbered, the image tests and a framework's own tests told a step per test file (and
at once for a failure) from pytest's own verbose lines, with the time since certify started."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mcore_images import progress
from mcore_images.release import certify, framework_tests
from mcore_images.release.pytest_steps import VERBOSE, PytestSteps
from tests.unit.mcore_images.release.test_certify import IMAGE_ID, FakeDocker, smoke_cert

SUITE = {
    "test_a.py": "import pytest\n\ndef test_one():\n    pass\n\n@pytest.mark.skip(reason='no GPU')\ndef test_two():\n"
                 "    pass\n",
    "test_b.py": "import time\n\ndef test_slow():\n    time.sleep(0.8)\n\ndef test_wrong():\n    assert 1 == 2\n\n"
                 "def test_three():\n    pass\n",
}


def untimed(text: str, tag: str = "certify") -> list[str]:
    return [re.sub(rf"^\[{tag}\] \d+:\d\d ", "", line) for line in text.splitlines() if line.startswith(f"[{tag}] ")]


def test_a_real_pytest_run_is_told_a_step_per_file_and_at_once_for_a_failure(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: certify printed the image tests' output once they had all run (ten minutes in CI)."""
    for name, body in SUITE.items():
        (tmp_path / name).write_text(body)
    monkeypatch.setattr(progress, "QUIET_S", 0.3)
    said, echoed = io.StringIO(), io.StringIO()
    steps = PytestSteps("image tests", progress.Progress("certify", said), echoed)
    cmd = [sys.executable, "-m", "pytest", *VERBOSE, "-p", "no:cacheprovider", "test_a.py", "test_b.py"]
    code = certify.followed(cmd, steps, subprocess.run, cwd=tmp_path)
    told = untimed(said.getvalue())
    assert code == 1
    assert [line for line in told if "still running" not in line] == [
        "image tests 2/5: test_a.py: 1 passed, 1 skipped", "image tests 4/5: FAILED test_b.py::test_wrong",
        "image tests 5/5: test_b.py: 2 passed, 1 failed"], told
    assert "image tests 2/5: still running (the last to end: test_a.py::test_two)" in told, told  # test_slow's 0.8 s
    assert re.fullmatch(r"1 failed, 3 passed, 1 skipped in [\d.]+s", steps.last), steps.last
    assert "test_b.py::test_wrong" in echoed.getvalue() and "PASSED" not in echoed.getvalue()


def test_certify_numbers_its_steps(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    fake = FakeDocker({"Id": IMAGE_ID, "RepoDigests": []}, smoke_cert=smoke_cert())
    assert certify.certify("mcore:rt", tmp_path / "out", ["--cpu"], run=fake) == 0
    told = untimed(capsys.readouterr().out)
    steps = [line.split(":", 1)[0] for line in told if line.startswith("step ")]
    assert steps == ["step 1/3", "step 2/3", "step 3/3"], told
    assert [line.split(": ")[1] for line in told if line.startswith("step ")] == ["image tests", "smoke",
                                                                                  "bridge check"]
    assert "image tests: 12 passed in 3.0s" in told and told[-1].startswith("wrote ")


def test_a_frameworks_own_tests_are_told_as_they_run_in_the_image(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture) -> None:
    """The container's pytest, a fake `docker` at the process boundary: its lines stream out (before, the host
    printed the last three once the suite had ended)."""
    docker = tmp_path / "bin" / "docker"
    docker.parent.mkdir()
    docker.write_text("""#!/bin/sh
for arg; do case "$arg" in *:/out) out="${arg%:/out}" ;; esac; done
echo 'tests/test_a_on_cpu.py::test_one PASSED                                [1/3]'
echo 'tests/test_a_on_cpu.py::test_two PASSED                                [2/3]'
echo 'tests/trainer/test_b_on_cpu.py::test_three FAILED                      [3/3]'
echo '========================= 1 failed, 2 passed in 4.20s ========================='
cat > "$out/junit.xml" <<'XML'
<testsuites><testsuite name="pytest" errors="0" failures="1" skipped="0" tests="3">
<testcase classname="tests.test_a_on_cpu" name="test_one"/><testcase classname="tests.test_a_on_cpu" name="test_two"/>
<testcase classname="tests.trainer.test_b_on_cpu" name="test_three"><failure message="boom"/></testcase>
</testsuite></testsuites>
XML
""")
    docker.chmod(0o755)
    monkeypatch.setenv("PATH", f"{docker.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(framework_tests, "fetch_sdist", lambda d, v, into: ((into / "verl-0.8.0.tar.gz"), "0" * 64))
    monkeypatch.setattr(framework_tests, "runner_wheels", lambda *args: None)
    labels = {"io.mcore-images.verl": "0.8.0"}
    (suite,) = framework_tests.carried(labels)
    found = framework_tests.run_suite("img", labels, suite, "3.11", "x86_64")
    assert found is not None and (found["passed"], found["failed"]) == (2, 1)
    told = untimed(capsys.readouterr().out)
    assert told[1:] == ["verl 0.8.0's own tests 2/3: tests/test_a_on_cpu.py: 2 passed",
                        "verl 0.8.0's own tests 3/3: FAILED tests/trainer/test_b_on_cpu.py::test_three",
                        "verl 0.8.0's own tests 3/3: tests/trainer/test_b_on_cpu.py: 1 failed",
                        "verl 0.8.0's own CPU tests: 1 failed, 2 passed in 4.20s"], told
    assert json.dumps(found)  # the certificate's section stays JSON
