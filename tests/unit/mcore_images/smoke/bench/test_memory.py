"""The memory model that sizes dense-8b (smoke/bench/memory.py): its terms by hand, the layer count it computes, and
its predictions against the peaks measured on one H200 (docs/bench.md)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from mcore_images.smoke.bench import memory
from mcore_images.smoke.bench.model import CONFIGS, LLAMA3_8B


def test_the_terms_by_hand_for_one_llama3_8b_layer() -> None:
    size = replace(LLAMA3_8B, layers=1)
    h, kv, ffn, V, s = 4096, 1024, 14336, 128256, 8192
    per_layer = h * (h + 2 * kv) + h * h + 3 * h * ffn + 2 * h
    params = per_layer + 2 * V * h + h
    terms = memory.terms(size, micro_batch=1, fp8=True)
    assert terms["weights, gradients, optimizer"] == 18 * params
    assert terms["fp8 weight copies"] == 2 * (h * (h + 2 * kv) + h * h + 3 * h * ffn)
    assert terms["layer activations"] == s * (2 * (6 * h + 2 * kv + 3 * ffn) + 4 * 32 + 8)
    assert terms["logits and output layer"] == s * (10 * V + 8 * h)
    assert memory.terms(size, 1)["fp8 weight copies"] == 0


def test_dense_8b_has_the_most_layers_that_fit_an_h200_with_a_tenth_free() -> None:
    cfg = CONFIGS["dense-8b"]
    budget = memory.H200.bytes * (1 - memory.KEEP_FREE)
    assert cfg.size.layers == 17 and cfg.micro_batch == 1 and cfg.size.seq == 8192
    assert memory.peak_bytes(cfg.size, 1, fp8=True) <= budget
    assert memory.peak_bytes(replace(cfg.size, layers=18), 1, fp8=True) > budget  # one more does not fit
    assert (cfg.size.hidden, cfg.size.heads, cfg.size.kv_heads, cfg.size.ffn, cfg.size.vocab) == (
        4096, 32, 8, 14336, 128256)


def test_a_shape_of_which_no_layer_fits_is_an_error() -> None:
    with pytest.raises(ValueError, match="not one layer"):
        memory.layers_that_fit(LLAMA3_8B, micro_batch=64)


@pytest.mark.parametrize(("config", "micro_batch", "measured_gib"), [
    # docs/bench.md, H200, megatron-core 0.16.1, TE spec, bf16, `fusions` (megatron's own cross-entropy)
    ("dense-1b", 2, 25.8), ("dense-1b", 1, 21.0), ("dense-1b", 4, 35.5), ("moe-olmoe-4l", 8, 55.0),
])
def test_the_model_bounds_the_measured_peaks_from_above_within_eight_percent(config: str, micro_batch: int,
                                                                            measured_gib: float) -> None:
    """What the model leaves out (workspaces, fragmentation) is in KEEP_FREE, not in a measured peak: it must never
    predict less than was measured, and not so much more that the layer count is wasted."""
    predicted = replace(CONFIGS[config], micro_batch=micro_batch).predicted_peak_gib()
    assert measured_gib <= predicted <= measured_gib * 1.08
