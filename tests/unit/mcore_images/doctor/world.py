"""The fake world every doctor check is tested in: fake packages on sys.path, fake modules in sys.modules, a fake
/proc and environment, no GPU. Runs on a host without torch or a GPU (the ``world`` fixture: conftest.py)."""

from __future__ import annotations

import sys
import textwrap
import types
from pathlib import Path
from typing import Any

import pytest

from mcore_images.doctor import checks_stack, fatbin, model, probes
from mcore_images.doctor import command as doctor
from mcore_images.doctor.model import Context, Finding, Status

HIDDEN = (
    "torch",
    "megatron",
    "megatron.core",
    "megatron.bridge",
    "mbridge",
    "transformer_engine",
    "transformer_engine_torch",
    "apex",
    "fused_layer_norm_cuda",
    "amp_C",
    "fused_weight_gradient_mlp_cuda",
)


GIB_KB = 1024 * 1024


class World:
    """A fake environment: site/ on sys.path, proc/ for /proc, etc/, an env dict, no GPU."""

    def __init__(self, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.tmp, self.mp = tmp, monkeypatch
        self.site = tmp / "site"
        self.site.mkdir()
        self.proc = tmp / "proc"
        (self.proc / "self").mkdir(parents=True)
        (self.proc / "self" / "maps").write_text("")
        self.meminfo(total_gib=32, available_gib=24)
        (tmp / "cgroup").mkdir()
        (tmp / "etc").mkdir()
        self.environ: dict[str, str] = {}
        self.versions: dict[str, int] = {}
        monkeypatch.syspath_prepend(str(self.site))
        for name in HIDDEN:
            monkeypatch.setitem(sys.modules, name, None)
        monkeypatch.setattr(checks_stack, "python_version", lambda: (3, 12, 3))
        monkeypatch.setattr(
            probes, "library_version", lambda path, symbol, by_reference: self.versions.get(path)
        )
        monkeypatch.setattr(fatbin.shutil, "which", lambda name: None)
        self.gpus()

    @property
    def ctx(self) -> Context:
        return Context(
            environ=self.environ,
            proc=self.proc,
            cgroup=self.tmp / "cgroup",
            etc=self.tmp / "etc",
            hf_config=getattr(self, "hf_config", None),
            run_program=self.program,
        )

    def program(self, argv: Any, env: Any, timeout: float) -> tuple[int | None, str]:
        """The child programs a check runs (the attention probe): what ``self.programs`` answers, in order; a
        program nobody expected fails the test."""
        self.ran = [*getattr(self, "ran", []), list(argv)]
        answers = getattr(self, "programs", [])
        assert answers, f"unexpected child program {argv}"
        return answers.pop(0)

    def unhide(self, dotted: str) -> None:
        parts = dotted.split(".")
        for i in range(1, len(parts) + 1):
            if sys.modules.get(".".join(parts[:i]), 0) is None:
                self.mp.delitem(sys.modules, ".".join(parts[:i]))

    def package(self, dotted: str, files: dict[str, str] | None = None, root: Path | None = None) -> Path:
        """site/<a>/<b>/ with __init__.py (except namespace parents) and the given files."""
        self.unhide(dotted)
        where = (root or self.site).joinpath(*dotted.split("."))
        where.mkdir(parents=True, exist_ok=True)
        for name, text in {"__init__.py": "", **(files or {})}.items():
            (where / name).parent.mkdir(parents=True, exist_ok=True)
            (where / name).write_text(textwrap.dedent(text))
        return where

    def module_file(self, name: str, text: str = "") -> Path:
        self.unhide(name)
        path = self.site / f"{name}.py"
        path.write_text(textwrap.dedent(text))
        return path

    def dist(self, name: str, version: str, requires: tuple[str, ...] = ()) -> None:
        info = self.site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(exist_ok=True)
        lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
        info.joinpath("METADATA").write_text(
            "\n".join(lines + [f"Requires-Dist: {r}" for r in requires]) + "\n"
        )

    def megatron(
        self, version: str = "0.19.2", init: str = "", enums: str | None = None, root: Path | None = None
    ) -> Path:
        major, minor, patch = version.split(".")
        files = {
            "__init__.py": init,
            "package_info.py": f"MAJOR = {major}\nMINOR = {minor}\nPATCH = {patch}\n",
        }
        if enums is not None:
            files["enums.py"] = enums
        return self.package("megatron.core", files, root)

    def torch(
        self,
        version: str = "2.11.0+cu130",
        cuda: str | None = "13.0",
        cudnn: int = 91900,
        nccl: tuple[int, ...] = (2, 27, 7),
        available: bool = True,
        ccs: tuple[int, ...] = (),
    ) -> types.ModuleType:
        """A fake imported torch with the attributes the checks read; `ccs` are the GPUs its CUDA sees."""
        self.unhide("torch")
        torch = types.ModuleType("torch")
        torch.__version__ = version  # type: ignore[attr-defined]
        torch.__file__ = str(self.site / "torch" / "__init__.py")
        torch.version = types.SimpleNamespace(cuda=cuda)  # type: ignore[attr-defined]
        torch.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
            is_available=lambda: available,
            nccl=types.SimpleNamespace(version=lambda: nccl),
            device_count=lambda: len(ccs),
            get_device_capability=lambda i: divmod(ccs[i], 10),
            get_device_name=lambda i: f"GPU sm_{ccs[i]}",
        )
        torch.backends = types.SimpleNamespace(  # type: ignore[attr-defined]
            cudnn=types.SimpleNamespace(is_available=lambda: True, version=lambda: cudnn)
        )
        self.mp.setitem(sys.modules, "torch", torch)
        return torch

    def gpus(self, *ccs: int, driver_cuda: int | None = None) -> None:
        gpus = tuple(probes.Gpu(i, f"GPU sm_{cc}", cc) for i, cc in enumerate(ccs))
        info = probes.GpuInfo(
            driver_cuda,
            "580.0" if driver_cuda else None,
            gpus,
            "" if driver_cuda else "no NVIDIA driver (libcuda.so.1 not found)",
        )
        self.mp.setattr(probes, "gpu_info", lambda ctx: info)

    def maps(self, *paths: str) -> None:
        lines = [f"7f00{i:04x}000-7f00{i:04x}fff r-xp 00000000 08:01 {i} {p}" for i, p in enumerate(paths)]
        (self.proc / "self" / "maps").write_text("\n".join(lines) + "\n")

    def loads(self, path: str, version: int) -> None:
        """The process has only ``path`` mapped, and that library answers ``version`` when asked for it."""
        self.maps(path)
        self.versions[path] = version

    def pip_library(self, package: str, name: str) -> str:
        """Where torch's pip nvidia-* wheel ``package`` puts its library ``name``."""
        return str(self.site / "nvidia" / package / "lib" / name)

    def meminfo(self, total_gib: float, available_gib: float) -> None:
        (self.proc / "meminfo").write_text(
            f"MemTotal: {int(total_gib * GIB_KB)} kB\nMemAvailable: {int(available_gib * GIB_KB)} kB\n"
        )

    def run(self, check_id: str) -> Finding:
        return model.run_one(doctor.load_checks()[check_id], self.ctx)


def status(world: World, check_id: str) -> Status:
    return world.run(check_id).status


PIN = ('nvidia-nccl-cu13==2.27.7; platform_system == "Linux"',)


def unversioned_libraries(world: World) -> None:
    """torch's cuDNN and NCCL mapped from its pip packages, neither library answering for its version."""
    world.package("transformer_engine", {"pytorch.py": ""})
    world.torch(cudnn=91900, nccl=(2, 27, 7))
    world.dist("torch", "2.11.0", requires=PIN)
    world.dist("nvidia-nccl-cu13", "2.27.7")
    # mapped, but world.versions has no answer for them
    world.maps(world.pip_library("cudnn", "libcudnn.so.9"), world.pip_library("nccl", "libnccl.so.2"))
