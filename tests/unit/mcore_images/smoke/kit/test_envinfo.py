"""environment.source: a run is the image's environment only with the image's settings and pinned versions; the
cuDNN it records."""

from __future__ import annotations

import importlib.machinery
import importlib.metadata as md
import sys
import types
from pathlib import Path

import pytest

from mcore_images import schemas
from mcore_images.smoke.kit import envinfo


def _constraints(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "constraints.txt"
    path.write_text("# Certified together with this image\n" + "".join(f"{line}\n" for line in lines))
    return path


def test_the_image_settings_and_versions_are_the_image_environment(tmp_path: Path) -> None:
    path = _constraints(tmp_path, f"packaging=={md.version('packaging')}", f"pytest=={md.version('pytest')}")
    got = envinfo.source({"MCORE_IMAGES_STACK": "debian", "PIP_CONSTRAINT": str(path)})
    assert got["kind"] == schemas.IMAGE_ENVIRONMENT and got["differences"] == [] and got["pinned"] == 2


def test_one_moved_or_missing_distribution_makes_it_the_machines_tree(tmp_path: Path) -> None:
    path = _constraints(tmp_path, f"packaging=={md.version('packaging')}", "pytest==0.0.1",
                        "no-such-distribution-here==1.0")
    got = envinfo.source({"MCORE_IMAGES_STACK": "debian", "PIP_CONSTRAINT": str(path)})
    assert got["kind"] == schemas.MACHINE_TREE
    assert got["differences"] == [f"pytest {md.version('pytest')}, the image pins 0.0.1",
                                  "no-such-distribution-here absent, the image pins 1.0"]


def test_without_the_image_settings_it_is_the_machines_tree(tmp_path: Path) -> None:
    path = _constraints(tmp_path, f"packaging=={md.version('packaging')}")
    assert envinfo.source({"PIP_CONSTRAINT": str(path)})["kind"] == schemas.MACHINE_TREE
    assert envinfo.source({"MCORE_IMAGES_STACK": "debian"})["kind"] == schemas.MACHINE_TREE
    unreadable = envinfo.source({"MCORE_IMAGES_STACK": "debian", "PIP_CONSTRAINT": str(tmp_path / "absent")})
    assert unreadable["kind"] == schemas.MACHINE_TREE and "cannot be read" in unreadable["differences"][0]
    empty = envinfo.source({"MCORE_IMAGES_STACK": "debian", "PIP_CONSTRAINT": str(_constraints(tmp_path))})
    assert empty["kind"] == schemas.MACHINE_TREE and "pins nothing" in empty["differences"][0]


def test_another_python_than_the_stacks_is_a_difference(tmp_path: Path) -> None:
    import json
    import platform

    (tmp_path / "env").mkdir()
    here = ".".join(platform.python_version_tuple()[:2])
    stacks = [{"name": "same", "python": here}, {"name": "other", "python": "3.0"}]
    (tmp_path / "env" / "stacks.json").write_text(json.dumps({"stacks": stacks}))
    path = _constraints(tmp_path, f"packaging=={md.version('packaging')}")
    env = {"PIP_CONSTRAINT": str(path), "MCORE_IMAGES_ROOT": str(tmp_path)}
    assert envinfo.source({**env, "MCORE_IMAGES_STACK": "same"})["kind"] == schemas.IMAGE_ENVIRONMENT
    other = envinfo.source({**env, "MCORE_IMAGES_STACK": "other"})
    assert other["kind"] == schemas.MACHINE_TREE
    assert other["differences"] == [f"python {platform.python_version()}, the image's stack other has 3.0"]


def fake_torch(cudnn: object) -> types.ModuleType:
    """torch as collect() reads it on a CPU run: its CUDA build and the cuDNN it loads (or the error it raises)."""
    def version() -> object:
        if isinstance(cudnn, Exception):
            raise cudnn
        return cudnn

    torch = types.ModuleType("torch")
    torch.__spec__ = importlib.machinery.ModuleSpec("torch", None)
    torch.version = types.SimpleNamespace(cuda="13.0")  # type: ignore[attr-defined]
    torch.cuda = types.SimpleNamespace(is_available=lambda: False)  # type: ignore[attr-defined]
    torch.backends = types.SimpleNamespace(cudnn=types.SimpleNamespace(version=version))  # type: ignore[attr-defined]
    return torch


def without_cudnn_wheel(monkeypatch: pytest.MonkeyPatch, wheels: dict[str, str]) -> None:
    real = md.version

    def version(name: str) -> str:
        if name.startswith("nvidia-cudnn-"):
            if name in wheels:
                return wheels[name]
            raise md.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(envinfo.md, "version", version)


def test_the_certificate_records_cudnn_as_the_wheel_and_as_what_torch_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: no package entry for cuDNN, and environment.cudnn only on GPU runs.
    without_cudnn_wheel(monkeypatch, {"nvidia-cudnn-cu13": "9.19.0.56"})
    monkeypatch.setitem(sys.modules, "torch", fake_torch(91900))
    info = envinfo.collect(world=1, nodes=1, cpu=True)
    assert info["packages"]["cudnn"] == "9.19.0.56" and info["cudnn"] == "91900"


def test_a_base_images_cudnn_is_the_release_torch_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    without_cudnn_wheel(monkeypatch, {})
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert envinfo.package_version("cudnn") is None  # torch not imported: nothing is imported to find out
    monkeypatch.setitem(sys.modules, "torch", fake_torch(92000))
    assert envinfo.package_version("cudnn") == "9.20.0"
    monkeypatch.setitem(sys.modules, "torch", fake_torch(RuntimeError("cuDNN version incompatibility\nmore")))
    assert envinfo.loaded_cudnn() == "error: cuDNN version incompatibility"
    assert envinfo.package_version("cudnn") is None
def test_the_declared_gpu_architectures_come_from_the_images_stack(tmp_path: Path) -> None:
    import json

    (tmp_path / "env").mkdir()
    stacks = [{"name": "cuda", "cuda_archs": "90;100;103"}]
    (tmp_path / "env" / "stacks.json").write_text(json.dumps({"stacks": stacks}))
    env = {"MCORE_IMAGES_ROOT": str(tmp_path), "MCORE_IMAGES_STACK": "cuda"}
    assert envinfo.declared_archs(env) == {"declared": "90;100;103",
                                           "gpus": "sm_90 H100/H200/GH200; sm_100 B200/GB200; sm_103 B300/GB300"}
    assert envinfo.declared_archs({**env, "MCORE_IMAGES_STACK": "other"}) is None
    assert envinfo.declared_archs({"MCORE_IMAGES_STACK": "cuda"}) is None


@pytest.mark.parametrize(("text", "found"), [
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  Sun Jul 27 06:54:38 UTC 2025\n", "580.65.06"),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.172.08  Release Build  (dvs-builder@U16)\n",
     "570.172.08"),
    ("GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n", None),
])
def test_the_driver_version_is_read_without_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str,
                                                       found: str | None) -> None:
    """A replica's PATH (or a container's without the NVIDIA runtime's tools) has no nvidia-smi: the kernel module's
    /proc file still says which driver runs (the certificate read "driver None" there)."""
    monkeypatch.setattr(envinfo.shutil, "which", lambda name: None)
    proc = tmp_path / "version"
    proc.write_text(text)
    assert envinfo.driver_version(proc) == found
    assert envinfo.driver_version(tmp_path / "absent") is None
