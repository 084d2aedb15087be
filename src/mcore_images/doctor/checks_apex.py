"""apex's fused CUDA extensions: which ones megatron-core can use, and what it falls back to without them."""

from __future__ import annotations

from mcore_images.doctor import probes
from mcore_images.doctor.model import Context, Outcome, Status, check, ok, skip, trip, warn

# extension module → what megatron-core does without it
FALLBACKS = {
    "fused_layer_norm_cuda": "layer norm from TE, else torch's (local spec)",
    "amp_C": "multi-tensor ops through torch._foreach (slower grad-norm / scaling)",
    "fused_weight_gradient_mlp_cuda": "gradient_accumulation_fusion must be False",
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
    present = {name: where for name in FALLBACKS if (where := probes.locate(name)) is not None}
    missing = [name for name in FALLBACKS if name not in present]
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
