"""What the certificate records about the software and hardware a run used.

Which packages are recorded comes from the component catalogue (mcore_images.catalogue.components, standard
library only). Versions come from installed distributions (importlib.metadata), so reading them imports nothing;
CUDA, NCCL, cuDNN and GPU facts come from torch, the driver version from nvidia-smi (else the kernel module's
/proc/driver/nvidia/version), the C compiler's from gcc itself, the platform from Python
(``platform.machine()``: aarch64 in a Grace image, also under QEMU). cuDNN is recorded twice, on purpose:
packages.cudnn is torch's cuDNN wheel (the pin), or where the base image brings cuDNN without one (NGC) the release
torch loads; environment.cudnn is what torch loads in this process (cudnnGetVersion()), also on a CPU run, so a
second cuDNN taking the wheel's place shows.
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mcore_images import schemas
from mcore_images.catalogue import components, gpu_archs, platforms


def package_version(key: str) -> str | None:
    """Installed version of one catalogue component by its certificate key (None when absent). A component
    installed without distribution metadata (apex built from a source folder) is 'present' when it imports."""
    comp = components.by_certificate(key)
    if key == "python":
        return platform.python_version()
    if key == "gcc":
        return compiler_version()
    if (found := distribution_version(*comp.distributions)) is not None:
        return found
    if key == "cudnn":  # no wheel: a base image's own cuDNN (NGC), named by what torch loads
        code = loaded_cudnn()
        return components.cudnn_release(int(code)) if code and code.isdigit() else None
    try:
        found = bool(comp.modules) and importlib.util.find_spec(comp.modules[0]) is not None
    except ModuleNotFoundError:  # a parent package of the module is missing
        found = False
    return "present (no distribution metadata)" if found else None


def loaded_cudnn() -> str | None:
    """The cuDNN torch loads here as torch.backends.cudnn.version() gives it ('91900'); None where torch has none
    or is not imported yet (this imports nothing); 'error: …' where torch refuses the cuDNN it finds."""
    if "torch" not in sys.modules:
        return None
    from mcore_images.smoke.kit.transformer_engine import torch_cudnn

    code = torch_cudnn()
    return str(code) if code else None


def distribution_version(*names: str) -> str | None:
    """The installed version of the first of ``names`` (PyPI distributions) that is installed; None when none is."""
    for name in names:
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            continue
    return None


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


def source(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Whether this run is in an image's environment or a machine's own (a checkout on the host's Python).

    An image sets ``MCORE_IMAGES_STACK`` and points ``PIP_CONSTRAINT`` at the versions it was built and
    certified with (mcore_images.catalogue.constraints). The run is the image's environment when both are set and every
    constrained distribution is installed at exactly that version; anything else is the machine's tree, with
    what differs. Only an image environment's GPU run certifies a digest (policy.certificate_problems)."""
    env = os.environ if environ is None else environ
    stack, path = env.get("MCORE_IMAGES_STACK", ""), env.get("PIP_CONSTRAINT", "")
    out: dict[str, Any] = {"kind": schemas.MACHINE_TREE, "stack": stack or None, "constraints": path or None,
                           "differences": []}
    if not stack or not path:
        out["differences"].append("MCORE_IMAGES_STACK and PIP_CONSTRAINT are not both set (no image's settings)")
        return out
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        out["differences"].append(f"PIP_CONSTRAINT {path} cannot be read ({exc.__class__.__name__})")
        return out
    pins = [line.split("==", 1) for line in (raw.split("#", 1)[0].strip() for raw in lines) if "==" in line]
    if not pins:
        out["differences"].append(f"PIP_CONSTRAINT {path} pins nothing")
    for name, version in pins:
        try:
            have = md.version(name.strip())
        except md.PackageNotFoundError:
            have = None
        if have != version.strip():
            out["differences"].append(f"{name.strip()} {have or 'absent'}, the image pins {version.strip()}")
    out["pinned"] = len(pins)
    if (python := stack_python(stack, env)) and python != ".".join(platform.python_version_tuple()[:2]):
        out["differences"].append(f"python {platform.python_version()}, the image's stack {stack} has {python}")
    if not out["differences"]:
        out["kind"] = schemas.IMAGE_ENVIRONMENT
    return out


def stack_entries(stacks_json: Path) -> list[dict[str, Any]]:
    """The raw stack entries of an env/stacks.json, read without mcore_images.catalogue.stacks (no jsonschema inside an
    image's smoke, and SMOKE_MAY_IMPORT of tests/unit/repo/test_layout.py leaves it out), so a reader of its own
    beside that module's raw_entries, the tooling's; [] when the file is missing or not that shape."""
    try:
        entries = json.loads(stacks_json.read_text("utf-8"))["stacks"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


def stack_python(stack: str, env: Mapping[str, str]) -> str | None:
    """The Python (major.minor) env/stacks.json under ``MCORE_IMAGES_ROOT`` gives the stack; None when unknown."""
    if not env.get("MCORE_IMAGES_ROOT"):
        return None
    entries = stack_entries(Path(env["MCORE_IMAGES_ROOT"]) / "env" / "stacks.json")
    found = next((e for e in entries if e.get("name") == stack), None)
    return str(found["python"]) if found and found.get("python") else None


def declared_archs(environ: Mapping[str, str] | None = None) -> dict[str, str] | None:
    """The GPU architectures the image serves (its stack's cuda_archs in the env/stacks.json under
    ``MCORE_IMAGES_ROOT``) and the GPUs they are; None outside an image."""
    env = os.environ if environ is None else environ
    root = env.get("MCORE_IMAGES_ROOT")
    declared = gpu_archs.declared(env.get("MCORE_IMAGES_STACK"), Path(root) / "env" / "stacks.json") if root else None
    return {"declared": declared, "gpus": gpu_archs.serves(declared)} if declared else None


def packages() -> dict[str, str | None]:
    """Every package the certificate lists (mcore_images.catalogue.components), in catalogue order."""
    return {key: package_version(key) for key in components.certificate_packages()}


DRIVER_PROC = Path("/proc/driver/nvidia/version")
"""The loaded kernel module's version line ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  …"):
there wherever the driver is, also in a container or a replica whose PATH has no nvidia-smi."""


def driver_version(proc: Path = DRIVER_PROC) -> str | None:
    """NVIDIA driver version from nvidia-smi, else from the kernel module's /proc file; None where there is none."""
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=20, check=True,
            ).stdout
            if out.strip():
                return out.splitlines()[0].strip()
        except (OSError, subprocess.SubprocessError):
            pass
    try:
        text = proc.read_text(errors="replace")
    except OSError:
        return None
    found = re.search(r"Kernel Module(?: for \S+)?\s+([0-9]+\.[0-9]+(?:\.[0-9]+)?)", text)
    return found.group(1) if found else None


def collect(world: int, nodes: int, cpu: bool) -> dict[str, Any]:
    """Software and hardware facts of this rank (rank 0's go into the certificate)."""
    import torch

    info: dict[str, Any] = {"packages": packages(), "cuda": torch.version.cuda, "cudnn": loaded_cudnn(),
                            "source": source(), "gpu_archs": declared_archs(), "platform": platforms.here()}
    if cpu or not torch.cuda.is_available():
        info.update(nccl=None, gpu={"model": "CPU (gloo)", "count": 0, "driver": None})
        return info
    nccl = torch.cuda.nccl.version()
    info["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
    info["gpu"] = {
        "model": torch.cuda.get_device_name(),
        "count": world,
        "per_node": torch.cuda.device_count(),
        "nodes": nodes,
        "driver": driver_version(),
        "capability": ".".join(map(str, torch.cuda.get_device_capability())),
    }
    return info
