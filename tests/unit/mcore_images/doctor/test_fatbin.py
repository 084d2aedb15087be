"""The fatbin reader against synthetic ELF files laid out like nvcc's output."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from mcore_images.doctor import fatbin


def fatbin_blob(entries: list[tuple[int, int]]) -> bytes:
    """A fatbin with (kind, sm) entries laid out like nvcc's: 64-byte entry headers, sm at offset 28,
    flags at 40 (0x8011 as nvcc writes them; a negative sm means the arch-specific "sm_XXa")."""
    body = b""
    for kind, sm in entries:
        payload = b"\0" * 24
        head = bytearray(64)
        struct.pack_into("<HHIQ", head, 0, kind, 0x0101, 64, len(payload))
        struct.pack_into("<I", head, 28, abs(sm))
        struct.pack_into("<I", head, 40, 0x8011 | (fatbin.ARCH_SPECIFIC if sm < 0 else 0))
        body += bytes(head) + payload
    return struct.pack("<IHHQ", fatbin.FATBIN_MAGIC, 1, 16, len(body)) + body


def elf_with(sections: dict[str, bytes]) -> bytes:
    """A minimal 64-bit little-endian ELF holding the given sections (no program headers)."""
    names = b"\0" + b"".join(n.encode() + b"\0" for n in [".shstrtab", *sections])
    blobs = [names, *sections.values()]
    data = bytearray(64)
    offsets = []
    for blob in blobs:
        offsets.append(len(data))
        data += blob + b"\0" * (-len(blob) % 8)
    shoff = len(data)
    data += b"\0" * 64  # the null section
    name_at = 1
    for blob, offset, name in zip(blobs, offsets, [".shstrtab", *sections], strict=True):
        header = bytearray(64)
        struct.pack_into("<II", header, 0, name_at, 1)
        struct.pack_into("<QQ", header, 0x18, offset, len(blob))
        data += header
        name_at += len(name) + 1
    data[:4] = b"\x7fELF"
    data[4], data[5] = 2, 1
    struct.pack_into("<Q", data, 0x28, shoff)
    struct.pack_into("<HHH", data, 0x3A, 64, len(blobs) + 1, 1)
    return bytes(data)


def write_so(path: Path, entries: list[tuple[int, int]]) -> Path:
    path.write_bytes(elf_with({".text": b"\x90" * 16, ".nv_fatbin": fatbin_blob(entries)}))
    return path


def test_reads_cubins_and_ptx_from_fatbin_headers(tmp_path: Path) -> None:
    so = write_so(tmp_path / "libk.so", [(2, 80), (2, 90), (1, 90)])
    archs = fatbin.from_file(so)
    assert archs.cubin == {80, 90} and archs.ptx == {90}
    assert "fatbin" in archs.method


def test_arch_specific_cubins_run_only_on_their_own_gpu(tmp_path: Path) -> None:
    so = write_so(tmp_path / "libk.so", [(2, 90), (2, -100)])
    archs = fatbin.from_file(so)
    assert archs.cubin == {90} and archs.specific == {100} and "sm_100a" in archs.describe()
    assert fatbin.runs_on(archs, 100) == "cubin"
    assert fatbin.runs_on(archs, 103) is None  # sm_100a does not run on sm_103


def test_two_fatbins_in_one_section(tmp_path: Path) -> None:
    blob = fatbin_blob([(2, 75)]) + b"\0" * 8 + fatbin_blob([(2, 100)])
    (tmp_path / "a.so").write_bytes(elf_with({".nv_fatbin": blob}))
    assert fatbin.from_file(tmp_path / "a.so").cubin == {75, 100}


def test_no_device_code_and_not_elf(tmp_path: Path) -> None:
    (tmp_path / "host.so").write_bytes(elf_with({".text": b"\x90" * 8}))
    (tmp_path / "text.py").write_text("print('not a binary')\n" * 4)
    assert fatbin.from_file(tmp_path / "host.so").empty
    assert fatbin.from_file(tmp_path / "text.py").empty


def test_runs_on_rules() -> None:
    archs = fatbin.Archs(cubin={80}, ptx={80})
    assert fatbin.runs_on(archs, 86) == "cubin"  # same major, higher minor
    assert fatbin.runs_on(archs, 90) == "ptx"  # newer major: only PTX JIT
    assert fatbin.runs_on(fatbin.Archs(cubin={90}), 80) is None  # older GPU: nothing
    assert fatbin.runs_on(fatbin.Archs(cubin={90}), 100) is None


def test_cuobjdump_listing_is_preferred(tmp_path: Path) -> None:
    tool = tmp_path / "cuobjdump"
    tool.write_text(
        "#!/bin/sh\n"
        "if [ \"$1\" = --list-elf ]; then echo 'ELF file    1: libk.1.sm_90a.cubin'; "
        "else echo 'PTX file    1: libk.1.sm_100.ptx'; fi\n"
    )
    tool.chmod(0o755)
    so = write_so(tmp_path / "libk.so", [(2, 80)])
    archs = fatbin.archs_of(so, str(tool))
    assert archs.specific == {90} and archs.ptx == {100} and archs.method.startswith("cuobjdump")


def test_missing_is_the_at_least_rule_of_a_prebuilt_library() -> None:
    te = fatbin.Archs(cubin={80, 90, 100, 120}, specific={90, 100, 103})
    assert fatbin.missing(te, ["80", "90", "100", "103", "120", "90a"]) == []  # sm_100 cubins run on 10.3
    assert fatbin.missing(te, ["86", "121"]) == []  # same major, higher minor
    assert fatbin.missing(te, ["110", "75", "120a"]) == ["sm_110", "sm_75", "sm_120a"]
    assert fatbin.missing(fatbin.Archs(ptx={90}), ["90"]) == ["sm_90"]  # PTX JIT is not a carried architecture


def test_undeclared_with_missing_is_the_exact_rule_of_a_binary_compiled_here() -> None:
    apex = fatbin.Archs(cubin={80, 90, 100, 103, 120})
    declared = ["80", "90", "100", "103", "120"]
    assert fatbin.missing(apex, declared) == [] and fatbin.undeclared(apex, declared) == []
    assert fatbin.undeclared(apex, ["90", "100"]) == ["sm_80", "sm_103", "sm_120"]
    assert fatbin.undeclared(fatbin.Archs(cubin={90}, specific={90}, ptx={90}), ["90"]) == [
        "sm_90a", "compute_90 (PTX)"]
    assert fatbin.undeclared(fatbin.Archs(specific={90}), ["90a"]) == []
    with pytest.raises(ValueError, match="not an SM number"):
        fatbin.missing(apex, ["sm_90"])


def test_runs_alone_and_prints_the_kernel_binaries(tmp_path: Path) -> None:
    """The image tests run this file's source with `python -c` in an image without the tooling."""
    te = tmp_path / "transformer_engine"
    (te / "wheel_lib").mkdir(parents=True)
    (te / "__init__.py").write_text("")
    write_so(te / "wheel_lib" / "libtransformer_engine.so", [(2, 90), (2, -103)])
    write_so(tmp_path / "amp_C.so", [(2, 80), (1, 90)])
    # where apex is absent, the images' fused_weight_gradient_mlp_cuda is a Python module: no kernel binary
    (tmp_path / "fused_weight_gradient_mlp_cuda.py").write_text("PROVIDER = 'mcore-images-wgrad-fusion'\n")
    ext = te / "wheel_lib" / "transformer_engine_torch.cpython-311-x86_64-linux-gnu.so"  # where TE 2.x keeps it
    ext.write_bytes(elf_with({".text": b"\x90" * 16}))
    source = Path(fatbin.__file__).read_text()
    out = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, check=False, cwd=tmp_path,
                         env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})  # no cuobjdump: the headers
    assert out.returncode == 0, out.stderr[-2000:]
    found = {(b["kind"], Path(b["path"]).name): b for b in json.loads(out.stdout)["binaries"]}
    assert set(found) == {("te-core", "libtransformer_engine.so"), ("te-torch", ext.name), ("apex", "amp_C.so")}
    assert fatbin.from_scan(found[("te-core", "libtransformer_engine.so")]).describe() == "sm_90, sm_103a"
    assert fatbin.from_scan(found[("te-torch", ext.name)]).empty
    assert fatbin.from_scan(found[("apex", "amp_C.so")]).describe() == "sm_80, compute_90 (PTX)"
