"""Which GPU architectures a CUDA binary carries, read from the binary itself.

`cuobjdump --list-elf/--list-ptx` is the authority when it is on PATH. Without it we walk the
ELF's `.nv_fatbin` section: each fatbin entry header stores its kind (PTX or cubin) and its
SM number in plain fields even when the payload is compressed, so no decompression is needed.
A string scan for "sm_90" would be unreliable: compressed payloads hide the text.

Entry header fields used: kind (u16 @0: 1 PTX, 2 cubin), header size (u32 @4), payload size
(u64 @8), SM (u32 @28), flags (u32 @40; bit 20 marks an arch-specific "sm_90a" cubin). Checked
entry for entry against cuobjdump 13.5 on TE 2.20.2's libtransformer_engine.so (sm_75 … sm_120
with sm_90a/100a/103a/107a), on TE 2.16.0's (cu12) and 2.17.1's (cu13), and on libcurand 10.4.

Standard library only, and self-contained: the image tests run this file in an image that has no tooling
(`python -c "$(cat fatbin.py)"` prints the kernel binaries and their architectures as JSON).
"""

from __future__ import annotations

import importlib.util
import json
import mmap
import re
import shutil
import struct
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

FATBIN_MAGIC = 0xBA55ED50
KIND_PTX, KIND_ELF = 1, 2
ARCH_SPECIFIC = 1 << 20  # flags bit of an "sm_XXa" cubin: runs on exactly that compute capability
_LISTED = re.compile(r"\.sm_(\d+)([a-z]?)\.(cubin|ptx)\s*$")


@dataclass
class Archs:
    """SM numbers found in one binary; `method` says how they were read."""

    cubin: set[int] = field(default_factory=set)
    specific: set[int] = field(default_factory=set)  # sm_XXa cubins
    ptx: set[int] = field(default_factory=set)
    method: str = ""

    @property
    def empty(self) -> bool:
        return not self.cubin and not self.specific and not self.ptx

    def describe(self) -> str:
        parts = [f"sm_{a}" for a in sorted(self.cubin)] + [f"sm_{a}a" for a in sorted(self.specific)]
        return ", ".join(parts + [f"compute_{a} (PTX)" for a in sorted(self.ptx)]) or "no device code"


def runs_on(archs: Archs, cc: int) -> str | None:
    """How code for GPU `cc` (e.g. 90) is served: 'cubin', 'ptx' (JIT at load) or None (cannot run).

    A cubin runs on the same major at an equal or higher minor, an sm_XXa cubin only on XX itself;
    PTX JIT-compiles for any newer GPU.
    """
    if cc in archs.specific or any(a // 10 == cc // 10 and a <= cc for a in archs.cubin):
        return "cubin"
    if any(a <= cc for a in archs.ptx):
        return "ptx"
    return None


def elf_section(data: bytes | mmap.mmap, name: str) -> bytes | None:
    """Contents of one named section of a 64-bit little-endian ELF, or None."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if not shoff or shstrndx >= shnum:
        return None

    def header(i: int) -> tuple[int, int, int]:
        base = shoff + i * shentsize
        (name_off,) = struct.unpack_from("<I", data, base)
        offset, size = struct.unpack_from("<QQ", data, base + 0x18)
        return name_off, offset, size

    _, str_off, str_size = header(shstrndx)
    names = data[str_off : str_off + str_size]
    want = name.encode()
    for i in range(shnum):
        name_off, offset, size = header(i)
        end = names.find(b"\0", name_off)
        if names[name_off:end] == want:
            return data[offset : offset + size]
    return None


def parse_fatbin(blob: bytes) -> Archs:
    """Walk every fatbin in a `.nv_fatbin` section and collect (kind, sm) from each entry header."""
    found = Archs(method="fatbin headers (.nv_fatbin)")
    pos = 0
    while pos + 16 <= len(blob):
        magic, _version, head, size = struct.unpack_from("<IHHQ", blob, pos)
        if magic != FATBIN_MAGIC:
            pos += 8  # fatbins are 8-byte aligned; skip padding between them
            continue
        entry, end = pos + head, min(pos + head + size, len(blob))
        while entry + 44 <= end:
            kind, _ver, entry_head, payload = struct.unpack_from("<HHIQ", blob, entry)
            (sm,) = struct.unpack_from("<I", blob, entry + 28)
            (flags,) = struct.unpack_from("<I", blob, entry + 40)
            if entry_head == 0:
                break
            if kind == KIND_PTX:
                found.ptx.add(sm)
            elif kind == KIND_ELF:
                (found.specific if flags & ARCH_SPECIFIC else found.cubin).add(sm)
            entry += entry_head + payload
        pos = pos + head + size
    return found


def from_file(path: Path) -> Archs:
    """Read the fatbin headers of a shared object, mapped rather than read: TE's core is hundreds of MB."""
    with path.open("rb") as handle:
        if path.stat().st_size < 64:
            return Archs(method="fatbin headers (.nv_fatbin)")
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            section = elf_section(data, ".nv_fatbin")
    return parse_fatbin(section) if section else Archs(method="fatbin headers (.nv_fatbin)")


def from_cuobjdump(path: Path, tool: str) -> Archs | None:
    """List cubins and PTX with cuobjdump; None when it cannot read the file."""
    found = Archs(method=f"cuobjdump ({tool})")
    for flag in ("--list-elf", "--list-ptx"):
        try:
            out = subprocess.run([tool, flag, str(path)], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return None
        # exit 255 with "does not contain device code" is a valid empty answer
        for line in out.stdout.splitlines():
            if match := _LISTED.search(line):
                sm, suffix, kind = int(match.group(1)), match.group(2), match.group(3)
                bucket = found.ptx if kind == "ptx" else found.specific if suffix == "a" else found.cubin
                bucket.add(sm)
    return found


def archs_of(path: Path, cuobjdump: str | None = None) -> Archs:
    """cuobjdump when available (`cuobjdump` None → look on PATH), else the fatbin headers."""
    tool = cuobjdump or shutil.which("cuobjdump")
    if tool and (listed := from_cuobjdump(path, tool)) is not None:
        return listed
    return from_file(path)


# ---------------------------------------------------------------------------------------------
# Which binaries of an environment carry the kernels a stack serves GPUs with, and how their code compares with a
# declared list of architectures (a stack's cuda_archs, e.g. "80;90;100;103;120").

APEX_MODULES = ("fused_layer_norm_cuda", "amp_C", "fused_weight_gradient_mlp_cuda")
"""apex's CUDA extensions megatron-core uses."""
_DECLARED = re.compile(r"^([0-9]{2,3})([af]?)$")


def find_spec_path(name: str) -> Path | None:
    """Where `name` would be imported from, without running it; None when it is not installed."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return Path(spec.origin) if spec.origin else None


def kernel_binaries(locate: Callable[[str], Path | None] = find_spec_path) -> dict[str, list[Path]]:
    """TE's core library (te-core), TE's PyTorch extension (te-torch) and apex's CUDA extensions (apex), found
    without importing them. TE's optional extras (libnccl_ep.so: sm_90+ only) are left out: they must not fail
    an A100."""
    found: dict[str, list[Path]] = {}
    te = locate("transformer_engine")
    inside = te if te is not None and te.is_dir() else None
    if core := sorted(p for p in inside.rglob("libtransformer_engine*.so*") if p.is_file()) if inside else []:
        found["te-core"] = core
    # the extension sits in TE's wheel_lib/ (TE 2.x loads it from there), or at the top of site-packages
    ext = sorted(p for p in inside.rglob("transformer_engine_torch*.so") if p.is_file()) if inside else []
    if not ext and (top := locate("transformer_engine_torch")) is not None and top.is_file():
        ext = [top]
    if ext:
        found["te-torch"] = ext
    # compiled extensions only: where apex is absent, fused_weight_gradient_mlp_cuda is this project's Python module
    if apex := [p for name in APEX_MODULES if (p := locate(name)) is not None and p.is_file() and p.suffix == ".so"]:
        found["apex"] = apex
    return found


def _declared(declared: Iterable[str]) -> list[tuple[str, int, bool]]:
    """(text, SM number, arch-specific) of each declared architecture; an "f" suffix counts as the plain SM."""
    out = []
    for arch in declared:
        match = _DECLARED.match(arch)
        if not match:
            raise ValueError(f"{arch!r} is not an SM number such as 90 or 100a")
        out.append((arch, int(match.group(1)), match.group(2) == "a"))
    return out


def missing(archs: Archs, declared: Iterable[str]) -> list[str]:
    """Declared architectures no cubin of `archs` runs on: the rule for a prebuilt library, which must carry at
    least them (an "a" suffix asks for that arch-specific cubin; PTX, JIT-compiled at load, does not count)."""
    out = []
    for arch, sm, specific in _declared(declared):
        runs = sm in archs.specific if specific else runs_on(Archs(cubin=archs.cubin, specific=archs.specific), sm)
        if not runs:
            out.append(f"sm_{arch}")
    return out


def undeclared(archs: Archs, declared: Iterable[str]) -> list[str]:
    """Code `archs` holds for architectures not declared: for a binary compiled here, whose code must be
    exactly the declared list (with `missing`), since its build is given that list and nothing else."""
    wanted = _declared(declared)
    plain = {sm for _, sm, specific in wanted if not specific}
    specific = {sm for _, sm, is_specific in wanted if is_specific}
    return ([f"sm_{sm}" for sm in sorted(archs.cubin - plain)]
            + [f"sm_{sm}a" for sm in sorted(archs.specific - specific)]
            + [f"compute_{sm} (PTX)" for sm in sorted(archs.ptx)])


def scan(binaries: dict[str, list[Path]]) -> list[dict[str, object]]:
    """Each binary's kind, path and architectures, as plain data (what `main` prints)."""
    out: list[dict[str, object]] = []
    for kind, paths in binaries.items():
        for path in paths:
            found = archs_of(path)
            out.append({"kind": kind, "path": str(path), "cubin": sorted(found.cubin),
                        "specific": sorted(found.specific), "ptx": sorted(found.ptx), "method": found.method})
    return out


def from_scan(entry: dict[str, object]) -> Archs:
    """An Archs back from one `scan` entry."""
    return Archs(cubin=set(entry["cubin"]), specific=set(entry["specific"]), ptx=set(entry["ptx"]),  # type: ignore[call-overload]
                 method=str(entry["method"]))


def main() -> int:
    """Print this environment's kernel binaries and their architectures as one JSON document (not through
    command.print_json: this file runs alone, in images without the tooling)."""
    json.dump({"binaries": scan(kernel_binaries())}, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
