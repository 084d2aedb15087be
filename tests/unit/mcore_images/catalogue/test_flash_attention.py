"""FlashAttention facts (flash_attention.py) as the rules and the doctor's te.attention read them: what a run's
settings leave TE, and which FlashAttention TE can run for training on which GPU."""

from __future__ import annotations

import pytest

from mcore_images.catalogue import flash_attention as fa
from mcore_images.catalogue.flash_attention import FlashView

FLASH_ONLY = {"NVTE_FLASH_ATTN": "1", "NVTE_FUSED_ATTN": "0", "NVTE_UNFUSED_ATTN": "0"}


@pytest.mark.parametrize(("environ", "allowed"), [
    ({}, (True, True, True)),  # nothing set: TE may use any
    (FLASH_ONLY, (True, False, False)),  # what megatron-core sets for attention_backend=flash
    ({fa.ASKED: "flash"}, (True, False, False)),
    ({fa.ASKED: "auto"}, (True, True, True)),
    ({fa.ASKED: "fused"}, (False, True, False)),
    ({fa.ASKED: "local"}, (False, False, False)),
])
def test_what_a_run_leaves_te(environ: dict[str, str], allowed: tuple[bool, bool, bool]) -> None:
    asked = fa.requested(environ)
    assert asked.allowed == allowed and asked.conflict is None


def test_a_variable_that_disagrees_with_the_backend_is_megatrons_assertion() -> None:
    asked = fa.requested({fa.ASKED: "flash", "NVTE_FUSED_ATTN": "1"})
    assert asked.conflict is not None and "NVTE_FUSED_ATTN=1 does not" in asked.conflict


@pytest.mark.parametrize(("view", "te", "sm", "usable"), [
    (FlashView(), "2.20.2", 90, []),  # nothing installed: attention_backend=flash has no backend
    (FlashView(fa4="4.0.0b36"), "2.20.2", 90, ["FlashAttention 4.0.0b36"]),
    (FlashView(fa4="4.0.0b36"), "2.20.2", 100, ["FlashAttention 4.0.0b36"]),
    (FlashView(fa4="4.0.0b36"), "2.20.2", 80, []),  # TE 2.20 serves FA4 from sm90
    (FlashView(fa4="4.0.0b36"), "2.16.0", 80, []),  # 2.16 selects it on sm80, but it has no backward there
    (FlashView(fa4="4.0.0b36"), "2.6.0", 90, []),  # TE 2.6 does not know FA4
    (FlashView(fa2="2.8.3"), "2.16.0", 80, ["FlashAttention 2.8.3"]),
    (FlashView(fa3="3.0.0"), "2.20.2", 100, []),  # FA3 is sm90 only
    (FlashView(fa4="4.0.0b36"), "2.16.0", None, ["FlashAttention 4.0.0b36"]),  # no GPU: what is installed
])
def test_which_flash_attention_te_can_train_with(view: FlashView, te: str, sm: int | None,
                                                   usable: list[str]) -> None:
    assert fa.flash_usable(view, te, sm) == usable


def test_te_lines_cover_the_stacks_releases() -> None:
    assert fa.te_line("2.16.0").fa4 and not fa.te_line("2.16.0").fa4_import_guarded
    assert fa.te_line("2.20.2").fa4_min_sm == 90 and not fa.te_line("2.6.0").fa4
    assert fa.te_line("1.13.0") is None
