"""Transformer Engine: its torch extension loads, its CUDA wheel matches torch, one cuDNN in the process, and the
attention backend megatron-core will be told to use has one TE can run."""

from __future__ import annotations

import json
import re
from pathlib import Path

from mcore_images.catalogue import components, flash_attention
from mcore_images.doctor import probes
from mcore_images.doctor.model import Context, Outcome, Status, check, ok, skip, trip, warn

ABI_FIX = (
    "TE's torch extension was built against another torch: rebuild it against the installed one "
    "(pip install --no-build-isolation --force-reinstall transformer-engine-torch==<TE version>)"
)


def te_dists() -> dict[str, str]:
    return probes.dists_matching(r"transformer-engine(-cu\d+|-torch)?")


def te_packaging(dists: dict[str, str]) -> tuple[str, str] | None:
    """From PyPI, TE is three packages that must agree: the core (-cuXX), the meta package and the
    torch extension (compiled against one torch). Returns (problem, fix) or None."""
    core = {n: v for n, v in dists.items() if re.fullmatch(r"transformer-engine-cu\d+", n)}
    if not core:
        return None  # built from source (NGC and friends): one package, nothing to match
    version = next(iter(core.values()))
    fix = (
        f"pip install --no-build-isolation 'transformer-engine[pytorch]=={version}' (compiles "
        "transformer-engine-torch against the installed torch)"
    )
    if probes.locate("transformer_engine_torch") is None:
        return (
            f"TE's PyTorch extension is not installed, only {', '.join(f'{n} {v}' for n, v in core.items())}",
            fix,
        )
    wanted = {n: dists.get(n) for n in ("transformer-engine", "transformer-engine-torch")}
    if any(v != version for v in wanted.values()):
        shown = ", ".join(f"{n} {v or 'missing'}" for n, v in {**core, **wanted}.items())
        return f"TE packages disagree ({shown}); TE refuses to load", fix
    return None


@check("te.import", Status.FAIL, ABI_FIX, isolated=True)
def te_import(ctx: Context) -> Outcome:
    """transformer_engine.pytorch imports; an 'undefined symbol' there is a torch ABI mismatch."""
    where = probes.locate("transformer_engine")
    dists = te_dists()
    if where is None:
        return warn(
            "Transformer Engine is not installed: megatron-core falls back to its local spec "
            "(no fused attention, no FP8, no context parallelism)",
            "pip install transformer-engine-cu<CUDA major> and build transformer-engine-torch "
            "against this torch",
            dists=dists,
        )
    if error := probes.import_error(ctx, "transformer_engine.pytorch"):
        if probes.not_retried(error):
            return trip(
                f"import transformer_engine.pytorch fails: {error}",
                "fix the import named there first (its own check says how); TE depends on it",
                dists=dists,
            )
        if packaging := te_packaging(dists):
            return trip(f"{packaging[0]}: {error}", packaging[1], dists=dists)
        if "undefined symbol" in error:
            return trip(f"torch ABI mismatch: {error}", ABI_FIX, dists=dists)
        if re.search(r"lib(nccl|cudnn|cudart|cublas)\S*\.so", error):
            return trip(
                f"TE cannot load a CUDA library: {error}",
                "put torch's nvidia/*/lib folders on "
                "LD_LIBRARY_PATH (or install the matching nvidia-* wheels)",
                dists=dists,
            )
        return trip(
            f"import transformer_engine.pytorch fails: {error}",
            "install TE's runtime dependencies and a torch extension built for this torch",
            dists=dists,
        )
    version = probes.module_version(probes.imported(ctx, "transformer_engine")) or dists.get("transformer-engine")
    if version is None:
        return warn(
            f"transformer_engine at {where} imports but has no version (no __version__, no transformer-engine "
            "dist-info): a partial copy, so its packages cannot be matched",
            "reinstall Transformer Engine: pip install --force-reinstall transformer-engine-cu<CUDA major> and "
            "build transformer-engine-torch against this torch",
            dists=dists,
            path=where,
        )
    return ok(f"transformer_engine {version} and its torch extension import", dists=dists, path=where)


@check(
    "te.cuda-wheel",
    Status.FAIL,
    "install the TE core wheel for torch's CUDA major: "
    "pip install transformer-engine-cu<major>==<TE version> and uninstall the other",
)
def te_cuda_wheel(ctx: Context) -> Outcome:
    """The transformer_engine_cuXX wheel matches torch's CUDA major."""
    wheels = {name: v for name, v in te_dists().items() if re.fullmatch(r"transformer-engine-cu\d+", name)}
    if not wheels:
        return skip("no transformer-engine-cuXX wheel installed (TE absent or built from source)")
    facts = probes.torch_facts()
    if facts is None or facts.cuda is None:
        return skip(f"{', '.join(wheels)} installed but no CUDA torch to match")
    major = facts.cuda.split(".")[0]
    wrong = sorted(name for name in wheels if name != f"transformer-engine-cu{major}")
    if wrong:
        return trip(
            f"torch {facts.version} uses CUDA {facts.cuda} but {', '.join(wrong)} is installed",
            f"pip uninstall {' '.join(wrong)} && pip install transformer-engine-cu{major}",
            wheels=wheels,
        )
    return ok(
        f"transformer-engine-cu{major} {wheels[f'transformer-engine-cu{major}']} matches torch's CUDA "
        f"{facts.cuda}",
        wheels=wheels,
    )


def cudnn_copies(ctx: Context) -> dict[str, int | None]:
    """Every libcudnn.so* main library mapped into this process → its cudnnGetVersion()."""
    paths = probes.loaded_libraries(ctx, r"libcudnn\.so(\.\d+)*")
    return {path: probes.library_version(path, "cudnnGetVersion", by_reference=False) for path in paths}


def cudnn_text(code: int | None) -> str:
    return "?" if code is None else components.cudnn_release(code)


@check(
    "te.cudnn",
    Status.FAIL,
    "make TE load torch's cuDNN: export CUDNN_HOME=<site-packages>/nvidia/cudnn and put "
    "<site-packages>/nvidia/cudnn/lib first on LD_LIBRARY_PATH (CUDNN_HOME alone still lets cuDNN's "
    "sub-libraries come from the system), or remove the system libcudnn",
    isolated=True,
)
def te_cudnn(ctx: Context) -> Outcome:
    """TE and torch use one cuDNN; a second, older one makes TE silently pick unfused attention."""
    if probes.locate("transformer_engine") is None:
        return skip("Transformer Engine is not installed")
    if probes.import_error(ctx, "transformer_engine.pytorch"):
        return skip("transformer_engine.pytorch does not import (see te.import)")
    torch = probes.imported(ctx, "torch")
    copies = cudnn_copies(ctx)
    try:
        torch_cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    except RuntimeError as exc:  # torch itself refuses the mix: "cuDNN version incompatibility"
        listed = ", ".join(f"{p} ({cudnn_text(v)})" for p, v in copies.items()) or "unknown copies"
        return trip(f"torch refuses the cuDNN it finds after TE loaded: {exc}; loaded {listed}",
                    loaded={p: cudnn_text(v) for p, v in copies.items()})
    details = {
        "torch_cudnn": cudnn_text(torch_cudnn),
        "loaded": {p: cudnn_text(v) for p, v in copies.items()},
        "CUDNN_HOME": ctx.environ.get("CUDNN_HOME"),
        "CUDNN_PATH": ctx.environ.get("CUDNN_PATH"),
    }
    if not copies:
        return skip("no libcudnn mapped into the process after importing TE", **details)
    dirs = {str(Path(p).resolve().parent) for p in copies}
    versions = {v for v in copies.values() if v is not None}
    if len(versions) > 1 or (torch_cudnn is not None and versions and versions != {torch_cudnn}):
        listed = ", ".join(f"{p} ({cudnn_text(v)})" for p, v in copies.items())
        return trip(
            f"two cuDNNs in one process: torch uses {cudnn_text(torch_cudnn)}, loaded {listed}; TE then "
            "silently picks unfused attention (268 vs 550 TFLOP/s measured on H200)",
            **details,
        )
    if unknown := [p for p, v in copies.items() if v is None]:
        return warn(
            f"{', '.join(unknown)} does not answer cudnnGetVersion(): its cuDNN cannot be matched with torch's "
            f"({cudnn_text(torch_cudnn)})",
            "load only torch's cuDNN: CUDNN_HOME and LD_LIBRARY_PATH at <site-packages>/nvidia/cudnn",
            **details,
        )
    if len(dirs) > 1:
        return warn(
            f"the same cuDNN {cudnn_text(next(iter(versions), None))} is loaded from {len(dirs)} folders",
            "point CUDNN_HOME at torch's nvidia/cudnn so only one copy loads",
            **details,
        )
    return ok(
        f"one cuDNN {cudnn_text(next(iter(versions), torch_cudnn))} for torch and TE ({next(iter(dirs))})",
        **details,
    )


FLASH_VIEW = "transformer_engine.pytorch.attention.dot_product_attention.utils"
"""Where TE keeps what it found when it looked for FlashAttention (FlashAttentionUtils, set on import)."""

ATTENTION_FIX = (
    "use cuDNN's fused attention: attention_backend=fused (verl: "
    "actor_rollout_ref.actor.megatron.override_transformer_config.attention_backend=fused; Megatron-LM: "
    "--attention-backend fused); TE's flash backend only with a TE release measured right with its FlashAttention on "
    "this GPU (catalogue/flash_attention.py MEASURED)"
)
PROBE = ("-m", "mcore_images.smoke.attention", "--probe", "--json")
"""The smoke's attention check, one small case: the doctor runs it as a child process (it never imports the
smoke), so the numerics of both live in one place."""
PROBE_TIMEOUT_S = 300.0
"""Imports, one reference and the backend's first compile (FlashAttention 4 compiles for ~20 s on an H200)."""


def te_flash_view(ctx: Context) -> flash_attention.FlashView:
    """TE's own view of the installed FlashAttention versions (imports transformer_engine.pytorch)."""
    utils = probes.imported(ctx, FLASH_VIEW).FlashAttentionUtils

    def seen(installed: str, version: str) -> str | None:
        return str(getattr(utils, version)) if getattr(utils, installed, False) else None

    return flash_attention.FlashView(seen("is_installed", "version"), seen("v3_is_installed", "fa3_version"),
                                     seen("v4_is_installed", "fa4_version"))


@check("te.attention", Status.FAIL, ATTENTION_FIX, isolated=True)
def te_attention(ctx: Context) -> Outcome:
    """The backend megatron-core will be told to use (the NVTE_* variables, or `--attention-backend`) has one TE
    can run on every visible GPU: under attention_backend=flash, verl's default, that is a FlashAttention TE
    accepts; without one the first forward raises "No dot product attention backend is available"."""
    asked = flash_attention.requested(ctx.environ)
    if asked.conflict:
        return trip(asked.conflict, "unset NVTE_FLASH_ATTN, NVTE_FUSED_ATTN and NVTE_UNFUSED_ATTN and let "
                    "megatron-core set them")
    flash, fused, unfused = asked.allowed
    if not (flash or fused or unfused):
        return ok(f"{asked.source}: megatron-core's own attention, none of TE's")
    if probes.locate("transformer_engine") is None:
        return skip("Transformer Engine is not installed")
    if probes.import_error(ctx, "transformer_engine.pytorch"):
        return skip("transformer_engine.pytorch does not import (see te.import)")
    view = te_flash_view(ctx)
    te = probes.module_version(probes.imported(ctx, "transformer_engine")) or "0"
    gpus, why = probes.torch_gpus(ctx)
    details = {"request": asked.source, "flash_attention": view.__dict__, "te": te,
               "gpus": [f"{g.name} (sm_{g.cc})" for g in gpus] or why}
    where = sorted({g.cc for g in gpus}) or [None]
    if flash and view.fa4 and (wrong := _measured_wrong(view.fa4, te, where)):
        return trip(f"{asked.source} lets TE {te} select FlashAttention {view.fa4}: {wrong}", **details)
    if fused or unfused:
        allowed = [name for name, on in (("flash", flash), ("fused", fused), ("unfused", unfused)) if on]
        return _probed(ctx, f"{asked.source}: TE may choose among {', '.join(allowed)} attention", gpus, details)
    lacking = [sm for sm in where if not flash_attention.flash_usable(view, te, sm)]
    if lacking:
        on = "this machine (no GPU visible: judged by what is installed)" if lacking == [None] else \
            ", ".join(f"sm_{sm}" for sm in lacking)
        installed = ", ".join(f"{k} {v}" for k, v in view.__dict__.items() if v) or "none"
        return trip(f"{asked.source} leaves TE FlashAttention alone, and it has none it can run for training on "
                    f"{on} (TE {te} sees: {installed}): the first forward raises \"No dot product attention "
                    "backend is available\"; cuDNN's fused attention (attention_backend=fused) is the one to use",
                    **details)
    usable = flash_attention.flash_usable(view, te, where[0])
    return _probed(ctx, f"{asked.source}: TE can run {', '.join(usable)}" + (
        "" if where != [None] else " (no GPU visible: judged by what is installed)"), gpus, details)


def _measured_wrong(fa4: str, te: str, where: list[int | None]) -> str | None:
    """What a measurement found wrong of this FlashAttention 4 under this TE on one of these GPUs (catalogue), as a
    clause that says which half was wrong: FlashAttention 4 itself, or TE's flash backend around it."""
    cutlass = probes.dist_version(flash_attention.CUTLASS_DSL)
    sms = sorted({sm for sm in where if sm is not None}) or [90, 100]  # no GPU visible: the GPUs FA4 trains on
    for sm in sms:
        judged = flash_attention.judge(fa4, cutlass[1] if cutlass else None, te, sm)
        if judged.verdict == flash_attention.WRONG:
            return judged.why
    return None


def _probed(ctx: Context, judged: str, gpus: tuple[probes.Gpu, ...], details: dict) -> Outcome:
    """On a GPU, the smoke's attention check on one small case under the backend judged: what TE selects there must
    match an fp32 reference. Without a GPU, the judgment as it stands."""
    if not gpus:
        return ok(judged, **details)
    backend = ctx.environ.get(flash_attention.ASKED) or "as-set"
    code, out = ctx.run_program([*PROBE, "--backends", backend], ctx.environ, PROBE_TIMEOUT_S)
    try:
        section = json.loads(out.strip().splitlines()[-1]) if out.strip() else None
    except ValueError:
        section = None
    if code is None or not isinstance(section, dict):
        why = f"ran past {PROBE_TIMEOUT_S:.0f} s" if code is None else f"exited {code} without its result"
        return warn(f"{judged}; the attention probe (python {' '.join(PROBE)}) {why}, so its numbers are not "
                    "checked", "run python -m mcore_images.smoke.attention --probe to see why", **details)
    details["probe"] = section.get("results")
    ran = [r for r in section.get("results", []) if r.get("status") in ("passed", "failed")]
    if section.get("status") == "failed":
        return trip(f"{judged}, but the backend TE selects is wrong against an fp32 reference: "
                    f"{'; '.join(section.get('failed') or [str(section.get('error'))])}", **details)
    if not ran:
        reasons = "; ".join(str(r.get("reason")) for r in section.get("results", [])) or section.get("error")
        return trip(f"{judged}, but TE ran no backend on the probe's case: {reasons}", **details)
    first = ran[0]
    out_t = first["tensors"].get("out", {})
    return ok(f"{judged}; probe: {first.get('selected')} matches an fp32 reference on {first['case']} (out error "
              f"{out_t.get('error', float('nan')):.1e} ≤ {out_t.get('limit', float('nan')):.1e}, dq/dk/dv too)",
              **details)
