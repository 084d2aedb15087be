"""The bridge checks (src/mcore_images/doctor/checks_bridge.py) made to fail and made to pass in the fake world of
world.py: mbridge / Megatron-Bridge: importable, agreeing with megatron-core, knowing the Hugging Face model."""

from __future__ import annotations

import sys

from mcore_images.doctor.model import Status
from tests.unit.mcore_images.doctor.world import World, status

MBRIDGE_UTIL = """
from megatron.core.enums import ModelType
def get_model(model_type=None):
    if model_type == ModelType.encoder_and_decoder:
        pass
"""


MBRIDGE_BRIDGE = """
_MODEL_REGISTRY = {}
def register_model(types):
    types = [types] if isinstance(types, str) else types
    def deco(cls):
        for t in types:
            _MODEL_REGISTRY[t] = cls
        return cls
    return deco
"""


MBRIDGE_MODELS = """
from mbridge.core.bridge import register_model
@register_model("qwen2")
class Qwen2Bridge: pass
@register_model(["llama", "mistral"])
class LlamaBridge: pass
"""


def fake_mbridge(world: World, version: str = "0.15.1", init: str = "from mbridge import models\n") -> None:
    world.package(
        "mbridge",
        {
            "__init__.py": init,
            "core/__init__.py": "",
            "core/bridge.py": MBRIDGE_BRIDGE,
            "core/util.py": MBRIDGE_UTIL,
            "models.py": MBRIDGE_MODELS,
        },
    )
    world.dist("mbridge", version)


def test_bridge_missing_is_the_seed_error(world: World) -> None:
    found = world.run("bridge.import")
    assert found.status == Status.WARN and "Megatron-Bridge package not found" in found.finding
    assert "pip install mbridge" in found.fix and "megatron-bridge" in found.fix


def test_bridge_import(world: World) -> None:
    fake_mbridge(world, init="raise ImportError('cannot import name GPTModel')")
    assert status(world, "bridge.import") == Status.FAIL
    sys.modules.pop("mbridge", None)
    fake_mbridge(world, init="import transformers_not_here")
    found = world.run("bridge.import")
    assert found.status == Status.FAIL and found.fix.startswith("pip install transformers_not_here")
    sys.modules.pop("mbridge", None)
    fake_mbridge(world)
    found = world.run("bridge.import")
    assert found.status == Status.OK and "mbridge 0.15.1" in found.finding


def test_bridge_mcore_compat(world: World) -> None:
    fake_mbridge(world)
    assert status(world, "bridge.mcore-compat") == Status.SKIP  # no megatron-core
    world.megatron("0.17.1", enums="import enum\nclass ModelType(enum.Enum):\n    encoder_or_decoder = 1\n")
    found = world.run("bridge.mcore-compat")
    assert found.status == Status.FAIL and "encoder_and_decoder" in found.finding
    assert found.details["method"].startswith("hasattr")  # asked the attribute, not the version


def test_bridge_mcore_compat_ok(world: World) -> None:
    fake_mbridge(world)
    world.megatron(
        "0.16.1",
        enums="import enum\nclass ModelType(enum.Enum):\n    encoder_or_decoder = 1\n"
        "    encoder_and_decoder = 2\n",
    )
    assert status(world, "bridge.mcore-compat") == Status.OK


def hf_config(world: World, arch: str, model_type: str) -> None:
    path = world.tmp / "model"
    path.mkdir(exist_ok=True)
    path.joinpath("config.json").write_text(f'{{"architectures": ["{arch}"], "model_type": "{model_type}"}}')
    world.hf_config = path


def test_hf_config_unsupported_architecture_is_the_seed_error(world: World) -> None:
    assert status(world, "bridge.hf-config") == Status.SKIP  # no --hf-config
    hf_config(world, "FooForCausalLM", "foo")
    assert "Megatron-Bridge package not found" in world.run("bridge.hf-config").finding
    fake_mbridge(world)
    world.megatron("0.16.1")
    found = world.run("bridge.hf-config")
    assert found.status == Status.FAIL and "config conversion will fail" in found.finding
    assert "check model architecture compatibility" in found.fix
    assert found.details["mbridge"]["method"] == "mbridge.core.bridge._MODEL_REGISTRY"


def test_hf_config_supported_by_mbridge(world: World) -> None:
    fake_mbridge(world, init="raise ImportError('no transformers')")  # registry read from the source
    hf_config(world, "MistralForCausalLM", "mistral")
    found = world.run("bridge.hf-config")
    assert found.status == Status.OK and "mistral" in found.finding
    assert "decorators read" in found.details["mbridge"]["method"]


def test_hf_config_supported_by_megatron_bridge(world: World) -> None:
    world.package(
        "megatron.bridge",
        {
            "models/__init__.py": "",
            "models/llama.py": """
        from transformers import LlamaForCausalLM
        try:
            from transformers import Qwen3_5ForConditionalGeneration as _Q35
        except ImportError:
            _Q35 = "Qwen3_5ForConditionalGeneration"
        @MegatronModelBridge.register_bridge(source=LlamaForCausalLM, target=GPTModel)
        class LlamaBridge: pass
        @MegatronModelBridge.register_bridge(source=_Q35, target=GPTModel)
        class Q35Bridge: pass
        @MegatronModelBridge.register_bridge(source="DeepseekV3ForCausalLM", target=GPTModel)
        class DSBridge: pass
    """,
        },
    )
    for arch in ("LlamaForCausalLM", "Qwen3_5ForConditionalGeneration", "DeepseekV3ForCausalLM"):
        hf_config(world, arch, "x")
        assert status(world, "bridge.hf-config") == Status.OK, arch
    hf_config(world, "MambaForCausalLM", "mamba")
    assert status(world, "bridge.hf-config") == Status.FAIL


def test_bridge_mcore_compat_read_from_source_when_megatron_does_not_import(world: World) -> None:
    """megatron-core 0.16.1 keeps encoder_and_decoder as a deprecated property; 0.17.1 drops it."""
    fake_mbridge(world)
    broken = "raise ModuleNotFoundError(\"No module named 'torch'\")"
    deprecated = (
        "import enum\nclass ModelType(enum.Enum):\n    encoder_or_decoder = 1\n"
        "    @property\n    def encoder_and_decoder(self):\n        raise ValueError('deprecated')\n"
    )
    world.megatron("0.16.1", init=broken, enums=deprecated)
    found = world.run("bridge.mcore-compat")
    assert found.status == Status.OK and found.details["method"].startswith("read ")
    world.megatron(
        "0.17.1", init=broken, enums="import enum\nclass ModelType(enum.Enum):\n    encoder_or_decoder = 1\n"
    )
    assert status(world, "bridge.mcore-compat") == Status.FAIL


def test_hf_config_after_a_partial_mbridge_import_reads_the_source(world: World) -> None:
    """`import mbridge` that dies half-way leaves a half-filled registry in sys.modules: not trusted."""
    fake_mbridge(
        world,
        init="from mbridge.core import bridge\nbridge.register_model('early')(object)\n"
        "raise ModuleNotFoundError(\"No module named 'einops'\")\n",
    )
    hf_config(world, "MistralForCausalLM", "mistral")
    world.run("bridge.import")  # leaves mbridge.core.bridge imported with only 'early' registered
    found = world.run("bridge.hf-config")
    assert found.status == Status.OK and "decorators read" in found.details["mbridge"]["method"]


def test_bridge_without_a_version(world: World) -> None:
    world.package("mbridge")  # a copy on sys.path without dist-info or __version__
    found = world.run("bridge.import")
    assert found.status == Status.WARN and "has no version" in found.finding
    assert found.fix == "reinstall it: pip install --force-reinstall mbridge"
