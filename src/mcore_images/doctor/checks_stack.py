"""Python, PyTorch, CUDA driver and GPU architecture: the floor megatron-core stands on."""

from __future__ import annotations

import sys
from pathlib import Path

from mcore_images.catalogue import gpu_archs
from mcore_images.catalogue.upstream import MCORE_NEW_FLOOR, MCORE_PYTHON, MCORE_TORCH
from mcore_images.catalogue.versions import at_least
from mcore_images.doctor import fatbin, probes
from mcore_images.doctor.model import Context, Outcome, Status, check, ok, skip, trip, warn


def python_version() -> tuple[int, int, int]:
    return sys.version_info[:3]


def installed_mcore() -> str | None:
    where = probes.locate("megatron.core")
    return probes.mcore_version(where) if where else None


@check(
    "python.version",
    Status.FAIL,
    f"use Python >= {MCORE_PYTHON} (a python{MCORE_PYTHON} venv or image); megatron-core >= {MCORE_NEW_FLOOR} "
    "requires it",
    isolated=True,  # finding megatron.core imports the `megatron` package
)
def python_floor(ctx: Context) -> Outcome:
    """The Python newer megatron-core releases require (catalogue.upstream: MCORE_PYTHON from MCORE_NEW_FLOOR)."""
    version = ".".join(map(str, python_version()))
    if at_least(version, MCORE_PYTHON):
        return ok(f"Python {version}", python=version)
    mcore = installed_mcore()
    if mcore and at_least(mcore, MCORE_NEW_FLOOR):
        return trip(
            f"Python {version} with megatron-core {mcore}: megatron-core >= {MCORE_NEW_FLOOR} requires Python >= "
            f"{MCORE_PYTHON}",
            python=version,
            megatron_core=mcore,
        )
    return warn(
        f"Python {version}: fine for megatron-core < {MCORE_NEW_FLOOR} only (installed: {mcore or 'none'})",
        python=version,
        megatron_core=mcore,
    )


@check(
    "torch.version",
    Status.FAIL,
    f"pip install 'torch>={MCORE_TORCH}' (a CUDA build); megatron-core >= {MCORE_NEW_FLOOR} needs it",
    isolated=True,
)
def torch_version(ctx: Context) -> Outcome:
    """PyTorch is installed, imports, has a version, and is the one newer megatron-core releases require
    (catalogue.upstream: MCORE_TORCH from MCORE_NEW_FLOOR)."""
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
            f"reinstall torch: pip install --force-reinstall 'torch>={MCORE_TORCH}' (a CUDA build)",
            path=facts.path,
        )
    mcore = installed_mcore()
    if not at_least(version, MCORE_TORCH):
        message = f"torch {version} is older than {MCORE_TORCH}"
        if mcore and at_least(mcore, MCORE_NEW_FLOOR):
            return trip(f"{message}, which megatron-core {mcore} requires", torch=version)
        return warn(f"{message}: megatron-core >= {MCORE_NEW_FLOOR} will not run on it", torch=version)
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


def binary_archs(binaries: dict[str, list[Path]]) -> dict[Path, fatbin.Archs]:
    return {path: fatbin.archs_of(path) for paths in binaries.values() for path in paths}


def declared_archs(ctx: Context) -> str | None:
    """The GPU architectures the image serves: its stack's cuda_archs (MCORE_IMAGES_STACK) in the env/stacks.json
    the image carries under MCORE_IMAGES_ROOT (the io.mcore-images.cuda-archs label, which a container cannot
    read); None outside an image."""
    root = ctx.environ.get("MCORE_IMAGES_ROOT")
    return gpu_archs.declared(ctx.environ.get("MCORE_IMAGES_STACK"), Path(root) / "env" / "stacks.json") \
        if root else None


def _fix(kinds: set[str], cc: int) -> str:
    """The one-line fix for a GPU some kernel binary has no code for: an image that serves it, or a rebuild."""
    where = f"use an image whose io.mcore-images.cuda-archs include {cc}"
    if "apex" in kinds:
        return f"{where}, or add {cc} to the stack's cuda_archs in env/stacks.json and rebuild (apex compiles for it)"
    return f"{where}, or install a Transformer Engine whose transformer-engine-cuXX wheel carries sm_{cc}"


@check(
    "gpu.arch",
    Status.FAIL,
    "use an image whose io.mcore-images.cuda-archs include this GPU's compute capability (e.g. 90 for H100)",
    isolated=True,  # imports torch and asks it for the GPUs
)
def gpu_arch(ctx: Context) -> Outcome:
    """Each GPU torch sees has device code in TE's and apex's binaries (a cubin, or PTX that JIT-compiles), and is
    one of the architectures the image declares."""
    binaries = fatbin.kernel_binaries(probes.locate)
    declared = declared_archs(ctx)
    if not binaries:
        return skip("neither Transformer Engine nor apex is installed")
    scanned = binary_archs(binaries)
    kind_of = {path: kind for kind, paths in binaries.items() for path in paths}
    archs = {p: a for p, a in scanned.items() if not a.empty}
    methods = sorted({a.method for a in scanned.values()})
    details = {"method": methods, "binaries": {str(p): a.describe() for p, a in archs.items()},
               "declared": declared, "declared_gpus": gpu_archs.serves(declared) if declared else None}
    if not archs:
        return warn(
            f"no device code found in {len(scanned)} TE/apex binaries (read with {', '.join(methods)})",
            "reinstall TE's transformer-engine-cuXX wheel, or rebuild apex with TORCH_CUDA_ARCH_LIST set",
            **details,
        )
    gpus, why = probes.torch_gpus(ctx)
    if not gpus:
        compiled = "; ".join(f"{p.name}: {a.describe()}" for p, a in archs.items())
        return skip(f"no GPU to match: {why} ({compiled}; declared: {declared or 'none'})", **details)
    details["gpus"] = [f"{g.name} sm_{g.cc}" for g in gpus]
    missing, jit, kinds, lacking = [], [], set(), []
    for gpu in gpus:
        for path, found in archs.items():
            served = fatbin.runs_on(found, gpu.cc)
            if served is None:
                missing.append(f"{path.name} has no code for sm_{gpu.cc} ({gpu.name}); has {found.describe()}")
                kinds.add(kind_of[path])
                lacking.append(gpu.cc)
            elif served == "ptx":
                jit.append(f"{path.name} runs on sm_{gpu.cc} only through PTX JIT")
    if missing:
        return trip("; ".join(missing), _fix(kinds, lacking[0]), **details)
    if jit:
        return warn(
            "; ".join(jit) + " (slow first start; fails if the driver is older than the compiler)", **details
        )
    declared_sms = {gpu_archs.number(a) for a in gpu_archs.parse(declared)}
    outside = sorted({g.cc for g in gpus if declared is not None and g.cc not in declared_sms})
    if outside:
        names = ", ".join(f"sm_{g.cc} ({g.name})" for g in gpus if g.cc in outside)
        return warn(
            f"{names}: the kernels carry code for it, but the image declares {declared} ({details['declared_gpus']})"
            ", so no certificate of this image speaks for this GPU",
            f"use an image whose io.mcore-images.cuda-archs include {outside[0]}, or certify this one on this GPU",
            **details,
        )
    ccs = ", ".join(sorted({f"sm_{g.cc}" for g in gpus}))
    said = f"; declared {declared}" if declared else ""
    return ok(f"{len(archs)} binaries carry cubins for {ccs} (read with {', '.join(methods)}){said}", **details)
