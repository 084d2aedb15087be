"""An image's pip constraints hold the certified components (verl and its engine in an app image) and their CUDA
libraries only."""

from __future__ import annotations

from mcore_images.catalogue.constraints import constraints


def test_components_and_cuda_libraries_are_held_and_the_rest_left_free() -> None:
    installed = {"torch": "2.11.0+cu130", "Transformer_Engine_Torch": "2.20.2", "transformer-engine-cu13": "2.20.2",
                 "megatron-core": "0.16.1", "mbridge": "0.15.1", "nvidia-cudnn-cu13": "9.13.0.50", "triton": "3.5.0",
                 "transformers": "4.57.1", "numpy": "2.3.4", "verl": "0.9.1"}
    assert constraints(installed) == [
        "mbridge==0.15.1", "megatron-core==0.16.1", "nvidia-cudnn-cu13==9.13.0.50", "torch==2.11.0+cu130",
        "transformer-engine-cu13==2.20.2", "transformer-engine-torch==2.20.2", "triton==3.5.0", "verl==0.9.1"]
