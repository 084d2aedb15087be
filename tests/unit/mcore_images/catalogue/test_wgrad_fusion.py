"""Who provides megatron-core's gradient accumulation fusion: one answer, read the same way by the label, the
image tests, the doctor and the smoke, and the module's own package agreeing with it."""

from __future__ import annotations

import ast
import tomllib
from types import SimpleNamespace

from mcore_images.catalogue import wgrad_fusion
from mcore_images.catalogue.stacks import load_stacks
from tests.unit.conftest import ROOT

PACKAGE = ROOT / "kernels" / "wgrad-fusion"


def test_the_package_is_the_distribution_and_module_the_catalogue_names() -> None:
    project = tomllib.loads((PACKAGE / "pyproject.toml").read_text())
    assert project["project"]["name"] == wgrad_fusion.OURS
    assert project["project"]["dependencies"] == []  # torch and TE come with the image's lower layers
    assert project["tool"]["setuptools"]["py-modules"] == [wgrad_fusion.MODULE]
    tree = ast.parse((PACKAGE / f"{wgrad_fusion.MODULE}.py").read_text())
    assigned = [node for node in tree.body if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)]
    values = {node.targets[0].id: ast.literal_eval(node.value) for node in assigned if node.targets[0].id.isupper()}
    assert values["PROVIDER"] == wgrad_fusion.OURS
    functions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    # what megatron-core's tensor_parallel/layers.py and utils.py call
    assert {"wgrad_gemm_accum_fp32", "wgrad_gemm_accum_fp16"} <= functions


def test_stacks_without_apex_get_this_projects_module_and_the_others_apex() -> None:
    for stack in load_stacks().values():
        want = wgrad_fusion.OURS if stack.apex == "none" else wgrad_fusion.APEX
        assert wgrad_fusion.expected_provider(stack) == want, stack.name
    assert wgrad_fusion.expected_provider(SimpleNamespace(apex="base")) == wgrad_fusion.APEX  # NGC's own apex


def test_provider_is_none_where_the_module_does_not_import() -> None:
    assert wgrad_fusion.provider() is None  # the host has neither apex nor the images' module


def test_the_dockerfile_builds_the_package_only_where_the_stack_has_no_apex() -> None:
    text = (ROOT / "Dockerfile").read_text()
    step = text[text.index("source=kernels/wgrad-fusion"):]
    step = step[: step.index("\n\n")]
    assert 'if [ "${APEX_COMMIT}" = none ]' in step and "-w /wheels /src/wgrad-fusion" in step
    assert "!kernels/wgrad-fusion/" in (ROOT / ".dockerignore").read_text().splitlines()
