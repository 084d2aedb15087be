"""apex's fused CUDA extensions: which ones megatron-core can use, and what it falls back to without them; and
gradient accumulation fusion, which megatron-core takes from apex's extension or from this project's module."""

from __future__ import annotations

from mcore_images.catalogue import wgrad_fusion
from mcore_images.doctor import probes
from mcore_images.doctor.model import Context, Outcome, Status, check, ok, skip, trip, warn

# extension module → what megatron-core does without it
FALLBACKS = {
    "fused_layer_norm_cuda": "layer norm from TE, else torch's (local spec)",
    "amp_C": "multi-tensor ops through torch._foreach (slower grad-norm / scaling)",
    wgrad_fusion.MODULE: "gradient_accumulation_fusion must be False (wgrad.fusion names how)",
}
APEX_FIX = (
    "optional: build apex with APEX_CPP_EXT=1 APEX_CUDA_EXT=1 against this torch; without it "
    "megatron-core uses the fallbacks listed"
)


@check(
    "apex.fused", Status.FAIL, "rebuild apex against the installed torch (its extensions do not load)", isolated=True
)
def apex_fused(ctx: Context) -> Outcome:
    """apex's fused_layer_norm_cuda / amp_C / fused_weight_gradient_mlp_cuda load; else name the fallbacks."""
    # This project's fusion module stands in for apex's where apex is absent: wgrad.fusion reports it.
    names = [n for n in FALLBACKS if not (n == wgrad_fusion.MODULE and _provider() == wgrad_fusion.OURS)]
    present = {name: where for name in names if (where := probes.locate(name)) is not None}
    missing = [name for name in names if name not in present]
    fallbacks = {name: FALLBACKS[name] for name in missing}
    if present:
        if probes.import_error(ctx, "torch"):  # the extensions link libtorch: it must load first
            return skip(f"apex extensions {', '.join(present)} present but torch does not import")
        broken = {name: err for name in present if (err := probes.import_error(ctx, name))}
        if broken:
            name, error = next(iter(broken.items()))
            return trip(f"apex extension {name} does not load: {error}", broken=broken, fallbacks=fallbacks)
    if missing:
        have = f" (has {', '.join(present)})" if present else ""
        listed = "; ".join(f"{name} → {how}" for name, how in fallbacks.items())
        return warn(f"apex extensions missing{have}: {listed}", APEX_FIX, fallbacks=fallbacks)
    return ok(
        "apex fused_layer_norm_cuda, amp_C and fused_weight_gradient_mlp_cuda load",
        paths={k: str(v) for k, v in present.items()},
    )


def _provider() -> str | None:
    """The distribution that provides the fusion module here (None: none; an unowned module counts as apex's)."""
    found = wgrad_fusion.provider()
    return wgrad_fusion.APEX if found == "(no distribution)" else found


OFF = "; ".join(f"{framework}: {flag}" for framework, flag in wgrad_fusion.OFF_FLAGS.items())
WGRAD_FIX = (f"install apex or {wgrad_fusion.OURS} (the images carry one), or turn the fusion off ({OFF}), which "
             "costs its speed")


@check("wgrad.fusion", Status.FAIL, WGRAD_FIX, isolated=True)
def gradient_accumulation_fusion(ctx: Context) -> Outcome:
    """megatron-core's gradient accumulation fusion can run, as Megatron-LM, Megatron-Bridge and verl run it by
    default: fused_weight_gradient_mlp_cuda loads, and from whom (apex's extension, or this project's module over
    Transformer Engine's GEMM, which then needs TE on GPUs)."""
    if probes.locate("megatron.core") is None:
        return skip("megatron-core is not installed: nothing here would use the fusion")
    if probes.locate(wgrad_fusion.MODULE) is None:
        return trip(f"{wgrad_fusion.MODULE} is not installed: with gradient_accumulation_fusion on (the frameworks' "
                    "default) megatron-core stops at the first step")
    provider = _provider()
    if error := probes.import_error(ctx, wgrad_fusion.MODULE):
        return trip(f"{wgrad_fusion.MODULE} from {provider} does not load: {error}", provider=provider)
    if provider == wgrad_fusion.OURS and (error := probes.import_error(ctx, "transformer_engine.pytorch")):
        return trip(f"{wgrad_fusion.MODULE} from {provider} runs its GPU GEMM through Transformer Engine, which "
                    f"does not import: {error}", f"install Transformer Engine, or turn the fusion off ({OFF})",
                    provider=provider)
    how = "apex's CUDA extension" if provider == wgrad_fusion.APEX else "Transformer Engine's general_gemm"
    return ok(f"gradient accumulation fusion can run: {wgrad_fusion.MODULE} from {provider} ({how})",
              provider=provider)
