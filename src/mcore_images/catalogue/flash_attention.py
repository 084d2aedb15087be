"""Facts about FlashAttention and Transformer Engine: which FlashAttention each TE release accepts and prefers, and
which CuTe DSL release each FlashAttention 4 release runs on. The rules (``te-flash-attn``, ``flash-attn-cutlass``,
``flash-attn-archs``), the doctor's attention check and the image tests read them from here.

Why it matters: megatron-core's ``attention_backend=flash`` (verl's default) sets ``NVTE_FLASH_ATTN=1
NVTE_FUSED_ATTN=0 NVTE_UNFUSED_ATTN=0``, and a TE that then finds no FlashAttention it accepts raises "No dot
product attention backend is available" at the first forward.

Sources (read from each release's own files):
- TE: transformer_engine/pytorch/attention/dot_product_attention/{utils,backends}.py of v2.6, v2.16.0, v2.17.1 (git
  tags) and the 2.20 line (its transformer-engine-cu13 wheel on PyPI). FlashAttention 4 (distribution ``flash-attn-4``,
  module ``flash_attn.cute.interface``) is known to TE from 2.15; 2.16 and 2.17 import it without a guard, so a
  FlashAttention 4 that fails to import breaks ``import transformer_engine.pytorch``; 2.16 and 2.17 let it serve
  sm80, whose backward FlashAttention 4 does not have (it asserts sm90 or newer); 2.20 serves it from sm90 only.
  Among the versions a shape allows, TE picks v4 over v3 over v2, but v3 over v4 on sm90.
- flash-attn-4 (PyPI wheels' METADATA and flash_attn/cute sources): 4.0.0b3 to b15 annotate with
  ``cute.core.ThrMma``, which nvidia-cutlass-dsl removed in 4.6.0 ("module 'cutlass.cute.core' has no attribute
  'ThrMma'"); b16 and newer use ``cute.ThrMma``. b20 to b26 require nvidia-cutlass-dsl==4.6.0.dev0. From 4.6.0
  nvidia-cutlass-dsl always installs its CUDA 12 libraries; its ``cu13`` extra adds the CUDA 13 ones.
  Measured: b36 with nvidia-cutlass-dsl 4.8.1 ran forward and backward under TE 2.20 on an H200, and its output
  was wrong (``MEASURED``); TE's own install hint, ``flash-attn-4==4.0.0b11 nvidia-cutlass-dsl[cu13]``, resolves to
  4.8.1 and fails to import.
- FlashAttention 4 has no dropout (TE then falls back to another backend or has none), serves forward on sm80 to
  sm120 and backward on sm90 to sm120 only.

Standard library only, apart from ``packaging``'s version parsing through versions.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from mcore_images.catalogue.versions import Version, at_least

FA4_DISTRIBUTION = "flash-attn-4"
"""The PyPI distribution TE reads FlashAttention 4's version from."""
CUTLASS_DSL = "nvidia-cutlass-dsl"
"""The CuTe DSL FlashAttention 4 compiles its kernels with at run time."""


@dataclass(frozen=True)
class TeFlashAttention:
    """What one TE release line accepts (``since``: the oldest release of the line)."""

    since: str
    fa2_max: str
    """The newest flash-attn 2.x it accepts (inclusive up to 2.17, exclusive from 2.20)."""
    fa4: bool
    """Whether it knows FlashAttention 4 at all."""
    fa4_min_sm: int
    """The oldest compute capability it lets FlashAttention 4 serve (80: sm80, whose backward FA4 lacks)."""
    fa4_import_guarded: bool
    """Whether a FlashAttention 4 that fails to import leaves TE importable."""


TE_LINES: tuple[TeFlashAttention, ...] = (
    TeFlashAttention("2.6", fa2_max="2.8.1", fa4=False, fa4_min_sm=0, fa4_import_guarded=False),
    TeFlashAttention("2.15", fa2_max="2.8.3", fa4=True, fa4_min_sm=80, fa4_import_guarded=False),
    TeFlashAttention("2.20", fa2_max="2.8.4", fa4=True, fa4_min_sm=90, fa4_import_guarded=True),
)
"""TE release lines, oldest first; a release takes the newest line it has reached."""


def te_line(te: str) -> TeFlashAttention | None:
    """The facts of the TE release ``te`` (None before 2.6, which this table does not cover)."""
    reached = [line for line in TE_LINES if at_least(te, line.since)]
    return reached[-1] if reached else None


@dataclass(frozen=True)
class CutlassRange:
    """The nvidia-cutlass-dsl releases a range of flash-attn-4 releases imports and runs with."""

    fa4_from: str
    fa4_to: str
    cutlass_min: str
    cutlass_below: str | None
    why: str


FA4_CUTLASS: tuple[CutlassRange, ...] = (
    CutlassRange("4.0.0b3", "4.0.0b15", "4.4.2", "4.6.0",
                 "these releases use cute.core.ThrMma, which nvidia-cutlass-dsl 4.6.0 removed"),
    CutlassRange("4.0.0b16", "4.0.0b19", "4.5.2", None, "their own requirement"),
    CutlassRange("4.0.0b20", "4.0.0b26", "4.6.0.dev0", "4.6.0", "they require nvidia-cutlass-dsl==4.6.0.dev0"),
    CutlassRange("4.0.0b27", "4.0.0b99", "4.6.2", None, "their own requirement"),
)
"""flash-attn-4 release ranges (inclusive) and the CuTe DSL each runs with."""


def cutlass_range(fa4: str) -> CutlassRange | None:
    version = Version(fa4)
    return next((r for r in FA4_CUTLASS if Version(r.fa4_from) <= version <= Version(r.fa4_to)), None)


def cutlass_problem(fa4: str, cutlass: str) -> str | None:
    """Why flash-attn-4 ``fa4`` cannot run on nvidia-cutlass-dsl ``cutlass`` (None when it can)."""
    found = cutlass_range(fa4)
    if found is None:
        return f"flash-attn-4 {fa4} is not a release this table knows (4.0.0b3 or newer)"
    version = Version(cutlass)
    if version < Version(found.cutlass_min) or (found.cutlass_below and version >= Version(found.cutlass_below)):
        upper = f", below {found.cutlass_below}" if found.cutlass_below else ""
        return (f"flash-attn-4 {fa4} needs {CUTLASS_DSL} {found.cutlass_min} or newer{upper} ({found.why}); the "
                f"stack has {cutlass}")
    return None


NVTE_VARIABLES = ("NVTE_FLASH_ATTN", "NVTE_FUSED_ATTN", "NVTE_UNFUSED_ATTN")
"""The variables TE reads to allow (1) or forbid (0) each attention backend; unset means allowed."""

MEGATRON_SETS: dict[str, tuple[int, int, int]] = {
    "flash": (1, 0, 0), "fused": (0, 1, 0), "unfused": (0, 0, 1), "local": (0, 0, 0), "auto": (1, 1, 1),
}
"""What megatron-core sets NVTE_VARIABLES to for each ``attention_backend`` (its LanguageModule, 0.13 to 0.19;
``local`` uses megatron's own attention, not TE's). It asserts that a variable already set agrees."""

ASKED = "MCORE_IMAGES_ATTENTION_BACKEND"
"""How `mcore-images doctor --attention-backend NAME` hands the backend megatron-core will be told to its workers."""


@dataclass(frozen=True)
class AttentionRequest:
    """Which TE attention backends a run allows: (flash, fused, unfused), and where that was read."""

    allowed: tuple[bool, bool, bool]
    source: str
    conflict: str | None = None
    """megatron-core's refusal: a variable already set to another value than the backend asks for."""


def requested(environ: Mapping[str, str]) -> AttentionRequest:
    """The backends TE will be allowed: from the ``attention_backend`` handed to the doctor (as megatron-core sets
    them), else from the NVTE variables as set."""
    values = {name: environ.get(name) for name in NVTE_VARIABLES}
    backend = environ.get(ASKED)
    if not backend:
        shown = ", ".join(f"{n}={v}" for n, v in values.items() if v is not None) or "none set"
        flash, fused, unfused = (values[n] != "0" for n in NVTE_VARIABLES)
        return AttentionRequest((flash, fused, unfused), f"NVTE variables ({shown})")
    wanted = dict(zip(NVTE_VARIABLES, MEGATRON_SETS[backend], strict=True))
    clash = [f"{n}={values[n]}" for n, w in wanted.items() if values[n] is not None and values[n] != str(w)]
    conflict = None
    if clash:
        sets = ", ".join(f"{n}={w}" for n, w in wanted.items())
        conflict = (f"megatron-core's attention_backend={backend} sets {sets} and asserts that a variable already "
                    f"set agrees, and {', '.join(clash)} does not")
    flash, fused, unfused = (bool(w) and backend != "local" for w in wanted.values())
    return AttentionRequest((flash, fused, unfused), f"attention_backend={backend}", conflict)


@dataclass(frozen=True)
class FlashView:
    """What TE itself found when it looked for FlashAttention (its FlashAttentionUtils): versions, or None."""

    fa2: str | None = None
    fa3: str | None = None
    fa4: str | None = None


def flash_usable(view: FlashView, te: str, sm: int | None, training: bool = True) -> list[str]:
    """The FlashAttention versions TE can run on a GPU of compute capability ``sm`` (None: no GPU, so judged by
    what is installed alone): FA2 from sm80, FA3 on sm90 only, FA4 from the TE line's floor, and for training
    (its backward) from sm90."""
    line = te_line(te)
    usable = []
    if view.fa2 and (sm is None or sm >= 80):
        usable.append(f"FlashAttention {view.fa2}")
    if view.fa3 and (sm is None or sm == 90):
        usable.append(f"FlashAttention {view.fa3}")
    if view.fa4 and line is not None and line.fa4 and (sm is None or (sm >= line.fa4_min_sm and (
            not training or sm >= 90))):
        usable.append(f"FlashAttention {view.fa4}")
    return usable


WRONG = "wrong"
RIGHT = "right"


@dataclass(frozen=True)
class Measurement:
    """One FlashAttention 4 pair (flash-attn-4 + nvidia-cutlass-dsl) checked against a reference on one GPU
    architecture: forward and backward outputs compared with an attention computed another way."""

    fa4: str
    cutlass: str
    te: str | None
    """The TE release that selected it; None where FlashAttention 4 was called directly (then the verdict holds
    under every TE). A right verdict under TE holds for that TE's release line (``TE_LINES``), where TE's
    FlashAttention integration changes; so does a wrong one once FlashAttention 4 called directly on the same inputs
    was right (``direct``), which puts the fault in TE. Until then a wrong verdict holds under every TE: the pair's
    own kernels are the likelier cause."""
    sm: int
    verdict: str
    """``WRONG`` or ``RIGHT``."""
    max_abs_error: Mapping[str, float]
    """Case → the largest |backend − reference| over the output."""
    reference: str
    control: str
    """What else ran on the same inputs to tell the pair from its surroundings ("not run" where nothing did)."""
    measured: str
    """When and on what, e.g. "2026-12-05, one H200"."""
    note: str = ""
    direct: str | None = None
    """The verdict of FlashAttention 4 called directly (flash_attn.cute.interface) on the same inputs; None: not run."""


MEASURED: tuple[Measurement, ...] = (
    Measurement(
        fa4="4.0.0b36", cutlass="4.8.1", te="2.20.2", sm=90, verdict=WRONG,
        max_abs_error={"MHA sbhd 2x4096x16x128 causal": 3.92, "GQA 32/8 sbhd causal": 4.28,
                       "thd, three packed sequences, causal": 3.70, "GQA thd causal": 3.23},
        reference="torch.nn.functional.scaled_dot_product_attention on the same bf16 inputs (outputs of that size: "
                  "the result has nothing to do with attention)",
        control="not run (cuDNN fused attention on the same inputs, FlashAttention 4 called directly, TE 2.16: the "
                "machine was withdrawn)",
        measured="2026-12-05, one H200, the debian runtime replicated (torch 2.11.0+cu130), "
                 "NVTE_FLASH_ATTN=1 NVTE_FUSED_ATTN=0 NVTE_UNFUSED_ATTN=0",
        note="cutlass-dsl printed `Argument aux_data (position 17) cannot be converted to a JitArgument` for "
             "flash_fwd_sm90 and flash_bwd_sm90",
    ),
)
"""Every FlashAttention 4 pair measured against a reference on a GPU, oldest first."""


def _holds_under(m: Measurement, te: str | None) -> bool:
    """Whether measurement ``m`` speaks for a stack with TE ``te`` (see ``Measurement.te``)."""
    if m.te is None or (m.verdict == WRONG and m.direct != RIGHT):
        return True
    if te is None:
        return False
    line, ours = te_line(m.te), te_line(te)
    return line is not None and line == ours


def measured_wrong(fa4: str, cutlass: str | None, te: str | None, sms: set[int]) -> list[Measurement]:
    """The measurements that found flash-attn-4 ``fa4`` on nvidia-cutlass-dsl ``cutlass`` wrong on one of the
    architectures ``sms``, and speak for TE ``te`` (``Measurement.te``)."""
    return [m for m in MEASURED if m.verdict == WRONG and Version(m.fa4) == Version(fa4) and cutlass is not None
            and Version(m.cutlass) == Version(cutlass) and _holds_under(m, te) and m.sm in sms]
