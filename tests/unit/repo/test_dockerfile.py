"""The image/host edge: each compile step's cache key is what changes what it makes, and nothing else. BuildKit keys a
RUN on its command, on every ARG and ENV its stage set before it, and on the content of each bind mount; a secret,
a cache or a tmpfs mount stays out of the key. So the steps that compile TE and apex declare only their own args,
bind only the scripts and sources of their compile, and get the job planner (how many jobs, not what they make) as
secrets: editing, moving or renaming the tooling's code never recompiles TE. The planner's secrets must be exactly
the modules jobs.py imports (a missing one fails only inside a compile step, minutes into a build), and bake passes
each of them."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from mcore_images.image_build import dockerfile
from tests.unit.conftest import ROOT

PACKAGE = ROOT / "src" / "mcore_images"

COMPILE_INPUTS = {
    "te-build": {
        "args": {"CUDA_VERSION", "TE_VERSION", "TE_SOURCE", "CUDA_ARCHS"},
        "binds": {"docker/build-te.sh", "docker/pip.sh", "docker/nvcc-retry.sh", "docker/cross-compiler.sh",
                  "from=cross-gxx"},
    },
    "apex-build": {
        "args": {"CUDA_VERSION", "APEX_COMMIT", "CUDA_ARCHS"},
        "binds": {"docker/build-apex.sh", "docker/pip.sh", "docker/nvcc-retry.sh", "from=apex"},
    },
}
"""What each compile stage's step may be keyed on, besides the builder it starts from: the pins and GPU
architectures it compiles for, its build script and the wrappers that call pip and nvcc, the cross compiler an
emulated build uses, the sources."""
PLANNER = "/mnt/planner/mcore_images/"
UNKEYED = ("secret", "cache", "tmpfs", "ssh")
"""Mount types BuildKit leaves out of a step's cache key."""


def own_imports(module: str, seen: set[str] | None = None) -> set[str]:
    """``module`` (a path below src/mcore_images) and every mcore_images module it imports at the top level,
    transitively, as paths below src/mcore_images (packages by their ``__init__.py``)."""
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
                parts = name.split(".")[1:]
                path = "/".join(parts) + ".py"
                own_imports(path if (PACKAGE / path).is_file() else "/".join(parts) + "/__init__.py", seen)
    return seen


def stage_text(name: str) -> str:
    """The instructions of one stage, continuation lines joined, comments dropped."""
    text = (ROOT / "Dockerfile").read_text()
    body = re.search(rf"^FROM [^\n]* AS {re.escape(name)}\n(.*?)(?=^FROM |\Z)", text, re.M | re.S)
    assert body, f"the Dockerfile has no stage {name}"
    return "\n".join(f"{k} {rest}" for k, rest in dockerfile.instructions(body.group(1)))


def mounts(step: str) -> list[dict[str, str]]:
    return [dict(part.partition("=")[::2] for part in m.split(","))
            for m in re.findall(r"--mount=(\S+)", step)]


def compile_step(stage: str) -> str:
    runs = [line for line in stage_text(stage).splitlines() if line.startswith("RUN ")]
    assert len(runs) == 1, f"{stage} has {len(runs)} RUN steps; one compile step each keeps its key its own"
    return runs[0]


def keyed_binds(step: str) -> set[str]:
    return {m.get("source") if "from" not in m else f"from={m['from']}"
            for m in mounts(step) if m.get("type", "bind") not in UNKEYED}


def test_each_compile_step_is_keyed_only_on_what_changes_what_it_makes() -> None:
    """Before: one kernels-build stage declared TE's and apex's args above both steps (an apex bump recompiled TE),
    and both mounted a `planner` stage of the tooling's modules (renaming a Python package recompiled TE, 787 s)."""
    _, stages = dockerfile.parse((ROOT / "Dockerfile").read_text())
    compiling = {s.name for s in stages if "id=compile_jobs" in stage_text(s.name)}
    assert compiling == set(COMPILE_INPUTS), f"compile stages {sorted(compiling)}: give each its row in COMPILE_INPUTS"
    for stage, allowed in COMPILE_INPUTS.items():
        text = stage_text(stage)
        declared = {w.split("=")[0] for line in text.splitlines() if line.startswith("ARG ") for w in line.split()[1:]}
        assert declared == allowed["args"], f"{stage} declares {sorted(declared)}"
        env = " ".join(line for line in text.splitlines() if line.startswith("ENV "))
        assert set(re.findall(r"\$\{?(\w+)", env)) <= allowed["args"], env
        assert keyed_binds(compile_step(stage)) == allowed["binds"], stage
        assert re.search(rf"^FROM builder AS {stage}$", (ROOT / "Dockerfile").read_text(), re.M), stage


def test_the_planner_arrives_as_secrets_that_are_exactly_what_jobs_imports() -> None:
    wanted = {path for path in own_imports("image_build/jobs.py") if not path.endswith("__init__.py")}
    for stage in COMPILE_INPUTS:
        step = compile_step(stage)
        planner = {m["target"].removeprefix(PLANNER) for m in mounts(step) if m.get("target", "").startswith(PLANNER)}
        assert planner == wanted, f"{stage} mounts {sorted(planner)}"
        secret = {m["target"]: m for m in mounts(step) if m.get("type") == "secret" and "target" in m}
        assert all(secret.get(PLANNER + path, {}).get("required") == "true" for path in wanted), stage
        assert secret.get("/mnt/build/compile-jobs.sh", {}).get("required") == "true", stage
        assert "source=src/" not in step and "source=docker/compile-jobs.sh" not in step, stage


def test_bake_passes_every_secret_a_compile_step_requires_from_the_file_it_names() -> None:
    bake = (ROOT / "docker-bake.hcl").read_text()
    common = re.search(r'^target "_common" \{\n(.*?)^\}', bake, re.M | re.S)
    assert common
    passed = dict(re.findall(r'"id=(\w+),src=([^"$]+)"', common.group(1)))
    for stage in COMPILE_INPUTS:
        for m in mounts(compile_step(stage)):
            if m.get("type") == "secret" and m.get("required") == "true":
                source = passed.get(m["id"])
                assert source, f"docker-bake.hcl's _common passes no secret {m['id']}"
                assert (ROOT / source).is_file(), source
                target = m["target"]
                expected = ("src/mcore_images/" + target.removeprefix(PLANNER) if target.startswith(PLANNER)
                            else "docker/" + Path(target).name)
                assert source == expected, (m["id"], source, expected)


def test_the_kernels_layer_installs_the_wheels_of_every_compile_stage() -> None:
    text = stage_text("kernels-build")
    assert {f"COPY --from={stage} /wheels /wheels" for stage in COMPILE_INPUTS} <= set(text.splitlines()), text


def test_every_pip_check_of_a_build_step_is_pip_check_py() -> None:
    """A bare `pip check` fails an aarch64 layer on NVIDIA's sbsa-tagged wheel; docker/pip-check.py judges it."""
    text = (ROOT / "Dockerfile").read_text()
    assert not re.search(r"pip\s+check", text), "call python /mnt/install/pip-check.py (mounted) instead of pip check"
    stage = re.search(r"^FROM scratch AS install-scripts\nCOPY (.+) /$", text, re.M)
    assert stage and "docker/pip-check.py" in stage.group(1).split(), "the install-scripts stage copies pip-check.py"
    runs = [re.match(r"(?:.*\\\n)*.*", chunk).group(0) for chunk in re.split(r"\nRUN ", text)[1:]]  # RUN … to its end
    steps = [step for step in runs if "pip-check.py" in step or "install-lock.sh" in step]
    assert steps and all("--mount=type=bind,from=install-scripts,target=/mnt/install" in step for step in steps)
