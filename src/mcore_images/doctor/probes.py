"""Facts the checks share, each found the cheapest way and only when a check asks for it.

Static reads (a package's version.py, dist metadata, /proc) come first because they work even
when the package cannot be imported; imports happen lazily through `imported()` and are cached
per run, so a broken torch is imported (and fails) once, and every check that needs it says so.
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.metadata as metadata
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from mcore_images.doctor import fatbin
from mcore_images.doctor.model import Context

IMPORT = "import:"
"""Prefix of the cache key of an import: `import:torch`."""
GPUS = "gpus"
"""Cache key of the driver query."""
TORCH_GPUS = "torch-gpus"
"""Cache key of the GPUs as torch sees them."""
NOT_RETRIED = "not retried by the doctor"
"""Ends the ImportError the worker raises for an import that crashed or hung in an earlier check."""


def imported(ctx: Context, name: str) -> ModuleType:
    """Import `name` once per run; the ImportError (or anything else it raised) is re-raised each time."""
    return ctx.cached(IMPORT + name, lambda: importlib.import_module(name))


def not_retried(error: str) -> bool:
    """True for the error of an import that an earlier check found to crash or hang: fix that one first."""
    return NOT_RETRIED in error


def import_error(ctx: Context, name: str) -> str | None:
    """None when `name` imports, else the one-line error it raised."""
    try:
        imported(ctx, name)
    except Exception as error:
        return f"{type(error).__name__}: {error}".splitlines()[0]
    return None


def locate(name: str) -> Path | None:
    """Where `name` would be imported from, without running it (find_spec imports parents only).

    Returns the package directory (or module file); None when it is not installed. A module that a
    test or a caller already put in sys.modules counts as present.
    """
    module = sys.modules.get(name)
    if module is not None:
        origin = getattr(getattr(module, "__spec__", None), "origin", None) or getattr(
            module, "__file__", None
        )
        if not origin:
            return Path(f"<{name} in sys.modules>")
        return Path(origin).parent if origin.endswith("__init__.py") else Path(origin)
    return fatbin.find_spec_path(name)


def dist_version(*names: str) -> tuple[str, str] | None:
    """(distribution name, version) of the first installed distribution among `names`."""
    for name in names:
        try:
            return name, metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def owned_version(where: Path, relative: str, *names: str) -> str | None:
    """Version of the first distribution among `names` whose files hold `where` (`relative` is the
    package's path inside the distribution); a dist-info of another copy says nothing about this one."""
    for name in names:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        if Path(str(dist.locate_file(relative))).resolve() == where.resolve():
            return dist.version
    return None


def module_version(module: ModuleType) -> str | None:
    """An imported module's `__version__`, None when it has none."""
    version = getattr(module, "__version__", None)
    return str(version) if version else None


def dists_matching(pattern: str) -> dict[str, str]:
    """Installed distributions whose normalised name matches `pattern` → version."""
    found: dict[str, str] = {}
    regex = re.compile(pattern)
    for dist in metadata.distributions():
        name = re.sub(r"[-_.]+", "-", (dist.metadata["Name"] or "")).lower()
        if name and regex.fullmatch(name):
            found[name] = dist.version
    return found


def read_assignments(path: Path, names: tuple[str, ...]) -> dict[str, str]:
    """Top-level `NAME = 'value'` / `NAME: T = 'value'` / `NAME = 3` lines of a .py file, read as text."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return {}
    found: dict[str, str] = {}
    for name in names:
        match = re.search(rf"^{name}\s*(?::[^=\n]+)?=\s*['\"]?([\w.+-]+)['\"]?", text, re.MULTILINE)
        if match:
            found[name] = match.group(1)
    return found


@dataclass(frozen=True)
class TorchFacts:
    """torch's version and CUDA version read from torch/version.py, without importing torch.

    `version` None: this copy has no version.py with `__version__` and no dist-info of its own (a
    partial or foreign copy); its CUDA is then unknown too.
    """

    version: str | None
    cuda: str | None
    path: Path


def torch_facts() -> TorchFacts | None:
    """None when torch is not installed."""
    where = locate("torch")
    if where is None:
        return None
    module = sys.modules.get("torch")
    if module is not None and hasattr(module, "__version__"):  # already imported (or a test fake)
        cuda = getattr(getattr(module, "version", None), "cuda", None)
        return TorchFacts(str(module.__version__), cuda, where)
    values = read_assignments(where / "version.py", ("__version__", "cuda"))
    cuda = values.get("cuda")
    version = values.get("__version__") or owned_version(where, "torch", "torch")
    return TorchFacts(version, None if cuda in (None, "None") else cuda, where)


def mcore_version(where: Path) -> str | None:
    """Version of the megatron/core copy at `where`: its package_info.py, else the dist-info that
    installed this copy; None when it has neither."""
    info = read_assignments(where / "package_info.py", ("MAJOR", "MINOR", "PATCH"))
    if len(info) == 3:
        return f"{info['MAJOR']}.{info['MINOR']}.{info['PATCH']}"
    return owned_version(where, "megatron/core", "megatron-core", "megatron_core")


def loaded_libraries(ctx: Context, pattern: str) -> list[str]:
    """Paths of mapped shared objects whose file name matches `pattern` (from /proc/self/maps)."""
    try:
        lines = (ctx.proc / "self" / "maps").read_text().splitlines()
    except OSError:
        return []
    regex = re.compile(pattern)
    paths: list[str] = []
    for line in lines:
        parts = line.split(None, 5)
        path = parts[5] if len(parts) == 6 else ""
        if path.startswith("/") and regex.fullmatch(Path(path).name) and path not in paths:
            paths.append(path)
    return paths


def library_version(path: str, symbol: str, by_reference: bool) -> int | None:
    """Call a version function (`ncclGetVersion(int*)`, `cudnnGetVersion()`) in a loaded library."""
    try:
        lib = ctypes.CDLL(path)
        func = getattr(lib, symbol)
        if by_reference:
            value = ctypes.c_int(0)
            return value.value if func(ctypes.byref(value)) == 0 else None
        func.restype = ctypes.c_size_t
        return int(func())
    except (OSError, AttributeError):
        return None


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    cc: int  # compute capability as 90, 100, ...


@dataclass(frozen=True)
class GpuInfo:
    """What the driver says: no driver → driver_cuda None; no device → gpus empty."""

    driver_cuda: int | None  # e.g. 13000 for CUDA 13.0
    driver_version: str | None
    gpus: tuple[Gpu, ...] = ()
    note: str = ""


def _driver_release(ctx: Context) -> str | None:
    try:
        text = (ctx.proc / "driver" / "nvidia" / "version").read_text()
    except OSError:
        return None
    match = re.search(r"Kernel Module(?: for \S+)?\s+([\d.]+)", text)
    return match.group(1) if match else None


def gpu_info(ctx: Context) -> GpuInfo:
    """Ask libcuda directly (ctypes): works without torch and without creating a CUDA context."""
    return ctx.cached(GPUS, lambda: _query_libcuda(ctx))


def torch_gpus(ctx: Context) -> tuple[tuple[Gpu, ...], str]:
    """The GPUs torch sees, each with the compute capability its kernels launch on; with none, the reason."""
    return ctx.cached(TORCH_GPUS, lambda: _ask_torch(ctx))


def _ask_torch(ctx: Context) -> tuple[tuple[Gpu, ...], str]:
    if error := import_error(ctx, "torch"):
        return (), f"torch does not import ({error})"
    cuda = imported(ctx, "torch").cuda
    if not cuda.is_available():
        return (), "torch.cuda.is_available() is False"
    gpus = []
    for index in range(cuda.device_count()):
        major, minor = cuda.get_device_capability(index)
        gpus.append(Gpu(index, str(cuda.get_device_name(index)), int(major) * 10 + int(minor)))
    return tuple(gpus), "" if gpus else "torch counts no CUDA device"


LIBCUDA = "libcuda.so.1"


def _query_libcuda(ctx: Context) -> GpuInfo:
    release = _driver_release(ctx)
    try:
        cuda = ctypes.CDLL(LIBCUDA)
    except OSError:
        return GpuInfo(None, release, (), "no NVIDIA driver (libcuda.so.1 not found)")
    try:
        return _ask_driver(cuda, release)
    except (AttributeError, OSError) as error:  # a stub or partial libcuda: no usable driver
        return GpuInfo(None, release, (), f"libcuda.so.1 is unusable: {error}")


def _ask_driver(cuda: ctypes.CDLL, release: str | None) -> GpuInfo:
    version = ctypes.c_int(0)
    driver_cuda = version.value if cuda.cuDriverGetVersion(ctypes.byref(version)) == 0 else None
    status = cuda.cuInit(0)
    if status != 0:
        return GpuInfo(driver_cuda, release, (), f"cuInit failed with CUresult {status} (100 = no device)")
    count = ctypes.c_int(0)
    cuda.cuDeviceGetCount(ctypes.byref(count))
    gpus = []
    for index in range(count.value):
        device, major, minor = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(0)
        cuda.cuDeviceGet(ctypes.byref(device), index)
        cuda.cuDeviceGetAttribute(ctypes.byref(major), 75, device)  # COMPUTE_CAPABILITY_MAJOR
        cuda.cuDeviceGetAttribute(ctypes.byref(minor), 76, device)  # COMPUTE_CAPABILITY_MINOR
        name = ctypes.create_string_buffer(256)
        cuda.cuDeviceGetName(name, 256, device)
        gpus.append(Gpu(index, name.value.decode(errors="replace"), major.value * 10 + minor.value))
    return GpuInfo(driver_cuda, release, tuple(gpus))


def cuda_code(version: str) -> int:
    """'13.0' → 13000, the form cuDriverGetVersion uses."""
    parts = [int(p) for p in re.findall(r"\d+", version)[:2]] + [0]
    return parts[0] * 1000 + parts[1] * 10


def cuda_text(code: int) -> str:
    return f"{code // 1000}.{code % 1000 // 10}"
