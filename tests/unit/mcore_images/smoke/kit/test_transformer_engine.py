"""What TE chose, read once (kit.transformer_engine.attention_choice) and named the bench's way and the attention
table's way. TE's module state is stood in for: this host has no TE, and the state is a plain dict in TE."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator

import pytest

from mcore_images.smoke.kit import transformer_engine

STATE_MODULE = "transformer_engine.pytorch.attention.dot_product_attention"


@pytest.fixture
def te_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, object]]:
    """TE's `_attention_backends` as a dict the test fills; every parent package stands in too."""
    state: dict[str, object] = {}
    parts = STATE_MODULE.split(".")
    for depth in range(1, len(parts) + 1):
        module = types.ModuleType(".".join(parts[:depth]))
        module.__path__ = []  # a package, so the next level imports from sys.modules
        monkeypatch.setitem(sys.modules, module.__name__, module)
    sys.modules[STATE_MODULE]._attention_backends = state  # type: ignore[attr-defined]
    yield state


@pytest.mark.parametrize(
    ("chosen", "choice", "bench"),
    [
        ({"use_flash_attention": True, "flash_attention_backend": "4.0.0b36"}, ("flash", "4.0.0b36"),
         "te flash (4.0.0b36)"),
        ({"use_fused_attention": True, "fused_attention_backend": "NVTE_Fused_Attn_Backend.NVTE_F16_arbitrary_seqlen"},
         ("fused", "NVTE_F16_arbitrary_seqlen"), "te fused (NVTE_F16_arbitrary_seqlen)"),
        ({"use_unfused_attention": True}, ("unfused", ""), "te unfused"),
        ({}, None, "te (not selected yet)"),
    ],
)
def test_one_reading_of_the_choice(te_state: dict[str, object], chosen: dict[str, object],
                                   choice: tuple[str, str] | None, bench: str) -> None:
    te_state.update(chosen)
    assert transformer_engine.attention_choice() == choice
    assert transformer_engine.attention_backend("te") == bench


def test_the_local_spec_and_a_te_without_the_state(monkeypatch: pytest.MonkeyPatch) -> None:
    assert transformer_engine.attention_backend("local") == "local (unfused, torch softmax)"
    monkeypatch.setitem(sys.modules, "transformer_engine", None)  # import fails, as on a TE without the state
    assert transformer_engine.attention_backend("te") == "te (backend not readable)"
    with pytest.raises(ImportError):
        transformer_engine.attention_choice()
