"""The Dockerfile held to the catalogue (dockerfile.py, run by `make validate`): the checkout's is clean, and each
way of drifting from the catalogue is one line naming the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcore_images.image_build import bake_file, dockerfile
from tests.unit.conftest import ROOT

TEXT = (ROOT / "Dockerfile").read_text()
SETTINGS = list(bake_file.SETTINGS)


def problems(text: str, settings: list[str] | None = SETTINGS) -> list[str]:
    global_args, stages = dockerfile.parse(text)
    return dockerfile.edge_problems(global_args, stages, settings or [])


def edit(old: str, new: str) -> str:
    assert TEXT.count(old) == 1, old
    return TEXT.replace(old, new)


def test_the_checkouts_dockerfile_follows_the_catalogue() -> None:
    assert SETTINGS == ["STACK", "LAYERS_STACK", "FLAVOR", "BASE_IMAGE", "TE_SOURCE", "CUDA_ARCHS"]
    assert dockerfile.problems(ROOT) == []


def test_stages_belong_to_the_lowest_layer_that_builds_on_them() -> None:
    layers = dockerfile.layer_of(dockerfile.parse(TEXT)[1])
    assert {name: layers[name] for name in ("os-debian", "os-ngc", "builder", "kernels-build", "te-build",
                                            "apex-build", "cross-gxx", "cross-gxx-toolchain", "tooling-build",
                                            "app")} == {
        "os-debian": "base", "os-ngc": "base", "builder": "kernels", "kernels-build": "kernels",
        "te-build": "kernels", "apex-build": "kernels", "cross-gxx": "kernels", "cross-gxx-toolchain": "kernels",
        "tooling-build": "runtime", "app": "app"}


def test_a_from_may_read_buildkits_platform_args_and_no_other_undeclared_one() -> None:
    picked = "FROM cross-gxx-${TARGETARCH}-on-${BUILDARCH} AS cross-gxx\n"
    assert problems(TEXT) == [] and picked in TEXT
    assert problems(edit(picked, picked.replace("${BUILDARCH}", "${HOST_ARCH}"))) == [
        "Dockerfile stage cross-gxx: its FROM reads ${HOST_ARCH}, which only an ARG before the first FROM sets; add "
        "`ARG HOST_ARCH` there"]


KERNELS_ARGS = "FROM base AS kernels\nARG LAYERS_STACK\nARG TE_VERSION\n"


@pytest.mark.parametrize(("text", "problem"), [
    (edit(KERNELS_ARGS, "FROM base AS kernels\nARG LAYERS_STACK\n"),
     "Dockerfile stage kernels reads ${TE_VERSION} but does not declare it (it expands to ''); add `ARG TE_VERSION` "
     "to the stage"),
    (edit(KERNELS_ARGS, KERNELS_ARGS + "ARG VERL_VERSION\n"),
     "Dockerfile stage kernels (kernels layer) declares ARG VERL_VERSION, verl's pin of the app layer: every bump "
     "would rebuild the kernels layer; declare it from the app layer up"),
    (edit(KERNELS_ARGS, KERNELS_ARGS + "ARG TE_COMMIT\n"),
     "Dockerfile stage kernels: ARG TE_COMMIT is not a build arg bake passes; name it as a component's build_arg in "
     "components.py (or a setting in bake_file.py's SETTINGS), or drop the ARG"),
    (edit(' \\\n && /mnt/build/check-version.sh transformer-engine "${TE_VERSION}"', ""),
     'Dockerfile stage kernels does not check TE\'s release: add `/mnt/build/check-version.sh transformer-engine '
     '"${TE_VERSION}"` to its install step'),
    (edit('check-version.sh megatron-core "${MCORE_VERSION}"', 'check-version.sh megatron_core "${MCORE_VERSION}"'),
     'Dockerfile stage runtime: check-version.sh megatron_core "${MCORE_VERSION}" names no component'),
    (edit("ARG GCC_VERSION\n", ""), "Dockerfile: bake passes GCC_VERSION (components.py's gcc) but no stage "
     "declares it; add `ARG GCC_VERSION` to the stage that reads it, or drop it there"),
    (edit("ARG FLAVOR=debian\n", ""), "Dockerfile stage base: its FROM reads ${FLAVOR}, which only an ARG before "
     "the first FROM sets; add `ARG FLAVOR` there"),
    (edit("ENV NVIDIA_VISIBLE_DEVICES=all \\\n    NVIDIA_DRIVER_CAPABILITIES=compute,utility \\\n    "
          "NVIDIA_REQUIRE_CUDA=cuda>=${CUDA_VERSION}\n", "")
     .replace("ARG CUDA_VERSION\nARG TE_VERSION", "ARG TE_VERSION").replace('"${CUDA_VERSION%%.*}"', "12"),
     "Dockerfile: no stage of the base layer reads CUDA_VERSION (CUDA); read it where the layer installs or checks "
     "it, or drop build_arg from components.py"),
])
def test_each_drift_is_one_line_naming_the_fix(text: str, problem: str) -> None:
    found = problems(text)
    assert any(p.startswith(problem) for p in found), found


def test_a_setting_bake_passes_must_be_declared() -> None:
    assert problems(TEXT, [*SETTINGS, "NEW_SETTING"]) == [
        "Dockerfile: bake passes NEW_SETTING (bake_file.py's SETTINGS) but no stage declares it; add "
        "`ARG NEW_SETTING` to the stage that reads it, or drop it there"]


def test_a_setting_may_not_take_a_components_build_arg() -> None:
    assert problems(TEXT, [*SETTINGS, "TE_VERSION"]) == [
        "bake_file.py: SETTINGS names TE_VERSION, and bake passes it as te's build_arg too (the "
        "catalogue's would win); rename one of them"]


def test_a_missing_dockerfile_is_named(tmp_path: Path) -> None:
    assert dockerfile.problems(tmp_path) == ["Dockerfile is missing; restore it from git"]
    (tmp_path / "Dockerfile").write_text(TEXT)

