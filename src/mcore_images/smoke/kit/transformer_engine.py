"""Whether Transformer Engine is usable here, and what it chose: the same answer for every program."""

from __future__ import annotations

import importlib.metadata
import importlib.util
from collections.abc import Callable
from pathlib import Path

from mcore_images.catalogue import components, flash_attention


def state(wanted: bool) -> tuple[bool, str | None]:
    """(TE usable, why not). Not wanted (a CPU run, the local spec) or not installed: (False, None).
    An installed TE that fails to import is an error to report, never a silent skip."""
    if not wanted or importlib.util.find_spec("transformer_engine") is None:
        return False, None
    try:
        import transformer_engine.pytorch  # noqa: F401
    except Exception as exc:  # a broken TE install: report it, do not hide it
        return False, f"transformer_engine is installed but does not import: {exc}".splitlines()[0]
    return True, None


TE_MODULES = ("transformer_engine", "megatron.core.extensions.transformer_engine")
"""Where Transformer Engine's classes live: TE itself, and megatron-core's wrappers of them (TENorm, …)."""


def is_te_class(cls: type) -> bool:
    """Whether a class is Transformer Engine's (a module of that class runs TE's kernels)."""
    module = getattr(cls, "__module__", "") or ""
    return any(module == root or module.startswith(f"{root}.") for root in TE_MODULES)


def cudnn_libraries() -> list[str]:
    """libcudnn main libraries mapped into this process (two different copies: TE may go unfused)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return []
    return sorted({line.split()[-1] for line in maps.splitlines() if "/libcudnn.so" in line})


def torch_cudnn() -> int | str | None:
    """torch's cuDNN version, or the error torch raises when TE loaded a different cuDNN."""
    import torch

    try:
        return torch.backends.cudnn.version()
    except RuntimeError as exc:  # two cuDNNs in one process: torch refuses the one TE loaded
        return f"error: {exc}".splitlines()[0][:200]


def attention_choice() -> tuple[str, str] | None:
    """What TE's DotProductAttention chose on its last call, from TE's module state: ("flash", its FlashAttention),
    ("fused", cuDNN's backend), ("unfused", ""), or None before any call. ImportError where TE keeps no such state."""
    from transformer_engine.pytorch.attention.dot_product_attention import _attention_backends as chosen

    if chosen.get("use_flash_attention"):
        return "flash", str(chosen.get("flash_attention_backend"))
    if chosen.get("use_fused_attention"):
        return "fused", str(chosen.get("fused_attention_backend")).split(".")[-1]
    if chosen.get("use_unfused_attention"):
        return "unfused", ""
    return None


def attention_backend(spec: str) -> str:
    """What TE's DotProductAttention last chose, as the bench and verl's engine record it, or the local spec's."""
    if spec != "te":
        return "local (unfused, torch softmax)"
    try:
        choice = attention_choice()
    except Exception:  # older/newer TE without this state: say so rather than guess
        return "te (backend not readable)"
    if choice is None:
        return "te (not selected yet)"
    kind, detail = choice
    return f"te {kind} ({detail})" if detail else f"te {kind}"


def forget_attention_choice() -> None:
    """Make TE choose its attention backend again at the next forward. TE keeps its choice in module state and
    chooses again only when the attention's shapes change, not when megatron-core sets other NVTE variables: the
    next row of another ``attention_backend`` would otherwise run the backend the previous row chose. No-op where TE
    keeps no such state."""
    try:
        from transformer_engine.pytorch.attention.dot_product_attention import _attention_backends as chosen
    except Exception:  # older/newer TE: nothing cached to forget
        return
    chosen["attention_params"] = None
    chosen["backend_selection_requires_update"] = True


def installed_version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


FLASH_DISTRIBUTIONS = {"fa2": "flash-attn", "fa3": "flash-attn-3", "fa4": flash_attention.FA4_DISTRIBUTION}
"""The distributions TE reads each FlashAttention generation's version from."""


def flash_problem(version: Callable[[str], str | None] = installed_version) -> str | None:
    """Why megatron-core's ``attention_backend=flash`` would run no right attention under the TE installed here, or
    None. Read from what is installed (no GPU needed, so before anything runs): a FlashAttention TE can run for
    training, none of whose pairs was measured wrong (catalogue/flash_attention.py MEASURED, on the GPUs measured)."""
    fix = "choose --attention-backend fused (cuDNN) or unfused"
    te = version(str(components.BY_KEY["te"].distribution))
    if te is None:
        return f"--attention-backend flash selects Transformer Engine's FlashAttention, and TE is not installed: {fix}"
    view = flash_attention.FlashView(**{key: version(dist) for key, dist in FLASH_DISTRIBUTIONS.items()})
    if not flash_attention.flash_usable(view, te, None):
        installed = ", ".join(f"{dist} {v}" for dist, v in zip(FLASH_DISTRIBUTIONS.values(), view.__dict__.values(),
                                                                strict=True) if v) or "none of " + ", ".join(
            FLASH_DISTRIBUTIONS.values())
        return (f"--attention-backend flash leaves TE {te} no backend: it has no FlashAttention it can train with "
                f"(installed: {installed}), and megatron-core turns fused and unfused off (NVTE_FUSED_ATTN=0 "
                f"NVTE_UNFUSED_ATTN=0): {fix}")
    cutlass = version(flash_attention.CUTLASS_DSL)
    for sm in sorted({m.sm for m in flash_attention.MEASURED}):
        judged = flash_attention.judge(view.fa4, cutlass, te, sm) if view.fa4 else None
        if judged is not None and judged.verdict == flash_attention.WRONG:
            return (f"--attention-backend flash would run {flash_attention.FA4_DISTRIBUTION} {view.fa4} on "
                    f"{flash_attention.CUTLASS_DSL} {cutlass} under TE {te}, measured wrong on sm_{sm} ({judged.why}; "
                    f"catalogue/flash_attention.py MEASURED): {fix}")
    return None
