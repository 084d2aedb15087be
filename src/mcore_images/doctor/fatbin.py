"""Which GPU architectures a CUDA binary carries, read from the binary itself.

`cuobjdump --list-elf/--list-ptx` is the authority when it is on PATH. Without it we walk the
ELF's `.nv_fatbin` section: each fatbin entry header stores its kind (PTX or cubin) and its
SM number in plain fields even when the payload is compressed, so no decompression is needed.
A string scan for "sm_90" would be unreliable: compressed payloads hide the text.

Entry header fields used: kind (u16 @0: 1 PTX, 2 cubin), header size (u32 @4), payload size
(u64 @8), SM (u32 @28), flags (u32 @40; bit 20 marks an arch-specific "sm_90a" cubin). Checked
entry for entry against cuobjdump 13.5 on TE 2.20.2's libtransformer_engine.so (sm_75 … sm_120
with sm_90a/100a/103a/107a) and on libcurand 10.4.
"""

from __future__ import annotations

import mmap
import re
import shutil
import struct
import subprocess
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
