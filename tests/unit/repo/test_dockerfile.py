"""The image/host edge: the compile steps run the job planner from the files the Dockerfile's `planner` stage
copies, so that list must be exactly what jobs.py imports (a missing module fails only inside a compile step,
minutes into a build; an extra one re-runs the compiles when it is edited)."""

from __future__ import annotations

import ast
import re

from tests.unit.conftest import ROOT

PACKAGE = ROOT / "src" / "mcore_images"


def own_imports(module: str, seen: set[str] | None = None) -> set[str]:
    """``module`` and every mcore_images module it imports at the top level, transitively, as file names."""
    seen = set() if seen is None else seen
    if module in seen:
        return seen
    seen.add(module)
    tree = ast.parse((PACKAGE / module).read_text())
    for node in tree.body:
        names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module
                 else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
        for name in names:
            if name.startswith("mcore_images."):
                own_imports(name.split(".")[1] + ".py", seen)
    return seen


def planner_files() -> list[str]:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    stage = re.search(r"^FROM scratch AS planner\n(.*?)(?=^FROM )", text, re.M | re.S)
    assert stage, "the Dockerfile has no `FROM scratch AS planner` stage"
    copy = re.search(r"^COPY (.+) /mcore_images/$", stage.group(1), re.M)
    assert copy, "the planner stage has no COPY ... /mcore_images/"
    return [w.removeprefix("src/mcore_images/") for w in copy.group(1).split()]


def test_the_planner_stage_copies_what_jobs_imports() -> None:
    assert sorted(planner_files()) == sorted(own_imports("jobs.py") | {"__init__.py"})


def test_compile_steps_mount_the_planner_stage_and_no_file_of_the_tooling() -> None:
    text = (ROOT / "Dockerfile").read_text()
    runs = [r for r in re.split(r"\n(?=RUN |FROM |COPY |ENV |ARG )", text) if "source=docker/compile-jobs.sh" in r]
    assert runs, "no step mounts docker/compile-jobs.sh"
    for step in runs:
        assert "--mount=type=bind,from=planner,target=/mnt/planner" in step, step[:120]
        assert "source=src/mcore_images" not in step, step[:120]


def test_every_pip_check_of_a_build_step_is_pip_check_py() -> None:
    """A bare `pip check` fails an aarch64 layer on NVIDIA's sbsa-tagged wheel; docker/pip-check.py judges it."""
    text = (ROOT / "Dockerfile").read_text()
    assert not re.search(r"pip\s+check", text), "call python /mnt/build/pip-check.py (mounted) instead of pip check"
    steps = [step for step in re.split(r"\nRUN ", text) if "pip-check.py" in step]
    assert steps and all("source=docker/pip-check.py,target=/mnt/build/pip-check.py" in step for step in steps)
