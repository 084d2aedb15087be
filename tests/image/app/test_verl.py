"""verl's Megatron backend in the app image.

megatron-core is found by verl, `verl.models.mcore` imports, verl's own megatron-core version
assertion (>= 0.13.0) holds as verl writes it, and torch is the labelled one and the very one the
runtime image of the same stack holds (the app lock installs with --no-deps: no torch swap).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from packaging.version import Version
from tests.image.utils import docker, probing

from mcore_images.catalogue.images import label
from mcore_images.catalogue.versions import same

MARK = "VERL_PROBE_JSON:"
# Runs inside the image. verl's assertion is read from verl's source and evaluated in that module's
# namespace, so the test follows verl's own wording (packaging's version.parse in 0.9, a string
# comparison in 0.6) instead of a copy of it.
VERL_PROBE = r"""
import importlib, inspect, json, re
out = {}
try:
    from verl.utils.import_utils import is_megatron_core_available
    out["megatron_core_available"] = bool(is_megatron_core_available())
except BaseException as e:
    out["megatron_core_available"] = f"{type(e).__name__}: {e}"[:2000]
try:
    importlib.import_module("verl.models.mcore")
    out["models_mcore"] = "ok"
except BaseException as e:
    out["models_mcore"] = f"{type(e).__name__}: {e}"[:2000]
try:
    import megatron.core as mcore
    out["mcore_version"] = mcore.__version__
    mod = importlib.import_module("verl.models.mcore.model_forward_fused")
    exprs = re.findall(r'assert\s+(.+?"0\.13\.0"\)?)\s*,', inspect.getsource(mod))
    out["assertions"] = [{"expr": x, "holds": bool(eval(x, vars(mod)))} for x in exprs]
except BaseException as e:
    out["assertion_error"] = f"{type(e).__name__}: {e}"[:2000]
import torch
out["torch"] = torch.__version__
print("VERL_PROBE_JSON:" + json.dumps(out))
"""


@pytest.fixture(scope="module")
def verl_facts(host: Any) -> dict[str, Any]:
    result = host.run("cd /workspace 2>/dev/null; timeout 600 python -c %s", VERL_PROBE)
    lines = [line for line in result.stdout.splitlines() if line.startswith(MARK)]
    if result.rc != 0 or not lines:
        pytest.fail(
            f"the verl probe failed in the image (exit {result.rc}): {(result.stdout + result.stderr).strip()[-3000:]}"
        )
    return json.loads(lines[-1][len(MARK) :])


def test_verl_finds_megatron_core(verl_facts: dict[str, Any]) -> None:
    assert verl_facts["megatron_core_available"] is True, (
        f"verl.utils.import_utils.is_megatron_core_available() gave {verl_facts['megatron_core_available']!r}"
    )


def test_verl_models_mcore_imports(verl_facts: dict[str, Any]) -> None:
    assert verl_facts["models_mcore"] == "ok", f"import verl.models.mcore: {verl_facts['models_mcore']}"


def test_verl_mcore_version_assertion_holds(verl_facts: dict[str, Any]) -> None:
    assert "assertion_error" not in verl_facts, verl_facts["assertion_error"]
    assert verl_facts["assertions"], (
        "no megatron-core >= 0.13.0 assertion found in "
        "verl.models.mcore.model_forward_fused: verl changed; update this test"
    )
    failed = [a["expr"] for a in verl_facts["assertions"] if not a["holds"]]
    assert not failed, f"verl's assertion(s) {failed} fail with megatron-core {verl_facts['mcore_version']}"
    assert Version(Version(verl_facts["mcore_version"]).base_version) >= Version("0.13.0")


def test_torch_is_the_labelled_one(labels: dict[str, str], facts: dict[str, Any], verl_facts: dict[str, Any]) -> None:
    pinned = labels.get(label("torch"))
    assert pinned, "label io.mcore-images.torch is missing"
    have = probing.installed(facts, "torch")
    assert have and same(pinned, have), f"io.mcore-images.torch={pinned} but torch {have} is installed"
    assert same(have, verl_facts["torch"]), f"torch imports as {verl_facts['torch']} but {have} is installed"


def test_torch_unchanged_since_the_runtime_image(
    image: docker.ImageInfo, runtime_image: docker.ImageInfo, runtime_torch: dict[str, Any], facts: dict[str, Any]
) -> None:
    ours = facts["dists"].get("torch")
    assert ours, "torch is not installed in the app image"
    assert ours["version"] == runtime_torch["version"], (
        f"torch {ours['version']} here, {runtime_torch['version']} in {runtime_image.ref}: the app layer swapped it"
    )
    if runtime_image.layers != image.layers[: len(runtime_image.layers)]:
        pytest.skip(
            f"{runtime_image.ref} is not this image's parent build (its layers differ): versions match; "
            "rebuild both to compare the installed files"
        )
    assert ours["record_sha256"] == runtime_torch["record_sha256"], (
        f"torch {ours['version']}'s RECORD differs from {runtime_image.ref}'s: the app layer reinstalled it"
    )
