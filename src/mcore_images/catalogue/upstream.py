"""What upstream releases require of each other, each fact once, with where upstream says it.

The compatibility rules (resolve/rules.py) hold a stack's pins to these before a build; the doctor holds an
installed environment to the same numbers. A new upstream fact is one entry here and the rule or check that reads it.
"""

from __future__ import annotations

MCORE_NEW_FLOOR = "0.17"
"""From this megatron-core release on it declares Requires-Python >= MCORE_PYTHON (0.16.1 still allowed 3.10) and
requires torch >= MCORE_TORCH (its Requires-Dist)."""
MCORE_PYTHON = "3.12"
"""The Python megatron-core >= MCORE_NEW_FLOOR declares."""
MCORE_TORCH = "2.6"
"""The torch megatron-core requires (Requires-Dist of megatron-core >= MCORE_NEW_FLOOR)."""
VERL_MCORE = "0.13.0"
"""The oldest megatron-core verl runs on: verl asserts megatron-core >= 0.13.0 on its Megatron path."""
VERL_ENGINE_BRIDGE = "0.9"
"""verl's Megatron engine from this release on asserts use_mbridge: it builds models through Megatron-Bridge (the
default) or mbridge (vanilla_mbridge=True, deprecated), never megatron-core alone (verl 0.9.1:
verl/workers/engine/megatron/transformer_impl.py)."""

MBRIDGE_OLD_NAMES = "0.15.1"
"""The newest mbridge that still compares against ModelType.encoder_and_decoder, which megatron-core MCORE_NEW_FLOOR
removed (building any model fails: verl #6936; 0.16.1 still has it), and reads hf_config.rope_theta, which
transformers 5 moved into rope_parameters."""

TORCH_PYPI_CUDA = {"2.8": "12.8", "2.9": "12.8", "2.11": "13.0"}
"""torch on PyPI is built for one CUDA release per torch minor (the nvidia-* wheels it pins): torch minor → CUDA."""
TE_FIRST_CU13 = "2.9.0"
"""Transformer Engine publishes transformer-engine-cu13 wheels from this release on (PyPI)."""
TE_MIN_CUDNN = {"2.20": "9.12"}
"""TE's extension refuses to compile against older cuDNN headers (a static assertion in its
common/cudnn_min_version.h, first in 2.20.0): the TE release line → the oldest cuDNN it builds with."""
TE_MIN_TORCH = {"2.17": "2.11"}
"""TE's extension includes torch's c10d/symm_mem/nccl_dev_cap.hpp from 2.17.0 on; torch 2.9.0's headers lack it (the
compile fails), torch 2.11.0's have it (2.10 not measured): the TE release line → the oldest torch."""

VERL_PYTHON_BELOW = "3.13"
"""verl 0.9.x declares Requires-Python < 3.13; Megatron-Bridge 0.6.x declares >= 3.12, < 3.13."""
