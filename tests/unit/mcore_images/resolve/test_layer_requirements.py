"""What each layer requires: the components' pins, what runs undeclared, what a numpy-1 verl needs."""

from __future__ import annotations

from mcore_images.catalogue.stacks import Stack
from mcore_images.resolve import layer_requirements


def test_layer_inputs_follow_the_pins(debian: Stack) -> None:
    inputs = layer_requirements.layer_inputs(debian, ["torch>=2.1", "einops", "transformer_engine_cu13==2.20.2"])
    assert inputs["base"] == [f"torch=={debian.torch}"]
    assert f"megatron-core[mlm]=={debian.mcore}" in inputs["runtime"]
    assert set(layer_requirements.UNDECLARED_RUNTIME) <= set(inputs["runtime"])
    assert "einops" in inputs["kernels"]
    assert not any(r.startswith("torch") for r in inputs["kernels"])
    assert all(r.endswith(f"=={debian.cuda}.*") for r in inputs["builder"] if r.startswith("nvidia-"))


def test_a_numpy1_verl_app_caps_pyarrow() -> None:
    """verl < 0.9 pins numpy < 2; pyarrow >= 26 does not import with it (Ray's actors import pyarrow)."""
    from mcore_images.catalogue.stacks import get_stack
    numpy1 = layer_requirements.layer_inputs(get_stack("debian-verl"))["app"]
    assert set(layer_requirements.UNDECLARED_APP_NUMPY1) <= set(numpy1)
    numpy2 = layer_requirements.layer_inputs(get_stack("ngc"))["app"]  # verl 0.9.1
    assert not set(layer_requirements.UNDECLARED_APP_NUMPY1) & set(numpy2)
