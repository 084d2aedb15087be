"""GPU architectures, written once: which GPUs each SM number is, which CUDA release's nvcc compiles it, and from
which Transformer Engine release TE's own build carries code that runs on it.

A stack's ``cuda_archs`` (env/stacks.json, e.g. "80;90;100;103;120") names the GPU architectures its images serve:
the kernels compiled in the image (apex; TE's PyTorch extension has no device code) are built for exactly these
(TORCH_CUDA_ARCH_LIST), and every prebuilt kernel library (TE's core from its transformer-engine-cuXX wheel or the
NGC base) must carry code for at least these. The rules refuse what the stack's CUDA cannot compile or its TE
release does not carry; bake labels the list and its GPUs; the image tests read both from the fatbins.

Sources. CUDA: the CUDA Features Archive (12.8 adds sm_100/sm_101/sm_120; 12.9 adds sm_103 and sm_121; 13.0
renumbers sm_101 as sm_110 and drops sm_50-sm_72, which no stack serves). Compatibility: NVIDIA's Blackwell
Compatibility Guide, 1.2 (a cubin runs on GPUs of the same major and an equal or higher minor compute capability;
an sm_XXa cubin only on XX). TE: transformer_engine/common/CMakeLists.txt at tag v2.0 builds 100 and 120 by
default with CUDA >= 12.8 (v1.13: 70 80 89 90 only); from v2.8 (build_tools/utils.py) TE also builds sm_100a and,
with CUDA >= 12.9, sm_103a kernels; before that a B300 runs TE's sm_100 cubins. Read from the wheels of the TE
releases the stacks pin: their transformer-engine-cu12 and -cu13 libraries carry sm_70|75, 80, 89, 90, 100, 120
with sm_90a, 100a and 103a (cuobjdump 13.5 and the doctor's fatbin reader agree).

Standard library only: the smoke suite imports it inside images for the certificate.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

LABEL = "cuda-archs"
"""``io.mcore-images.cuda-archs``: the stack's cuda_archs, as env/stacks.json writes it."""
GPUS_LABEL = "gpus"
"""``io.mcore-images.gpus``: the GPUs those architectures are (``serves``)."""

_ARCH = re.compile(r"^([0-9]{2,3})([af]?)$")


@dataclass(frozen=True)
class Arch:
    """One GPU architecture by its SM number (compute capability major × 10 + minor)."""

    sm: int
    gpus: str
    """The GPUs of this compute capability, as labels, README and certificates name them."""
    first_cuda: str
    """The CUDA release whose nvcc first compiles it."""
    dropped_cuda: str | None = None
    """The CUDA release whose nvcc no longer compiles it (None: every release since ``first_cuda``)."""
    first_te: str | None = None
    """The first Transformer Engine release whose build carries code that runs on it (None: no floor recorded;
    every TE release our stacks can pin carries it)."""


TABLE: tuple[Arch, ...] = (
    Arch(75, "T4/RTX 20xx", "10.0"),
    Arch(80, "A100/A800/A30", "11.0"),
    Arch(86, "A10/A40/RTX 30xx", "11.1"),
    Arch(87, "Jetson AGX Orin", "11.4"),
    Arch(89, "L4/L40S/RTX 40xx", "11.8"),
    Arch(90, "H100/H200/GH200", "11.8"),
    Arch(100, "B200/GB200", "12.8", first_te="2.0"),
    Arch(101, "Jetson Thor (sm_110 from CUDA 13.0)", "12.8", dropped_cuda="13.0"),
    Arch(103, "B300/GB300", "12.9", first_te="2.0"),
    Arch(110, "Jetson Thor", "13.0"),
    Arch(120, "RTX PRO 6000 Blackwell/RTX 50xx", "12.8", first_te="2.0"),
    Arch(121, "DGX Spark (GB10)", "12.9", first_te="2.0"),
)
BY_SM: dict[int, Arch] = {a.sm: a for a in TABLE}


def parse(text: str | None) -> list[str]:
    """The architectures of a cuda_archs value ("80;90;100a" → ["80", "90", "100a"]), blanks dropped."""
    return [a.strip() for a in (text or "").split(";") if a.strip()]


def number(arch: str) -> int | None:
    """The SM number of one architecture ("100a" → 100); None for text that is not one."""
    match = _ARCH.match(arch)
    return int(match.group(1)) if match else None


def known(arch: str) -> Arch | None:
    """The table's entry for one architecture (an "a"/"f" suffix names the same GPU); None when unknown."""
    sm = number(arch)
    return BY_SM.get(sm) if sm is not None else None


def torch_arch(arch: str) -> str:
    """TORCH_CUDA_ARCH_LIST's spelling: the last digit is the minor ("100" → "10.0", "90a" → "9.0a")."""
    match = _ARCH.match(arch)
    if not match:
        raise ValueError(f"{arch!r} is not an SM number such as 90 or 100a")
    digits, suffix = match.groups()
    return f"{digits[:-1]}.{digits[-1]}{suffix}"


def serves(text: str | None) -> str:
    """What the architectures of a cuda_archs value are, one GPU list each: "sm_90 H100/H200/GH200; sm_100 …".
    The label ``io.mcore-images.gpus`` is this text (image_build/bake_file.py)."""
    parts = []
    for arch in parse(text):
        entry = known(arch)
        parts.append(f"sm_{arch} {entry.gpus if entry else 'unknown GPU'}")
    return "; ".join(parts)


def declared(stack: str | None, stacks_json: Path) -> str | None:
    """The cuda_archs env/stacks.json gives a stack, read as plain JSON (no schema library inside an image, so not
    through catalogue/stacks.py's raw_entries, the tooling's one reader of the file); None when the file, the stack
    or the field is missing."""
    if not stack:
        return None
    try:
        entries = json.loads(stacks_json.read_text("utf-8"))["stacks"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and entry.get("name") == stack and isinstance(entry.get("cuda_archs"), str):
            return entry["cuda_archs"]
    return None
