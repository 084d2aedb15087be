"""NCCL: the library actually loaded is the one torch expects, and NVLink multicast is a conscious choice."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

from mcore_images.doctor import probes
from mcore_images.doctor.model import Context, Outcome, Status, check, ok, skip, trip, warn


def nccl_text(code: int | None) -> str:
    if code is None:
        return "?"
    return (
        f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
        if code >= 20900
        else f"{code // 1000}.{code % 1000 // 100}.{code % 100}"
    )


def torch_nccl_pin() -> tuple[str, str] | None:
    """(distribution, version) that torch's wheel pins for NCCL, from its Requires-Dist."""
    try:
        requires = metadata.requires("torch") or []
    except metadata.PackageNotFoundError:
        return None
    for line in requires:
        if match := re.match(r"(nvidia-nccl[\w-]*)\s*==\s*([\d.]+)", line):
            return match.group(1).lower().replace("_", "-"), match.group(2)
    return None


def loaded_nccl(ctx: Context) -> dict[str, int | None]:
    paths = probes.loaded_libraries(ctx, r"libnccl\.so(\.\d+)*")
    return {path: probes.library_version(path, "ncclGetVersion", by_reference=True) for path in paths}


@check(
    "nccl.version",
    Status.FAIL,
    "use the NCCL torch was built with: pip install <the nvidia-nccl-* "
    "version torch pins>, and drop other libnccl.so.2 from LD_LIBRARY_PATH / LD_PRELOAD",
    isolated=True,
)
def nccl_version(ctx: Context) -> Outcome:
    """torch's NCCL, the pip nvidia-nccl-* wheel and the libnccl.so.2 really loaded agree (verl RFC #6266)."""
    facts = probes.torch_facts()
    if facts is None or facts.cuda is None:
        return skip("no CUDA build of torch")
    pin = torch_nccl_pin()
    pips = probes.dists_matching(r"nvidia-nccl(-cu\d+)?")
    details: dict = {"torch_pin": "==".join(pin) if pin else None, "pip": pips}
    if pin and pin[0] in pips and pips[pin[0]] != pin[1]:
        return trip(
            f"torch {facts.version} pins {pin[0]}=={pin[1]} but {pips[pin[0]]} is installed",
            f"pip install {pin[0]}=={pin[1]}",
            **details,
        )
    if error := probes.import_error(ctx, "torch"):
        return skip(f"torch does not import ({error}); pip NCCL {pips or 'none'}", **details)
    torch = probes.imported(ctx, "torch")
    raw = torch.cuda.nccl.version() if hasattr(torch.cuda, "nccl") else None
    reported = nccl_text(raw) if isinstance(raw, int) else ".".join(map(str, raw)) if raw else None
    loaded = loaded_nccl(ctx)
    details.update(torch_reports=reported, loaded={p: nccl_text(v) for p, v in loaded.items()})
    versions = {nccl_text(v) for v in loaded.values() if v is not None}
    if len({str(Path(p).resolve()) for p in loaded}) > 1:
        return trip(f"{len(loaded)} different libnccl.so are loaded: {', '.join(loaded)}", **details)
    if reported and versions and versions != {reported}:
        return trip(
            f"torch reports NCCL {reported} but the process loaded {', '.join(sorted(versions))} "
            f"from {', '.join(loaded)}",
            **details,
        )
    expected = pin[1] if pin else None
    if expected and versions and versions != {expected}:
        return trip(
            f"torch pins NCCL {expected} but the process loaded {', '.join(sorted(versions))} from "
            f"{', '.join(loaded)}",
            **details,
        )
    if unknown := [p for p, v in loaded.items() if v is None]:
        return warn(
            f"{', '.join(unknown)} does not answer ncclGetVersion(): its NCCL cannot be matched with torch's "
            f"({reported or '?'})",
            "load the NCCL torch pins: drop other libnccl.so.2 from LD_LIBRARY_PATH / LD_PRELOAD",
            **details,
        )
    where = f" from {next(iter(loaded))}" if loaded else " (statically linked or not loaded yet)"
    return ok(f"NCCL {reported or '?'}{where}", **details)


MULTICAST_VARS = ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")


@check(
    "nccl.nvls",
    Status.WARN,
    "on shared or virtualised multi-GPU hosts set NCCL_NVLS_ENABLE=0 "
    "TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1; enable NVLS only where the fabric allows",
    isolated=True,  # asks the driver for the GPUs
)
def nccl_nvls(ctx: Context) -> Outcome:
    """NVLink multicast (NVLS) is set on purpose on multi-GPU hosts; it is on by default in NCCL."""
    values = {name: ctx.environ.get(name) for name in MULTICAST_VARS}
    value = values["NCCL_NVLS_ENABLE"]
    if value not in (None, "0", "1"):
        return trip(f"NCCL_NVLS_ENABLE={value!r} is not 0 or 1", **values)
    gpus = probes.gpu_info(ctx).gpus
    if len(gpus) < 2:
        return ok(f"{len(gpus)} GPU(s): NVLink multicast does not apply (NCCL_NVLS_ENABLE={value})", **values)
    if value is None:
        return trip(
            f"{len(gpus)} GPUs and NCCL_NVLS_ENABLE unset: NCCL uses NVLink multicast where it can", **values
        )
    state = "off" if value == "0" else "on"
    return ok(f"NVLink multicast explicitly {state} (NCCL_NVLS_ENABLE={value}) on {len(gpus)} GPUs", **values)
