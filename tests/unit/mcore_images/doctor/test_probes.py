"""The ctypes glue to libcuda / libnccl / libcudnn, against small fake libraries compiled here."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from mcore_images.doctor import probes
from mcore_images.doctor.model import Context
from tests.support.host import need


@pytest.fixture(autouse=True)
def _compiler() -> None:
    need("cc")  # the fake CUDA libraries are compiled here

FAKE_CUDA = r"""
#include <string.h>
int cuDriverGetVersion(int *v) { *v = 13000; return 0; }
int cuInit(unsigned flags) { return 0; }
int cuDeviceGetCount(int *n) { *n = 2; return 0; }
int cuDeviceGet(int *d, int i) { *d = i; return 0; }
int cuDeviceGetAttribute(int *v, int attr, int dev) { *v = attr == 75 ? (dev ? 10 : 9) : 0; return 0; }
int cuDeviceGetName(char *s, int n, int dev) { strncpy(s, dev ? "NVIDIA B200" : "NVIDIA H200", n); return 0; }
"""
NO_DEVICE = (
    "int cuDriverGetVersion(int *v) { *v = 12080; return 0; }\nint cuInit(unsigned f) { return 100; }\n"
)
FAKE_LIBS = (
    "int ncclGetVersion(int *v) { *v = 22707; return 0; }\n"
    "unsigned long cudnnGetVersion(void) { return 91900; }\n"
)


def build(tmp: Path, name: str, source: str) -> Path:
    (tmp / f"{name}.c").write_text(source)
    out = tmp / f"{name}.so"
    compiler = shutil.which("cc") or "gcc"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(out), str(tmp / f"{name}.c")], check=True)
    return out


def test_gpu_info_from_libcuda(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probes, "LIBCUDA", str(build(tmp_path, "libcuda", FAKE_CUDA)))
    proc = tmp_path / "proc" / "driver" / "nvidia"
    proc.mkdir(parents=True)
    (proc / "version").write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Tue Sep 30\n")
    info = probes.gpu_info(Context(proc=tmp_path / "proc"))
    assert info.driver_cuda == 13000 and info.driver_version == "580.159.04"
    assert [(g.name, g.cc) for g in info.gpus] == [("NVIDIA H200", 90), ("NVIDIA B200", 100)]


def test_gpu_info_without_device_or_driver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probes, "LIBCUDA", str(build(tmp_path, "libcuda", NO_DEVICE)))
    info = probes.gpu_info(Context(proc=tmp_path))
    assert info.driver_cuda == 12080 and not info.gpus and "100" in info.note
    monkeypatch.setattr(probes, "LIBCUDA", str(tmp_path / "missing.so"))
    assert probes.gpu_info(Context(proc=tmp_path)).driver_cuda is None


def test_library_versions(tmp_path: Path) -> None:
    lib = str(build(tmp_path, "libfake", FAKE_LIBS))
    assert probes.library_version(lib, "ncclGetVersion", by_reference=True) == 22707
    assert probes.library_version(lib, "cudnnGetVersion", by_reference=False) == 91900
    assert probes.library_version(lib, "noSuchSymbol", by_reference=False) is None


def test_loaded_libraries_reads_this_process_maps(tmp_path: Path) -> None:
    import ctypes

    lib = build(tmp_path, "libnccl.so", FAKE_LIBS)  # file name libnccl.so.so: not a match
    named = tmp_path / "libnccl.so.2"
    shutil.copy(lib, named)
    ctypes.CDLL(str(named))
    assert str(named) in probes.loaded_libraries(Context(), r"libnccl\.so(\.\d+)*")
