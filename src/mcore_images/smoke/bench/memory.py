"""How much GPU memory one bench row needs, from its shape: the model that sizes ``dense-8b``. Pure Python (no torch).

One GPU, no model parallelism, megatron's mixed precision as the bench trains (bf16 parameters, the gradient buffer
in fp32, the optimizer's fp32 master weights and Adam moments), no activation recomputation, fused (or flash)
attention, so no s×s score matrix is kept. Bytes at the peak of a step, one micro-batch of ``t = micro_batch × seq``
tokens in flight (1F1B on one pipeline stage holds one micro-batch's activations at a time):

    bytes = 18·P + 2·P_linear·[FP8] + L·t·A + t·(10·V + 8·h)

- ``18·P``: every parameter P (``ModelSize.total_params``) as a bf16 weight (2), an fp32 main gradient (4:
  ``grad_reduce_in_fp32``), an fp32 master weight and Adam's two fp32 moments (12). With one data-parallel rank the
  distributed optimizer shards nothing.
- ``2·P_linear`` with FP8: Transformer Engine keeps an FP8 copy of each layer weight and of its transpose (1 + 1
  bytes); embeddings and the output layer stay bf16.
- ``L·t·A``: what each layer keeps for its backward, per token (bf16, 2 bytes an element):
  ``A = 2·(6·h + 2·kv + 3·ffn) + 4·heads + 8`` — the inputs of the two norms, of the QKV projection and of FC1
  (4·h), Q and the attention's output, which is the output projection's input (2·h), K and V (2·kv), FC1's output
  (2·ffn: SwiGLU's two halves) and FC2's input (ffn), the attention's fp32 log-sum-exp per head and the two norms'
  fp32 reciprocal RMS.
- ``t·10·V``: the logits in bf16 (2·V), and in the cross-entropy's fp32 backward their softmax and its gradient
  (4·V + 4·V), the peak of the output layer; ``8·h``: the embedding's output, the final norm's input and output and
  the output layer's input (bf16, 4·h elements).

Not modelled (what ``KEEP_FREE`` is kept for): the CUDA context, cuBLAS/cuDNN workspaces, the allocator's
fragmentation (reserved over allocated), TE's FP8 scaling state, NCCL buffers. The bench records each row's
measured peak beside this prediction (``predicted_peak_gib``), so a GPU run checks the model.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from mcore_images.smoke.kit.model_size import ModelSize

GB = 10**9
GIB = 2**30


@dataclass(frozen=True)
class Gpu:
    """A GPU's memory as its datasheet states it, and the share of it left to what the model does not count."""

    name: str
    bytes: int
    source: str


H200 = Gpu("NVIDIA H200", 141 * GB, "NVIDIA H200 datasheet: 141 GB HBM3e")
KEEP_FREE = 0.10
"""Share of the GPU's memory the layer count leaves unplanned: 14.1 GB of an H200, for what the formula does not
count (above). The first GPU run reads the measured peak against the prediction and tells whether it was enough."""


def linear_params(size: ModelSize) -> int:
    """Parameters of the layers' matrix multiplies (attention and MLP; all experts of an MoE layer)."""
    mlp = size.experts * size.mlp_params(size.moe_ffn) + size.hidden * size.experts if size.moe else size.mlp_params(
        size.ffn)
    return size.layers * (size.attention_params() + mlp)


def activation_bytes_per_token_layer(size: ModelSize) -> int:
    """``A``: bytes one layer keeps per token for its backward (dense MLP; an MoE layer's top-k experts each)."""
    h, kv = size.hidden, size.kv_width
    ffn = size.topk * size.moe_ffn if size.moe else size.ffn
    return 2 * (6 * h + 2 * kv + 3 * ffn) + 4 * size.heads + 8


def terms(size: ModelSize, micro_batch: int, *, fp8: bool = False) -> dict[str, int]:
    """The formula's terms, in bytes, for one row of this shape."""
    tokens = micro_batch * size.seq
    return {
        "weights, gradients, optimizer": 18 * size.total_params(),
        "fp8 weight copies": 2 * linear_params(size) if fp8 else 0,
        "layer activations": size.layers * tokens * activation_bytes_per_token_layer(size),
        "logits and output layer": tokens * (10 * size.vocab + 8 * size.hidden),
    }


def peak_bytes(size: ModelSize, micro_batch: int, *, fp8: bool = False) -> int:
    return sum(terms(size, micro_batch, fp8=fp8).values())


def layers_that_fit(shape: ModelSize, micro_batch: int, gpu: Gpu = H200, keep_free: float = KEEP_FREE, *,
                    fp8: bool = True) -> int:
    """The most layers of ``shape`` (its ``layers`` ignored) whose step fits ``gpu`` with ``keep_free`` of it unused.
    FP8 by default: its weight copies make it the larger of the bf16 and FP8 rows of one config."""
    budget = gpu.bytes * (1 - keep_free)
    layers = 0
    while peak_bytes(replace(shape, layers=layers + 1), micro_batch, fp8=fp8) <= budget:
        layers += 1
    if layers == 0:
        raise ValueError(f"not one layer of this shape fits {gpu.name} with {keep_free:.0%} kept free")
    return layers
