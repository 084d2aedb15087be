"""The run-time toolchain: what a job compiles at its first step works in the image, on CPU. Triton's
launcher build, torch.compile, megatron-core's jit_fuser fusions, cpp_extension.load_inline,
compile_helpers() and MegatronTokenizer's HF path (tests/image/utils/runtime_paths.py runs each once)."""

from __future__ import annotations

from typing import Any

import pytest
from tests.image.utils import runtime_paths
from tests.image.utils.docker import ImageInfo

WHAT_IT_NEEDS = {
    "triton_launcher": "a C compiler (gcc) and Python.h",
    "torch_compile": "a C++ compiler (g++) and Python.h",
    "jit_fusions": "a C++ compiler (g++) and Python.h (megatron-core's jit_fuser is torch.compile)",
    "load_inline": "ninja, g++ and Python.h",
    "compile_helpers": "make, g++, pybind11 and the datasets Makefile the runtime layer adds",
    "hf_tokenizer": "transformers and tokenizers",
}


TIMEOUT_S = 900
"""What runtime_paths.py may take in all at native speed (torch.compile's first compile is most of it)."""


def run_paths(run: Any, names: list[str], slowdown: float = 1.0) -> dict[str, Any]:
    """runtime_paths.py in the image (testinfra's host.run or alike); ``slowdown`` stretches its time limit for an
    image under QEMU."""
    import json
    from pathlib import Path

    source = Path(runtime_paths.__file__).read_text()
    placeholders = " ".join(["%s"] * len(names))
    result = run(f"cd /tmp && timeout {TIMEOUT_S * slowdown:.0f} python -c %s {placeholders}", source, *names)
    if result.rc != 0:
        raise AssertionError(f"runtime_paths.py failed in the image (exit {result.rc}): {result.stderr[-1500:]}")
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def paths(host: Any, slowdown: float) -> dict[str, Any]:
    return run_paths(host.run, list(runtime_paths.PATHS), slowdown)


@pytest.mark.parametrize("name", list(runtime_paths.PATHS))
def test_runtime_toolchain(name: str, paths: dict[str, Any], image: ImageInfo) -> None:
    got = paths[name]
    assert got["ok"], f"{name} failed in {image.shown} (it needs {WHAT_IT_NEEDS[name]}): {got['error']}"
    print(f"{name}: {got['seconds']} s, {got['result']}")
