"""An image's pip constraints hold the certified components (verl and its engine in an app image) and their CUDA
libraries only."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

from mcore_images.catalogue.constraints import constraints
from tests.unit.conftest import PYTHONPATH


def test_components_and_cuda_libraries_are_held_and_the_rest_left_free() -> None:
    installed = {"torch": "2.11.0+cu130", "Transformer_Engine_Torch": "2.20.2", "transformer-engine-cu13": "2.20.2",
                 "megatron-core": "0.16.1", "mbridge": "0.15.1", "nvidia-cudnn-cu13": "9.13.0.50", "triton": "3.5.0",
                 "transformers": "4.57.1", "numpy": "2.3.4", "verl": "0.9.1"}
    assert constraints(installed) == [
        "mbridge==0.15.1", "megatron-core==0.16.1", "nvidia-cudnn-cu13==9.13.0.50", "torch==2.11.0+cu130",
        "transformer-engine-cu13==2.20.2", "transformer-engine-torch==2.20.2", "triton==3.5.0", "verl==0.9.1"]


def test_the_file_names_the_module_that_writes_it() -> None:
    """Before: its first line pointed at mcore_images/constraints.py, a path the module had moved from."""
    done = subprocess.run([sys.executable, "-m", "mcore_images.catalogue.constraints"], capture_output=True, text=True,
                          env={"PYTHONPATH": PYTHONPATH}, timeout=60, check=True)
    header = done.stdout.splitlines()[0]
    module = header.split("`python -m ")[1].rstrip("`")
    assert importlib.util.find_spec(module) is not None and module.endswith(".constraints"), header
