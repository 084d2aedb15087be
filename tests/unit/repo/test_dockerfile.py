"""The image/host edge: the compile steps run the job planner from the files the Dockerfile's `planner` stage
copies, so that list must be exactly what jobs.py imports (a missing module fails only inside a compile step,
minutes into a build; an extra one re-runs the compiles when it is edited)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.unit.conftest import ROOT

PACKAGE = ROOT / "src" / "mcore_images"


def own_imports(module: str, seen: set[str] | None = None) -> set[str]:
    """``module`` (a path below src/mcore_images) and every mcore_images module it imports at the top level,
    transitively, with the ``__init__.py`` of each package on the way, as paths below src/mcore_images."""
    seen = set() if seen is None else seen
    if module in seen:
        return seen
    seen.add(module)
    folder = Path(module).parent
    while folder != Path("."):
        seen.add(str(folder / "__init__.py"))
        folder = folder.parent
    tree = ast.parse((PACKAGE / module).read_text())
    for node in tree.body:
        names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module
                 else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
        for name in names:
            if name.startswith("mcore_images."):
                parts = name.split(".")[1:]
                path = "/".join(parts) + ".py"
                own_imports(path if (PACKAGE / path).is_file() else "/".join(parts) + "/__init__.py", seen)
    return seen


def planner_files() -> list[str]:
    """What the planner stage's COPY lines place below /mcore_images/, as paths below src/mcore_images."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    stage = re.search(r"^FROM scratch AS planner\n(.*?)(?=^FROM )", text, re.M | re.S)
    assert stage, "the Dockerfile has no `FROM scratch AS planner` stage"
    copies = re.findall(r"^COPY (.+) /mcore_images/(\S*)$", stage.group(1), re.M)
    assert copies, "the planner stage has no COPY ... /mcore_images/"
    placed = []
    for sources, folder in copies:
        for source in sources.split():
            assert source.startswith(f"src/mcore_images/{folder}"), f"{source} is copied into /mcore_images/{folder}"
            placed.append(folder + Path(source).name)
    return placed


def test_the_planner_stage_copies_what_jobs_imports() -> None:
    assert sorted(planner_files()) == sorted(own_imports("image_build/jobs.py") | {"__init__.py"})


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
    assert not re.search(r"pip\s+check", text), "call python /mnt/install/pip-check.py (mounted) instead of pip check"
    stage = re.search(r"^FROM scratch AS install-scripts\nCOPY (.+) /$", text, re.M)
    assert stage and "docker/pip-check.py" in stage.group(1).split(), "the install-scripts stage copies pip-check.py"
    runs = [re.match(r"(?:.*\\\n)*.*", chunk).group(0) for chunk in re.split(r"\nRUN ", text)[1:]]  # RUN … to its end
    steps = [step for step in runs if "pip-check.py" in step or "install-lock.sh" in step]
    assert steps and all("--mount=type=bind,from=install-scripts,target=/mnt/install" in step for step in steps)
