"""A framework's own tests in the image (framework_tests.py): the counts read from pytest's JUnit report, a known
failure counted apart, and an sdist whose bytes are not the index's refused."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from mcore_images.release import framework_tests
from mcore_images.release.framework_tests import Suite

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="1" failures="2"
skipped="1" tests="6"><testcase classname="tests.test_protocol_v2_on_cpu" name="test_chunk_concat"><failure
message="AttributeError: 'TensorDict' object has no attribute 'tensor_split'&#10;more">x</failure></testcase>
<testcase classname="tests.tools.test_tool_on_cpu" name="test_needs_a_model"><failure message="OSError: no model"/>
</testcase><testcase classname="tests.test_a_on_cpu" name="test_b"><error message="ImportError: y"/></testcase>
<testcase classname="tests.test_a_on_cpu" name="test_c"><skipped/></testcase>
<testcase classname="tests.test_a_on_cpu" name="test_d"/><testcase classname="tests.test_a_on_cpu" name="test_e"/>
</testsuite></testsuites>"""


def test_counts_and_failures_from_the_junit_report(tmp_path: Path) -> None:
    (tmp_path / "junit.xml").write_text(JUNIT)
    suite = Suite("verl", "verl", "verl", "*_on_cpu.py", (), ("pytest",),
                  known={"tests/tools/test_tool_on_cpu.py::test_needs_a_model": "downloads a model"})
    found = framework_tests.counts(tmp_path / "junit.xml", suite)
    assert (found["passed"], found["failed"], found["known"], found["skipped"], found["total"]) == (2, 2, 1, 1, 6)
    assert found["failures"][0] == {"test": "tests/test_protocol_v2_on_cpu.py::test_chunk_concat",
                                    "error": "AttributeError: 'TensorDict' object has no attribute 'tensor_split'"}
    assert found["known_failures"][0]["why"] == "downloads a model"


class Reply(io.BytesIO):
    def __enter__(self) -> Reply:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def test_an_sdist_whose_bytes_are_not_the_indexs_is_refused(tmp_path: Path) -> None:
    index = {"files": [{"filename": "verl-0.8.0.tar.gz", "url": "https://files/verl-0.8.0.tar.gz",
                        "hashes": {"sha256": "0" * 64}}]}

    def opener(request: object, timeout: float) -> Reply:
        url = getattr(request, "full_url", request)
        return Reply(json.dumps(index).encode() if str(url).endswith("/verl/") else b"not the index's bytes")

    with pytest.raises(ValueError, match="is not the index's"):
        framework_tests.fetch_sdist("verl", "0.8.0", tmp_path, opener)
    with pytest.raises(FileNotFoundError, match=r"no sdist of verl 0\.9\.9"):
        framework_tests.fetch_sdist("verl", "0.9.9", tmp_path, opener)
