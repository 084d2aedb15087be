"""What the certificate records about the software and hardware a run used.

Which packages are recorded comes from the component catalogue (mcore_images.components, standard
library only). Versions come from installed distributions (importlib.metadata), so reading them imports nothing;
CUDA, NCCL, cuDNN and GPU facts come from torch, the driver version from nvidia-smi, the C compiler's from
gcc itself.
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import platform
import shutil
import subprocess
from typing import Any

from mcore_images import components


def package_version(key: str) -> str | None:
    """Installed version of one catalogue component by its certificate key (None when absent). A component
    installed without distribution metadata (apex built from a source folder) is 'present' when it imports."""
    comp = components.by_certificate(key)
    if key == "python":
        return platform.python_version()
    if key == "gcc":
        return compiler_version()
    for dist in comp.distributions:
        try:
            return md.version(dist)
        except md.PackageNotFoundError:
            continue
    try:
        found = bool(comp.modules) and importlib.util.find_spec(comp.modules[0]) is not None
    except ModuleNotFoundError:  # a parent package of the module is missing
        found = False
    return "present (no distribution metadata)" if found else None


def compiler_version() -> str | None:
    """The run-time C compiler's full version (`gcc -dumpfullversion`), None where there is none."""
    gcc = shutil.which("gcc")
    if gcc is None:
        return None
    try:
        out = subprocess.run([gcc, "-dumpfullversion"], capture_output=True, text=True, timeout=20, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def packages() -> dict[str, str | None]:
    """Every package the certificate lists (mcore_images.components), in catalogue order."""
    return {key: package_version(key) for key in components.certificate_packages()}


def driver_version() -> str | None:
    """NVIDIA driver version from nvidia-smi, None where there is none."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.splitlines()[0].strip() if out.strip() else None


def collect(world: int, nodes: int, cpu: bool) -> dict[str, Any]:
    """Software and hardware facts of this rank (rank 0's go into the certificate)."""
    import torch

    info: dict[str, Any] = {"packages": packages(), "cuda": torch.version.cuda}
    if cpu or not torch.cuda.is_available():
        info.update(nccl=None, cudnn=None, gpu={"model": "CPU (gloo)", "count": 0, "driver": None})
        return info
    nccl = torch.cuda.nccl.version()
    info["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
    cudnn = torch.backends.cudnn.version()
    info["cudnn"] = str(cudnn) if cudnn else None
    info["gpu"] = {
        "model": torch.cuda.get_device_name(),
        "count": world,
        "per_node": torch.cuda.device_count(),
        "nodes": nodes,
        "driver": driver_version(),
        "capability": ".".join(map(str, torch.cuda.get_device_capability())),
    }
    return info
