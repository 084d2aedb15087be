"""The one GPT builder: every program builds through it, and the local spec holds no Transformer Engine module.

megatron-core is not on the host, so a small fake of the parts the builder calls stands in for it: its spec
functions (with the final-norm choices megatron-core makes) and a GPTModel that builds what the spec names.
tests/unit/mcore_images/smoke/kit/test_gpt_builder_run.py checks the same with the real megatron-core and TE in an
image.
"""

from __future__ import annotations

import ast
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from mcore_images.smoke.kit import gpt_builder
from mcore_images.smoke.kit import transformer_engine as te
from mcore_images.smoke.kit.model_size import ModelSize
from tests.unit.conftest import ROOT

SMOKE = ROOT / "src" / "mcore_images" / "smoke"
BUILDER = SMOKE / "kit" / "gpt_builder.py"
GPT_CALLS = ("GPTModel", "TransformerConfig", "get_gpt_decoder_block_spec", "get_gpt_layer_local_spec",
             "get_gpt_layer_with_transformer_engine_spec")


def _called(path: Path) -> set[str]:
    """Names of everything ``path`` calls (``f(…)`` and ``a.f(…)`` both as ``f``; ``a.f`` also as ``a.f``)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name):
                out.add(func.id)
            elif isinstance(func, ast.Attribute):
                out.add(func.attr)
                if isinstance(func.value, ast.Name):
                    out.add(f"{func.value.id}.{func.attr}")
    return out


LAYER_ALONE = {SMOKE / "attention" / "compute.py": {"TransformerConfig"}}
"""Configs of one layer, no model: the attention check's DotProductAttention (attention_backend=local)."""


def test_only_the_kit_builds_a_gpt_and_the_smoke_and_the_bench_build_through_it() -> None:
    """Before: the test read the repository's top-level smoke/ (three entry points) and passed on nothing."""
    offenders = [f"{path.relative_to(ROOT)}: {name}" for path in sorted(SMOKE.rglob("*.py"))
                 if path != BUILDER for name in sorted(_called(path) & set(GPT_CALLS) - LAYER_ALONE.get(path, set()))]
    assert any(SMOKE.rglob("train.py")), SMOKE
    assert not offenders, offenders
    for program in ("src/mcore_images/smoke/train.py", "src/mcore_images/smoke/bench/cli.py"):
        assert {"gpt_builder.build", "gpt_builder.transformer_config"} <= _called(ROOT / program), program


# ------------------------------------------------------------------------------------------------ a fake megatron


class TorchNorm:
    """megatron-core's WrappedTorchNorm."""


class ApexLayerNorm:
    """megatron-core's FusedLayerNorm (apex; LayerNorm only)."""


class TENorm:
    pass


class TELayerNormLinear:
    pass


TorchNorm.__module__ = "megatron.core.transformer.torch_norm"
ApexLayerNorm.__module__ = "megatron.core.fusions.fused_layer_norm"
TENorm.__module__ = TELayerNormLinear.__module__ = "megatron.core.extensions.transformer_engine"


@dataclass
class Block:
    """megatron-core's TransformerBlockSubmodules."""

    layer_specs: list[Any] = field(default_factory=list)
    layer_norm: Any = None


@dataclass
class Config:
    normalization: str = "LayerNorm"


class Megatron:
    """The spec functions as megatron-core with TE and apex installed: a layer spec alone gets TE's final norm
    (TransformerBlock's LayerNormImpl), the local block spec apex's LayerNorm whatever the normalization."""

    def __init__(self, layer_norm_in_local_layers: type | None = None) -> None:
        self.calls: list[dict[str, Any]] = []
        self.local_layer_norm = layer_norm_in_local_layers

    def get_gpt_decoder_block_spec(self, config: Any, use_transformer_engine: bool, normalization: str | None = None,
                                   qk_l2_norm: bool = False, vp_stage: int | None = None) -> Block:
        self.calls.append({"use_transformer_engine": use_transformer_engine, "normalization": normalization,
                           "vp_stage": vp_stage})
        if use_transformer_engine:
            return Block([TELayerNormLinear], TENorm)
        return Block([self.get_gpt_layer_local_spec(normalization=normalization).submodules.input_layernorm],
                     ApexLayerNorm)

    def get_gpt_layer_local_spec(self, num_experts: int | None = None, normalization: str | None = None) -> Any:
        norm = self.local_layer_norm or (TorchNorm if normalization == "RMSNorm" else ApexLayerNorm)
        return types.SimpleNamespace(submodules=types.SimpleNamespace(input_layernorm=norm))


class FakeGPTModel:
    """Builds one module of each class the spec names; given a layer spec alone, TE's final norm."""

    def __init__(self, *, config: Any, transformer_layer_spec: Any, **_: Any) -> None:
        block = transformer_layer_spec
        if not isinstance(block, Block):  # a layer spec: megatron-core's TransformerBlock picks the final norm
            block = Block([block.submodules.input_layernorm], TENorm)
        self.modules = [(f"decoder.layers.{i}.input_layernorm", cls()) for i, cls in enumerate(block.layer_specs)]
        self.modules.append(("decoder.final_layernorm", block.layer_norm()))

    def named_modules(self) -> list[tuple[str, Any]]:
        return [("", self), *self.modules]


@pytest.fixture
def megatron(monkeypatch: pytest.MonkeyPatch) -> Megatron:
    fake = Megatron()
    specs = types.ModuleType("megatron.core.models.gpt.gpt_layer_specs")
    specs.get_gpt_decoder_block_spec = fake.get_gpt_decoder_block_spec  # type: ignore[attr-defined]
    specs.get_gpt_layer_local_spec = fake.get_gpt_layer_local_spec  # type: ignore[attr-defined]
    gpt = types.ModuleType("megatron.core.models.gpt")
    gpt.gpt_layer_specs = specs  # type: ignore[attr-defined]
    model = types.ModuleType("megatron.core.models.gpt.gpt_model")
    model.GPTModel = FakeGPTModel  # type: ignore[attr-defined]
    ps = types.ModuleType("megatron.core.parallel_state")
    ps.is_pipeline_first_stage = ps.is_pipeline_last_stage = lambda **_: True  # type: ignore[attr-defined]
    core = types.ModuleType("megatron.core")
    core.parallel_state = ps  # type: ignore[attr-defined]
    for name, module in (("megatron", types.ModuleType("megatron")), ("megatron.core", core),
                         ("megatron.core.parallel_state", ps), ("megatron.core.models", types.ModuleType("m")),
                         ("megatron.core.models.gpt", gpt), ("megatron.core.models.gpt.gpt_layer_specs", specs),
                         ("megatron.core.models.gpt.gpt_model", model)):
        monkeypatch.setitem(sys.modules, name, module)
    return fake


def tiny(spec: str = "local") -> gpt_builder.Gpt:
    return gpt_builder.Gpt(ModelSize(layers=2, hidden=64, heads=4, ffn=128, vocab=256, seq=32), spec=spec, cpu=True,
                           dtype="fp32")


# ---------------------------------------------------------------------------------------------------- the spec


def test_a_layer_spec_alone_would_have_built_tes_final_norm(megatron: Megatron) -> None:
    # What the bench did before: GPTModel given the local layer spec, TE installed.
    model = FakeGPTModel(config=Config(), transformer_layer_spec=megatron.get_gpt_layer_local_spec())
    assert gpt_builder.te_modules(model.named_modules()) == ["decoder.final_layernorm (TENorm)"]


@pytest.mark.parametrize("normalization", ["LayerNorm", "RMSNorm"])
def test_the_local_final_norm_is_the_norm_of_the_local_layers(megatron: Megatron, normalization: str) -> None:
    block = gpt_builder.decoder_spec(Config(normalization), "local")
    layer_norm = TorchNorm if normalization == "RMSNorm" else ApexLayerNorm
    assert block.layer_specs == [layer_norm] and block.layer_norm is layer_norm
    # the layers get the model's normalization (megatron-core's block spec does not read it from the config)
    assert megatron.calls == [{"use_transformer_engine": False, "normalization": normalization, "vp_stage": None}]


def test_the_te_spec_keeps_tes_block(megatron: Megatron) -> None:
    block = gpt_builder.decoder_spec(Config(), "te", vp_stage=1)
    assert block == Block([TELayerNormLinear], TENorm)
    assert megatron.calls == [{"use_transformer_engine": True, "normalization": "LayerNorm", "vp_stage": 1}]


def test_an_unknown_spec_is_refused(megatron: Megatron) -> None:
    with pytest.raises(ValueError, match="layer spec 'fast' is not one of local, te"):
        gpt_builder.decoder_spec(Config(), "fast")


def test_a_release_without_an_option_is_called_without_it(megatron: Megatron, monkeypatch: pytest.MonkeyPatch) -> None:
    def older(config: Any, use_transformer_engine: bool) -> Block:  # a release with neither option
        return Block([ApexLayerNorm], ApexLayerNorm)

    monkeypatch.setattr(sys.modules["megatron.core.models.gpt.gpt_layer_specs"], "get_gpt_decoder_block_spec", older)
    assert gpt_builder.decoder_spec(Config(), "local").layer_norm is ApexLayerNorm


# ---------------------------------------------------------------------------------------------------- the model


def test_the_local_model_holds_no_te_module(megatron: Megatron) -> None:
    (model,) = gpt_builder.build(tiny(), Config())
    assert gpt_builder.te_modules(model.named_modules()) == []
    assert [type(m).__name__ for _, m in model.named_modules()[1:]] == ["ApexLayerNorm", "ApexLayerNorm"]


def test_a_local_model_with_a_te_module_is_an_error(megatron: Megatron) -> None:
    megatron.local_layer_norm = TELayerNormLinear  # a release whose local layers take a TE class
    with pytest.raises(RuntimeError, match=r"the local spec built Transformer Engine modules: decoder\.layers\.0"):
        gpt_builder.build(tiny(), Config())


def test_one_chunk_per_virtual_stage(megatron: Megatron) -> None:
    chunks = gpt_builder.build(gpt_builder.Gpt(**{**tiny().__dict__, "vpp": 2}), Config())
    assert len(chunks) == 2 and [c["vp_stage"] for c in megatron.calls] == [0, 1]


@pytest.mark.parametrize(("module", "is_te"), [
    ("transformer_engine.pytorch.module.layernorm_linear", True),
    ("megatron.core.extensions.transformer_engine", True),
    ("megatron.core.extensions.transformer_engine_spec_provider", False),
    ("transformer_engine_torch", False),
    ("megatron.core.transformer.torch_norm", False),
    ("mcore_images.smoke.bridge.cpu", False),
])
def test_which_classes_are_transformer_engines(module: str, is_te: bool) -> None:
    cls = type("C", (), {"__module__": module})
    assert te.is_te_class(cls) is is_te


def test_the_spec_names_are_the_builders() -> None:
    from mcore_images.smoke import layouts

    assert layouts.SPECS is gpt_builder.SPECS == ("local", "te")
