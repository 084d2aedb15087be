"""Python, PyTorch, CUDA driver and GPU architecture: the floor megatron-core stands on."""

from __future__ import annotations

import sys
from pathlib import Path

from mcore_images.doctor import fatbin, probes
from mcore_images.doctor.model import Context, Outcome, Status, check, ok, skip, trip, warn
from mcore_images.versions import at_least

MCORE_NEEDS_NEW_FLOOR = "0.17"  # from megatron-core 0.17 on: Python >= 3.12 and torch >= 2.6


def python_version() -> tuple[int, int, int]:
    return sys.version_info[:3]


def installed_mcore() -> str | None:
    where = probes.locate("megatron.core")
    return probes.mcore_version(where) if where else None


@check(
    "python.version",
    Status.FAIL,
    "use Python >= 3.12 (a python3.12 venv or image); megatron-core >= 0.17 requires it",
    isolated=True,  # finding megatron.core imports the `megatron` package
)
def python_floor(ctx: Context) -> Outcome:
    """Python >= 3.12, which megatron-core >= 0.17 requires."""
    version = ".".join(map(str, python_version()))
    if python_version() >= (3, 12):
        return ok(f"Python {version}", python=version)
    mcore = installed_mcore()
    if mcore and at_least(mcore, MCORE_NEEDS_NEW_FLOOR):
        return trip(
            f"Python {version} with megatron-core {mcore}: megatron-core >= 0.17 requires Python >= 3.12",
            python=version,
            megatron_core=mcore,
        )
    return warn(
        f"Python {version}: fine for megatron-core < 0.17 only (installed: {mcore or 'none'})",
        python=version,
        megatron_core=mcore,
    )


@check(
    "torch.version",
    Status.FAIL,
    "pip install 'torch>=2.6' (a CUDA build); megatron-core >= 0.17 needs it",
    isolated=True,
)
def torch_version(ctx: Context) -> Outcome:
    """PyTorch is installed, imports, has a version, and is >= 2.6 for megatron-core >= 0.17."""
    facts = probes.torch_facts()
    if facts is None:
        return trip("torch is not installed: megatron-core cannot run here")
    if error := probes.import_error(ctx, "torch"):
        return trip(
            f"torch {facts.version or '(no version)'} at {facts.path} does not import: {error}",
            "reinstall one consistent torch: pip install --force-reinstall torch==<version> "
            "(mixed nvidia-* wheels or LD_LIBRARY_PATH libraries are the usual cause)",
        )
    version = facts.version or probes.module_version(probes.imported(ctx, "torch"))
    if version is None:
        return trip(
            f"torch at {facts.path} imports but has no version (no __version__ in torch/version.py or "
            "torch, no dist-info for this copy): a partial or foreign copy",
            "reinstall torch: pip install --force-reinstall 'torch>=2.6' (a CUDA build)",
            path=facts.path,
        )
    mcore = installed_mcore()
    if not at_least(version, "2.6"):
        message = f"torch {version} is older than 2.6"
        if mcore and at_least(mcore, MCORE_NEEDS_NEW_FLOOR):
            return trip(f"{message}, which megatron-core {mcore} requires", torch=version)
        return warn(f"{message}: megatron-core >= 0.17 will not run on it", torch=version)
    return ok(f"torch {version} imports", torch=version, path=facts.path)


@check(
    "torch.cuda",
    Status.FAIL,
    "install a CUDA build of torch (the Linux x86_64 wheels on PyPI are CUDA builds; '+cpu' wheels are not)",
)
def torch_cuda(ctx: Context) -> Outcome:
    """torch was built with CUDA; a CPU-only wheel cannot run megatron-core's GPU paths."""
    facts = probes.torch_facts()
    if facts is None:
        return skip("torch is not installed")
    if facts.version is None:
        return skip(f"torch at {facts.path} has no version.py to read its CUDA from (see torch.version)")
    if facts.cuda is None:
        return trip(
            f"torch {facts.version} is a CPU-only build (torch.version.cuda is None)", torch=facts.version
        )
    return ok(f"torch {facts.version} built with CUDA {facts.cuda}", cuda=facts.cuda)


@check(
    "cuda.driver",
    Status.FAIL,
    "upgrade the NVIDIA driver to one that supports torch's CUDA, or install "
    "a torch built for the CUDA the driver supports",
    isolated=True,
)
def cuda_driver(ctx: Context) -> Outcome:
    """The driver supports torch's CUDA runtime, and torch sees the GPUs the driver sees."""
    facts = probes.torch_facts()
    if facts is None or facts.cuda is None:
        return skip("no CUDA build of torch to match against the driver")
    info = probes.gpu_info(ctx)
    if info.driver_cuda is None:
        return skip(f"no NVIDIA driver here ({info.note}); torch uses CUDA {facts.cuda}")
    runtime, driver = probes.cuda_code(facts.cuda), info.driver_cuda
    details = {
        "driver": info.driver_version,
        "driver_cuda": probes.cuda_text(driver),
        "torch_cuda": facts.cuda,
    }
    if driver // 1000 < runtime // 1000:
        return trip(
            f"driver {info.driver_version} supports CUDA {probes.cuda_text(driver)}, but torch needs "
            f"CUDA {facts.cuda}: CUDA fails to initialise",
            **details,
        )
    if not info.gpus:
        return warn(
            f"driver present but no GPU visible: {info.note}",
            "check CUDA_VISIBLE_DEVICES and that the container runs with --gpus",
            **details,
        )
    if driver < runtime:
        return warn(
            f"driver CUDA {probes.cuda_text(driver)} < torch's CUDA {facts.cuda}: runs through minor "
            "version compatibility, but PTX JIT of newer code fails",
            **details,
        )
    if error := probes.import_error(ctx, "torch"):
        return skip(f"torch does not import ({error}); see torch.version", **details)
    torch = probes.imported(ctx, "torch")
    if not torch.cuda.is_available():
        return trip(
            f"driver sees {len(info.gpus)} GPU(s) but torch.cuda.is_available() is False",
            "check CUDA_VISIBLE_DEVICES and that libcuda matches the kernel module",
            **details,
        )
    return ok(
        f"driver {info.driver_version} (CUDA {probes.cuda_text(driver)}) runs torch's CUDA {facts.cuda} "
        f"on {len(info.gpus)} GPU(s)",
        **details,
    )


APEX_MODULES = ("fused_layer_norm_cuda", "amp_C", "fused_weight_gradient_mlp_cuda")


def kernel_binaries() -> dict[str, list[Path]]:
    """TE's core library and torch extension and apex's extensions, found without importing them."""
    found: dict[str, list[Path]] = {}
    te = probes.locate("transformer_engine")
    if te is not None and te.is_dir():
        # the core library only: optional extras (libnccl_ep.so: sm_90+ only) must not fail an A100
        found["transformer_engine"] = sorted(p for p in te.rglob("libtransformer_engine*.so*") if p.is_file())
    if (ext := probes.locate("transformer_engine_torch")) is not None and ext.is_file():
        found.setdefault("transformer_engine", []).append(ext)
    apex = [p for name in APEX_MODULES if (p := probes.locate(name)) is not None and p.is_file()]
    if apex:
        found["apex"] = apex
    return found


def binary_archs(binaries: dict[str, list[Path]]) -> dict[Path, fatbin.Archs]:
    return {path: fatbin.archs_of(path) for paths in binaries.values() for path in paths}


@check(
    "gpu.arch",
    Status.FAIL,
    "rebuild for this GPU: TE with NVTE_CUDA_ARCHS=<cc> (e.g. 90), apex with "
    "TORCH_CUDA_ARCH_LIST=<x.y> (e.g. 9.0)",
    isolated=True,  # asks the driver for the GPUs
)
def gpu_arch(ctx: Context) -> Outcome:
    """Each GPU has device code in TE's and apex's binaries (a cubin, or PTX that JIT-compiles)."""
    binaries = kernel_binaries()
    if not binaries:
        return skip("neither Transformer Engine nor apex is installed")
    scanned = binary_archs(binaries)
    archs = {p: a for p, a in scanned.items() if not a.empty}
    methods = sorted({a.method for a in scanned.values()})
    if not archs:
        return warn(
            f"no device code found in {len(scanned)} TE/apex binaries (read with {', '.join(methods)})",
            "a build without CUDA kernels: rebuild with NVTE_CUDA_ARCHS / TORCH_CUDA_ARCH_LIST set",
            binaries=[str(p) for p in scanned],
        )
    listing = {str(p): a.describe() for p, a in archs.items()}
    info = probes.gpu_info(ctx)
    if not info.gpus:
        compiled = "; ".join(f"{Path(p).name}: {d}" for p, d in listing.items()) or "no device code found"
        return skip(f"no GPU here to match ({compiled})", method=methods, binaries=listing)
    missing, jit = [], []
    for gpu in info.gpus:
        for path, found in archs.items():
            served = fatbin.runs_on(found, gpu.cc)
            if served is None:
                missing.append(
                    f"{path.name} has no code for sm_{gpu.cc} ({gpu.name}); has {found.describe()}"
                )
            elif served == "ptx":
                jit.append(f"{path.name} runs on sm_{gpu.cc} only through PTX JIT")
    details = {"method": methods, "binaries": listing, "gpus": [f"{g.name} sm_{g.cc}" for g in info.gpus]}
    if missing:
        return trip("; ".join(missing), **details)
    if jit:
        return warn(
            "; ".join(jit) + " (slow first start; fails if the driver is older than the compiler)", **details
        )
    ccs = ", ".join(sorted({f"sm_{g.cc}" for g in info.gpus}))
    return ok(f"{len(archs)} binaries carry cubins for {ccs} (read with {', '.join(methods)})", **details)
