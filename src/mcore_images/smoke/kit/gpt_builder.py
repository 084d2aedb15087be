"""The one GPT builder of the smoke and the bench: its TransformerConfig, its decoder spec, its model chunks.

Megatron-LM's own tests build every model through one helper, so that a fix reaches them all. Here two copies
had drifted apart: the bench built its "local" rows from a layer spec, and given only a layer spec,
megatron-core picks the block's final norm itself, Transformer Engine's whenever TE is installed, so a "local"
bench row still ran a TE kernel. Here every model gets a whole decoder block spec whose final norm, under the
local spec, is the norm class of its own layers (never TE's), and ``build`` refuses a local model holding any
TE module. The bridge check builds its models through the bridges (mbridge, Megatron-Bridge); it shares the
dtype names and the TE test from here.

What the programs choose differently (parameter dtype, MoE routing, extra config settings) is an argument;
what must not differ (the spec, sequence parallelism under TE, the loss per token, rope on GPUs) is written
here once. Keyword arguments go through ``releases.supported``, so one builder serves megatron-core 0.13 to
0.19. Imports nothing heavy until called: the host's tests and dry runs read ``SPECS`` and ``DTYPES``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from mcore_images.smoke.kit import transformer_engine as te
from mcore_images.smoke.kit.model_size import ModelSize
from mcore_images.smoke.kit.releases import supported

if TYPE_CHECKING:
    import torch
    from megatron.core.transformer.transformer_config import TransformerConfig

SPECS = ("local", "te")
"""Layer specs: megatron-core's own modules (torch norm, local attention, SequentialMLP), or Transformer
Engine's."""

DTYPES = ("bf16", "fp32")
"""Compute dtypes by the names the command lines take."""


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a name in DTYPES."""
    import torch

    return {"bf16": torch.bfloat16, "fp32": torch.float32}[name]


@dataclasses.dataclass(frozen=True)
class Routing:
    """How the MoE layers route (their sizes are the model's). The smoke and the bench choose differently, and each
    says why where it builds one."""

    dispatcher: str
    load_balancing: str = "none"
    aux_loss_coeff: float = 0.0
    grouped_gemm: bool = False

    def settings(self, size: ModelSize) -> dict[str, Any]:
        return dict(num_moe_experts=size.experts, moe_router_topk=size.topk, moe_ffn_hidden_size=size.moe_ffn,
                    moe_token_dispatcher_type=self.dispatcher, moe_router_load_balancing_type=self.load_balancing,
                    moe_aux_loss_coeff=self.aux_loss_coeff, moe_router_dtype="fp32",
                    moe_grouped_gemm=self.grouped_gemm)


@dataclasses.dataclass(frozen=True)
class Gpt:
    """One small GPT: its sizes, layer spec, math and this run's parallel layout; MoE layers where its size has
    experts, routed as ``routing`` says."""

    size: ModelSize
    spec: str
    cpu: bool
    dtype: str
    params_dtype: str = "fp32"
    routing: Routing | None = None
    tp: int = 1
    pp: int = 1
    vpp: int = 1
    cp: int = 1
    ep: int = 1


def transformer_config(gpt: Gpt, **settings: Any) -> tuple[TransformerConfig, list[str]]:
    """The GPT's TransformerConfig with ``settings`` on top, and the settings this megatron-core does not
    have (left out, so that the caller can name them rather than report a number under them)."""
    import torch.nn.functional as F
    from megatron.core.transformer.transformer_config import TransformerConfig

    size = gpt.size
    if size.moe and gpt.routing is None:
        raise ValueError(f"an MoE model ({size.experts} experts) needs its routing")
    compute = torch_dtype(gpt.dtype)
    known = supported(TransformerConfig, **settings)
    config = TransformerConfig(
        num_layers=size.layers, hidden_size=size.hidden, num_attention_heads=size.heads,
        num_query_groups=size.kv_heads, ffn_hidden_size=size.ffn, gated_linear_unit=size.gated, activation_func=F.silu,
        add_bias_linear=False,  # megatron-core requires it for MoE with expert-TP; kept for dense too
        hidden_dropout=0.0, attention_dropout=0.0,
        tensor_model_parallel_size=gpt.tp, pipeline_model_parallel_size=gpt.pp,
        virtual_pipeline_model_parallel_size=gpt.vpp if gpt.vpp > 1 else None, context_parallel_size=gpt.cp,
        expert_model_parallel_size=gpt.ep, sequence_parallel=gpt.spec == "te" and gpt.tp > 1,
        pipeline_dtype=compute, bf16=gpt.dtype == "bf16", params_dtype=torch_dtype(gpt.params_dtype),
        use_cpu_initialization=gpt.cpu, calculate_per_token_loss=True,
        **(gpt.routing.settings(size) if gpt.routing and size.moe else {}), **known,
    )
    return config, sorted(set(settings) - set(known))


def decoder_spec(config: TransformerConfig, spec: str, vp_stage: int | None = None) -> Any:
    """The decoder block spec of one model chunk. Under the local spec its final norm is the norm its layers
    use (torch's, or apex's fused LayerNorm where apex is installed and the model uses LayerNorm): given only a
    layer spec, megatron-core would pick TE's whenever TE is installed (on CPU it fails; on GPUs it mixes
    specs), and its own block spec keeps apex's LayerNorm for an RMSNorm model."""
    from megatron.core.models.gpt import gpt_layer_specs as specs

    if spec not in SPECS:
        raise ValueError(f"layer spec {spec!r} is not one of {', '.join(SPECS)}")
    block = specs.get_gpt_decoder_block_spec(
        config, use_transformer_engine=spec == "te",
        **supported(specs.get_gpt_decoder_block_spec, normalization=config.normalization, vp_stage=vp_stage))
    if spec != "local":
        return block
    layer = specs.get_gpt_layer_local_spec(**supported(specs.get_gpt_layer_local_spec,
                                                       normalization=config.normalization))
    return dataclasses.replace(block, layer_norm=layer.submodules.input_layernorm)


def build(gpt: Gpt, config: TransformerConfig) -> list[Any]:
    """This rank's GPTModel chunks (one per virtual pipeline stage), on its device, with megatron-core's own
    initialisation. A local-spec chunk that holds a Transformer Engine module is an error."""
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt.gpt_model import GPTModel

    chunks = []
    for vp in range(gpt.vpp):
        stage: dict[str, Any] = {"ignore_virtual": False, "vp_stage": vp} if gpt.vpp > 1 else {}
        model = GPTModel(
            config=config,
            transformer_layer_spec=decoder_spec(config, gpt.spec, vp if gpt.vpp > 1 else None),
            vocab_size=gpt.size.vocab,
            max_sequence_length=gpt.size.seq,
            pre_process=ps.is_pipeline_first_stage(**stage),
            post_process=ps.is_pipeline_last_stage(**stage),
            share_embeddings_and_output_weights=False,
            # rope reads CUDA state in megatron-core; the CPU runs use learned positions instead.
            position_embedding_type="learned_absolute" if gpt.cpu else "rope",
            **({"vp_stage": vp} if gpt.vpp > 1 else {}),
        )
        if gpt.spec == "local" and (found := te_modules(model.named_modules())):
            raise RuntimeError(f"the local spec built Transformer Engine modules: {', '.join(found[:3])}")
        if not gpt.cpu:
            model.cuda()
        chunks.append(model)
    return chunks


def te_modules(named: Iterable[tuple[str, Any]]) -> list[str]:
    """``name (class)`` of every Transformer Engine module among ``named`` (a model's named_modules())."""
    return [f"{name or '(model)'} ({type(mod).__name__})" for name, mod in named if te.is_te_class(type(mod))]


def causal_mask(seq: int, device: Any) -> torch.Tensor:
    """[1, 1, seq, seq], True above the diagonal (masked): megatron's local attention takes the causal mask
    given; TE's causal attention makes its own."""
    import torch

    return torch.triu(torch.ones(seq, seq, dtype=torch.bool), diagonal=1)[None, None].to(device)
