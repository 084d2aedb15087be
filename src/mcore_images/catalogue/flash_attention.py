"""Facts about FlashAttention and Transformer Engine: which FlashAttention each TE release accepts and prefers, and
which CuTe DSL release each FlashAttention 4 release runs on, and what was measured of them on GPUs. The rules
(``te-flash-attn``, ``flash-attn-cutlass``, ``flash-attn-archs``, ``flash-attn-measured``), the doctor's attention
check, the image tests and the smoke's attention check read them from here.

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
  TE's own install hint, ``flash-attn-4==4.0.0b11 nvidia-cutlass-dsl[cu13]``, resolves to 4.8.1 and fails to import.
- Measured on an H200 (``MEASURED``, docs/measurements/): FlashAttention 4 b36 and b40 on nvidia-cutlass-dsl 4.8.1
  called directly were right; TE 2.20.2's flash backend, which selected them, was wrong in every case. ``judge``
  says what that means for a pair under a TE release; the rule flash-attn-measured, the doctor's te.attention and
  the certificate's attention section read it from there.
- FlashAttention 4 has no dropout (TE then falls back to another backend or has none), serves forward on sm80 to
  sm120 and backward on sm90 to sm120 only.

Standard library only, apart from ``packaging``'s version parsing through versions.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from mcore_images.catalogue.versions import Version, at_least, major_minor

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
MEASURE_SCRIPT = ".ci/gpu/attention-pairs.sh"
"""The GPU script that measures TE releases and FlashAttention 4 pairs by name (``pair_name``)."""


@dataclass(frozen=True)
class Half:
    """One half of a measurement: the cases it ran, how many were wrong, and the lowest and highest largest
    |out - reference| over them."""

    cases: int
    wrong: int
    out_error: tuple[float, float]

    @property
    def verdict(self) -> str:
        return WRONG if self.wrong else RIGHT


def _verdict(half: Half | None) -> str | None:
    return half.verdict if half else None


@dataclass(frozen=True)
class Measurement:
    """One FlashAttention 4 pair (flash-attn-4 + nvidia-cutlass-dsl) on one GPU architecture against an fp32
    reference (out, dq, dk, dv; kit.numerics.attention's tolerance), in two halves on the same inputs: called directly
    (``direct``: flash_attn.cute.interface, the pair's own kernels) and through the flash backend of TE ``te``
    (``through_te``: DotProductAttention under the variables megatron-core sets for attention_backend=flash). The
    halves tell a fault of FlashAttention 4 from one of TE's integration; a half not run is None."""

    fa4: str
    cutlass: str
    te: str | None
    sm: int
    direct: Half | None
    through_te: Half | None
    out_limit: tuple[float, float]
    """The lowest and highest limit on the out error over the cases."""
    date: str
    setting: str
    """The machine and what differs from an image (host Python and torch)."""
    command: str
    evidence: str
    """The attention section the check wrote, in this repository."""
    note: str = ""

    def record(self) -> dict[str, object]:
        """The measurement as a certificate names it."""
        return {"fa4": self.fa4, "cutlass": self.cutlass, "te": self.te, "sm": self.sm, "date": self.date,
                "direct": _verdict(self.direct), "through_te": _verdict(self.through_te), "evidence": self.evidence,
                "command": self.command}


_SETTING = ("one H200 (driver 580.159), host Python 3.12.3, torch 2.11.0+cu130, cuDNN 9.19.0; TE's extension compiled "
            "there against that torch")
_COMMAND = ('PAIR_SET="te2.20-b36-c4.8.1 te2.20-b40-c4.8.1" bash .ci/gpu/attention-pairs.sh: prepare, stash x 9, '
            "install, check each pair, table (at 50d7c45)")
_EVIDENCE = "docs/measurements/2026-12-06-attention-pairs"
_ZEROS = ("every tensor's error through TE equals the reference's largest value (out, dq, dk, dv alike): what TE "
          "returned is consistent with zeros, a kind of defect TE has fixed before on sm_100 (TransformerEngine #3528)")

MEASURED: tuple[Measurement, ...] = (
    Measurement(
        fa4="4.0.0b36", cutlass="4.8.1", te="2.20.2", sm=90,
        direct=Half(12, 0, (7.74e-3, 9.60e-3)), through_te=Half(12, 12, (2.95, 3.91)), out_limit=(7.48e-2, 9.33e-2),
        date="2026-12-06", setting=_SETTING, command=_COMMAND, evidence=f"{_EVIDENCE}/te2.20-b36-c4.8.1.json",
        note=f"{_ZEROS}. It repeats the 2026-12-05 run of this pair (SDPA as the reference, no control: out errors 3.2 "
             "to 4.3, cutlass-dsl warning `Argument aux_data (position 17) cannot be converted to a JitArgument` for "
             "flash_fwd_sm90 and flash_bwd_sm90)",
    ),
    Measurement(
        fa4="4.0.0b40", cutlass="4.8.1", te="2.20.2", sm=90,
        direct=Half(4, 0, (8.16e-3, 9.17e-3)), through_te=Half(4, 4, (3.75, 3.91)), out_limit=(8.41e-2, 9.33e-2),
        date="2026-12-06", setting=_SETTING, command=_COMMAND, evidence=f"{_EVIDENCE}/te2.20-b40-c4.8.1.json",
        note=f"the four shapes of the first measurement (--quick); {_ZEROS}",
    ),
)
"""Every FlashAttention 4 pair measured against a reference on a GPU, oldest first. Not a measurement: flash-attn-4
4.0.0b11 with nvidia-cutlass-dsl 4.5.2 on the same day (te2.20-b11-c4.5.2.json there) imported neither half, because
the site carried quack-kernels 0.6.5, which needs cutlass-dsl 4.7 or newer (`cannot import name 'Vector' from
'cutlass.base_dsl.typing'`); b11 itself does not import that name, and with its own needs (quack-kernels 0.5.0) that
pair is still to be measured."""


def series(te: str) -> str:
    """TE's release series ('2.20.2' -> '2.20'): TE changes how it calls FlashAttention between series and fixes it
    in patch releases, so a measurement of one release speaks for its series until a later patch is measured."""
    return major_minor(te)


def pair_name(te: str, fa4: str, cutlass: str) -> str:
    """A pair as MEASURE_SCRIPT takes it: te2.21.0-b40-c4.8.1 (flash-attn-4 4.0.0b40), te2.21.0-fa4.1.0-c4.9.0."""
    beta = f"b{fa4.removeprefix('4.0.0b')}" if fa4.startswith("4.0.0b") and fa4[6:].isdigit() else f"fa{fa4}"
    return f"te{te}-{beta}-c{cutlass}"


def measure_command(te: str) -> str:
    """The one command that starts measuring TE ``te``: every pair FlashAttention 4 called directly was right with."""
    pairs = sorted({(m.fa4, m.cutlass) for m in MEASURED if _verdict(m.direct) == RIGHT},
                   key=lambda p: (Version(p[0]), Version(p[1])))
    names = " ".join(pair_name(te, fa4, cutlass) for fa4, cutlass in pairs)
    return f'PAIR_SET="{names}" bash {MEASURE_SCRIPT} prepare'


@dataclass(frozen=True)
class Judgement:
    """What the measurements say of a FlashAttention 4 pair under a TE release on one GPU architecture."""

    verdict: str | None
    """``WRONG``, ``RIGHT`` or None (no measurement speaks for it)."""
    why: str
    rests_on: tuple[Measurement, ...] = ()


def _same(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and Version(a) == Version(b)


def _speaking_release(te: str, sm: int) -> str | None:
    """The measured TE release that speaks for TE ``te``'s flash backend on ``sm``: in its series, the newest
    measured at or below ``te``, else the oldest measured above it."""
    releases = sorted({Version(m.te) for m in MEASURED if m.te and m.through_te and m.sm == sm
                       and series(m.te) == series(te)})
    below = [r for r in releases if r <= Version(te)]
    chosen = below[-1] if below else (releases[0] if releases else None)
    return None if chosen is None else str(chosen)


def _pairs(found: list[Measurement]) -> str:
    fa4 = " and ".join(sorted({m.fa4 for m in found}, key=Version))
    dsl = " and ".join(sorted({m.cutlass for m in found}, key=Version))
    return f"flash-attn-4 {fa4} on {CUTLASS_DSL} {dsl}"


def judge(fa4: str | None, cutlass: str | None, te: str | None, sm: int) -> Judgement:
    """The verdict on flash-attn-4 ``fa4`` + nvidia-cutlass-dsl ``cutlass`` under TE ``te``'s flash backend on
    ``sm`` (``fa4`` None: any FlashAttention 4; ``te`` None: called directly). A pair wrong called directly is
    wrong under every TE, and so is one wrong through TE that was not also called directly (the fault may be its
    own). A TE release whose flash backend was wrong while FlashAttention 4 called directly was right on the same
    inputs is wrong with every pair, unless that very pair was measured right under it: the fault is TE's."""
    pair = [m for m in MEASURED if m.sm == sm and _same(m.fa4, fa4) and _same(m.cutlass, cutlass)]
    own = [m for m in pair if _verdict(m.direct) == WRONG or (m.direct is None and _verdict(m.through_te) == WRONG)]
    if own:
        m = own[0]
        how = "called directly" if m.direct else f"under TE {m.te}, not also called directly (so under every TE)"
        return Judgement(WRONG, f"{_pairs(own)} was measured wrong on sm_{sm} {how} ({m.date}, {m.evidence})",
                         tuple(own))
    if te is None:
        right = [m for m in pair if m.direct]
        return Judgement(RIGHT, f"{_pairs(right)} called directly was measured right on sm_{sm}", tuple(right)) \
            if right else Judgement(None, "FlashAttention 4 called directly has no measurement there")
    release = _speaking_release(te, sm)
    if release is None:
        return Judgement(None, f"TE {series(te)}.x's flash backend has no measurement with FlashAttention 4 there")
    at = [m for m in MEASURED if _same(m.te, release) and m.sm == sm and m.through_te]
    exact = [m for m in at if m in pair]
    if exact and not any(_verdict(m.through_te) == WRONG for m in exact):
        return Judgement(RIGHT, f"{_pairs(exact)} under TE {release} was measured right on sm_{sm}", tuple(exact))
    blamed = [m for m in at if _verdict(m.through_te) == WRONG and _verdict(m.direct) == RIGHT]
    if blamed:
        low = min(m.through_te.out_error[0] for m in blamed if m.through_te)
        high = max(m.through_te.out_error[1] for m in blamed if m.through_te)
        limits = min(m.out_limit[0] for m in blamed), max(m.out_limit[1] for m in blamed)
        evidence = sorted({m.evidence.rsplit("/", 1)[0] for m in blamed})
        return Judgement(WRONG, (
            f"TE {release}'s flash backend, which selects FlashAttention 4, was measured wrong on sm_{sm} "
            f"({blamed[0].date}: every case of {_pairs(blamed)}, out error {low:.3g} to {high:.3g} against limits of "
            f"{limits[0]:.3g} to {limits[1]:.3g}), and FlashAttention 4 called directly on the same inputs was right: "
            f"the fault is TE {series(release)}'s integration, not FlashAttention 4 ({', '.join(evidence)})"),
            tuple(blamed))
    return Judgement(None, f"TE {release}'s flash backend was measured there with other FlashAttention 4 pairs only "
                     f"({_pairs(at)})", tuple(at))
