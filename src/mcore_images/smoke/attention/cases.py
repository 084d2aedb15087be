"""The attention check's cases and backends (pure Python: host tests and ``--dry-run`` read them without torch).

Cases are the shapes megatron-core hands TE: sbhd (Megatron-LM's and verl's default), bshd, and thd — tokens of
several sequences packed end to end with cu_seqlens, verl's remove-padding path (megatron-core then asks TE for
``padding_causal``). MHA and GQA, head dims 64 and 128, causal. The packed lengths are not multiples of any tile
size, so a kernel's boundary handling is exercised. GPU cases are sized like a small training step; CPU cases (CI)
are small enough for a few seconds of bf16 on two cores.
"""

from __future__ import annotations

from dataclasses import dataclass

from mcore_images.catalogue import flash_attention

LAYOUTS = ("sbhd", "bshd", "thd")


@dataclass(frozen=True)
class Case:
    """One attention shape: layout, query heads, key/value heads (groups), head dim and sequence lengths."""

    layout: str
    heads: int
    groups: int
    head_dim: int
    seqlens: tuple[int, ...]
    """sbhd/bshd: one length per batch entry (all equal); thd: the packed sequences' lengths."""

    @property
    def kind(self) -> str:
        return "MHA" if self.heads == self.groups else f"GQA {self.heads}/{self.groups}"

    @property
    def id(self) -> str:
        return f"{self.layout} {self.kind} d{self.head_dim}"

    @property
    def batch(self) -> int:
        return 1 if self.layout == "thd" else len(self.seqlens)

    @property
    def max_seqlen(self) -> int:
        return max(self.seqlens)

    @property
    def cu_seqlens(self) -> list[int]:
        """Offsets of each packed sequence and the total (thd)."""
        out = [0]
        for n in self.seqlens:
            out.append(out[-1] + n)
        return out

    def describe(self) -> str:
        shape = (f"{len(self.seqlens)} packed sequences of {'+'.join(map(str, self.seqlens))} tokens"
                 if self.layout == "thd" else f"batch {len(self.seqlens)} × {self.seqlens[0]} tokens")
        return f"{self.id}: {shape}, {self.heads} query / {self.groups} key-value heads, causal"


def _grid(batch_seq: tuple[int, int], packed: tuple[int, ...], mha: int, gqa: tuple[int, int]) -> list[Case]:
    cases = []
    for layout in LAYOUTS:
        seqlens = packed if layout == "thd" else (batch_seq[1],) * batch_seq[0]
        for heads, groups in ((mha, mha), gqa):
            for dim in (64, 128):
                cases.append(Case(layout, heads, groups, dim, seqlens))
    return cases


GPU_CASES = _grid((2, 2048), (1000, 2048, 777), 16, (16, 4))
"""On a GPU: batch 2 × 2048 tokens; three packed sequences (3825 tokens); 16 heads, GQA 16/4."""
CPU_CASES = _grid((2, 96), (37, 96, 50), 4, (4, 2))
"""On CPU (CI): batch 2 × 96 tokens; three packed sequences; 4 heads, GQA 4/2."""
MEASURED_SHAPES = [c for c in GPU_CASES if c.head_dim == 128 and c.layout in ("sbhd", "thd")]
"""The four shapes of the 2026-12-05 measurement (sbhd and thd, MHA and GQA, head dim 128): the pairs' quick set."""
PROBE = Case("sbhd", 8, 2, 128, (512,))
"""The doctor's probe: one small GQA case in megatron-core's default layout (seconds, plus a first compile)."""


@dataclass(frozen=True)
class Backend:
    """A row of the table: an ``attention_backend`` megatron-core can be given, or FlashAttention 4 called
    directly (``fa4``). ``variables``: what megatron-core sets the NVTE variables to (None: TE is not asked)."""

    name: str
    variables: dict[str, str] | None
    about: str


def _te(name: str) -> Backend:
    values = flash_attention.MEGATRON_SETS[name]
    variables = {v: str(x) for v, x in zip(flash_attention.NVTE_VARIABLES, values, strict=True)}
    return Backend(name, variables, f"attention_backend={name}: TE's DotProductAttention under "
                   + " ".join(f"{k}={v}" for k, v in variables.items()))


LOCAL = Backend("local", None, "attention_backend=local: megatron-core's own DotProductAttention (sbhd only, no "
                "packed sequences)")
FA4 = Backend("fa4", None, "FlashAttention 4 called directly (flash_attn.cute.interface), without TE")
SDPA = Backend("sdpa", None, "PyTorch's scaled_dot_product_attention in bf16 (per packed sequence for thd): a control "
               "computed by torch's own kernels, and on CPU the layouts megatron-core's own attention cannot take")
AS_SET = "as-set"
"""The NVTE variables as this environment sets them (the doctor's probe when no attention_backend is named)."""
BACKENDS = (*(_te(n) for n in flash_attention.MEGATRON_SETS if n != "local"), LOCAL, FA4, SDPA)
BY_NAME = {b.name: b for b in BACKENDS}


def as_set(environ: dict[str, str]) -> Backend:
    """A row for the NVTE variables as set (unset means allowed, as TE reads them)."""
    variables = {v: environ.get(v, "1") for v in flash_attention.NVTE_VARIABLES}
    shown = " ".join(f"{k}={v}" for k, v in variables.items())
    return Backend(AS_SET, variables, f"the NVTE variables as set: {shown}")


def select(names: str | None, environ: dict[str, str]) -> list[Backend]:
    """The backends a ``--backends`` value names (default: every one); ValueError naming the choices."""
    if not names:
        return list(BACKENDS)
    chosen = []
    for name in (n.strip() for n in names.split(",") if n.strip()):
        if name == AS_SET:
            chosen.append(as_set(environ))
        elif name in BY_NAME:
            chosen.append(BY_NAME[name])
        else:
            raise ValueError(f"unknown backend {name!r}: use {', '.join([*BY_NAME, AS_SET])}")
    return chosen


def applicable(backend: Backend, case: Case) -> str | None:
    """Why a backend cannot take a case at all, whatever the machine (None: it can)."""
    if backend.name == "local" and case.layout != "sbhd":
        return ("megatron-core's own attention takes sbhd only" if case.layout == "bshd"
                else "megatron-core's own attention takes no packed sequences (it asserts packed_seq_params is None)")
    return None
