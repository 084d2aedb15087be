"""Negative images: the image under test with one defect added, built as one group in one `docker buildx bake`
call that shares one build context, once per session, and removed when the session ends.

A defect is one `Negative`, written next to the test that aims at it: its Dockerfile steps (text, or made from the
image under test), why it does not apply to an image (the test then skips), and any build secret or context file it
needs. The test names its negatives with ``@pytest.mark.negatives(NEGATIVE, ...)`` and asks the session's
`NegativeImages` for each one's tag; the first to ask builds every negative the selected tests name that applies, and
the negative runs only the check it is aimed at (the full suite, once on the real image, shows the others pass).
"""

from __future__ import annotations

import inspect
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.image.utils import docker

ROOT = Path(__file__).resolve().parents[3]
"""The checkout the image tests run from."""
REPO = "mcore-images-negative"
"""The repository every negative image is tagged in."""
MARK = "negatives"
"""The marker a test names its negatives with."""


@dataclass(frozen=True)
class Under:
    """What a defect's steps may read of the image under test: the image, and the session's fixtures (``facts``,
    ``host``, …) by name, so only a defect that needs a probe or a container pays for one."""

    image: docker.ImageInfo
    fixture: Callable[[str], Any]


@dataclass(frozen=True)
class Negative:
    """One defect: the Dockerfile steps that add it to the image under test."""

    name: str
    steps: str | Callable[[Under], str]
    skip: Callable[[Under], str | None] = lambda _: None
    """Why the defect does not apply to this image (the test that aims at it skips, saying so); None: it applies."""
    parent: Callable[[Under], str] | None = None
    """What it is built FROM when not the image under test itself (a ref)."""
    secrets: Mapping[str, bytes] = field(default_factory=dict)
    """Build secrets by id, and their content."""
    files: Mapping[str, str] = field(default_factory=dict)
    """Files of the shared build context its steps COPY, by name, and their text."""

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", self.name):
            raise ValueError(f"negative name {self.name!r}: lower-case letters, digits and dashes")


def marked(items: Iterable[Any]) -> list[Negative]:
    """The negatives the ``negatives`` markers of the collected test items name, each once, in order."""
    found: dict[str, Negative] = {}
    for item in items:
        if item.get_closest_marker("skip"):  # a layer this image lacks: its negatives would not build
            continue
        for mark in item.iter_markers(MARK):
            for negative in mark.args:
                if found.setdefault(negative.name, negative) != negative:
                    raise ValueError(f"two negatives are named {negative.name}: give one another name")
    return list(found.values())


class NegativeImages:
    """The session's negative images: built together on the first request, removed by ``remove``."""

    def __init__(self, under: Under, wanted: list[Negative]) -> None:
        self.under = under
        self.wanted = {n.name: n for n in wanted}
        self.tags: dict[str, str] = {}
        self.built = False
        self.error: docker.DockerError | None = None
        self.seconds = 0.0
        self.folder = Path(tempfile.mkdtemp(prefix="mcore-images-negatives-"))

    def why_not(self, negative: Negative) -> str | None:
        return negative.skip(self.under)

    def ref(self, negative: Negative) -> str:
        """The tag of ``negative`` built on the image under test; skips the calling test where it does not apply."""
        import pytest

        reason = self.why_not(negative)
        if reason:
            pytest.skip(reason)
        if self.wanted.get(negative.name, negative) != negative or negative.name not in self.wanted:
            raise AssertionError(f"negative {negative.name} is not named by the test's @pytest.mark.{MARK}(…): name "
                                 "it there, so that it is built with the others")
        if not self.built:
            self.build()
        if self.error is not None:
            raise self.error
        return self.tags[negative.name]

    def build(self) -> None:
        """Every wanted negative that applies, in one bake call: one context folder, one session."""
        self.built = True
        group = [n for n in self.wanted.values() if not self.why_not(n)]
        if not group:
            return
        context = self.folder / "context"
        context.mkdir()
        targets = {}
        for negative in group:
            for name, text in negative.files.items():
                path = context / name
                if path.exists() and path.read_text() != text:
                    raise ValueError(f"negatives disagree on the context file {name}: name one of them otherwise")
                path.write_text(text)
            tag = f"{REPO}:{negative.name}-{uuid.uuid4().hex[:8]}"
            targets[negative.name] = self.target(negative, tag)
            self.tags[negative.name] = tag
        definition = self.folder / "negatives.json"
        definition.write_text(json.dumps({"group": {"default": {"targets": sorted(targets)}}, "target": targets},
                                         indent=2))
        started = time.monotonic()
        done = subprocess.run(["docker", "buildx", "bake", "-f", str(definition), "--progress=plain"],
                              capture_output=True, text=True, check=False, timeout=1800, cwd=self.folder)
        self.seconds = round(time.monotonic() - started, 1)
        if done.returncode:
            self.remove()
            failed = sorted(set(re.findall(r"target (\S+): failed to solve", done.stderr))) or sorted(targets)
            self.error = docker.DockerError(f"building the negative images failed (exit {done.returncode}) at "
                                            f"{', '.join(failed)}:\n{done.stderr[-3000:]}")

    def target(self, negative: Negative, tag: str) -> dict[str, Any]:
        """The bake target of one negative: its Dockerfile inline, FROM the pinned image under test (or its parent),
        on the shared context; --no-cache, as BuildKit's cache key ignores a secret's content (a cached step would
        hold the secret of an earlier run: a rotated secret does not evict a leaky layer either)."""
        steps = negative.steps(self.under) if callable(negative.steps) else negative.steps
        parent = negative.parent(self.under) if negative.parent else self.under.image.ref
        secrets = []
        for sid, content in negative.secrets.items():
            path = self.folder / "secrets" / f"{negative.name}-{sid}"
            path.parent.mkdir(exist_ok=True)
            path.write_bytes(content)
            secrets.append(f"id={sid},src={path}")
        platform = docker.platform_args(parent)
        return {
            "context": "context",
            "dockerfile-inline": f"FROM {parent}\n{steps}",
            "tags": [tag],
            "no-cache": True,
            "secret": secrets,
            "attest": ["type=provenance,disabled=true"],
            **({"platforms": [platform[1]]} if platform else {}),
        }

    def remove(self) -> None:
        for tag in self.tags.values():
            docker.remove_image(tag)
        shutil.rmtree(self.folder, ignore_errors=True)


def node(test: Callable[..., Any] | str, case: str | None = None) -> str:
    """The node id of a test function (and one of its parametrized cases), as pytest selects it."""
    if isinstance(test, str):
        return test
    path = Path(inspect.getfile(test)).resolve().relative_to(ROOT)
    return f"{path}::{test.__name__}" + (f"[{case}]" if case is not None else "")


def failures(ref: str, *tests: Callable[..., Any] | str) -> tuple[int, set[str], str]:
    """Run only the image tests ``tests`` (functions or node ids) against ``ref`` in a subprocess: (exit code, names
    of the tests that failed, output with each failure's message)."""
    cmd = [sys.executable, "-m", "pytest", *(node(t) for t in tests), "--image", ref, "-q", "-rf", "--tb=short",
           "-p", "no:cacheprovider"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False, cwd=ROOT)
    output = proc.stdout + proc.stderr
    return proc.returncode, set(re.findall(r"^FAILED \S+::(\S+)", output, re.M)), output


def fails_only(ref: str, expected: str, *tests: Callable[..., Any] | str) -> str:
    """Run only ``tests`` against the negative image ``ref`` and assert that exactly ``expected`` (a test's name)
    failed, and no other of them: the output, for a check of why it failed."""
    rc, failed, output = failures(ref, *tests)
    assert rc == 1 and failed == {expected}, f"exit {rc}, failed {sorted(failed)}:\n{output[-3000:]}"
    return output
