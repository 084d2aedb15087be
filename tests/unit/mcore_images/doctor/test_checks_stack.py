"""The stack checks (src/mcore_images/doctor/checks_stack.py) made to fail and made to pass in the fake world of
world.py: python, torch, the CUDA driver and the GPU architecture."""

from __future__ import annotations

import json
import sys

import pytest

from mcore_images.doctor import checks_stack
from mcore_images.doctor.model import Status
from tests.unit.mcore_images.doctor.test_fatbin import write_so  # the ELF/fatbin builder beside the reader's tests
from tests.unit.mcore_images.doctor.world import World, status


def test_python_version(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    assert status(world, "python.version") == Status.OK
    monkeypatch.setattr(checks_stack, "python_version", lambda: (3, 11, 7))
    assert status(world, "python.version") == Status.WARN  # no megatron-core >= 0.17 installed yet
    world.megatron("0.17.1")
    found = world.run("python.version")
    assert found.status == Status.FAIL and "3.12" in found.finding


def test_torch_version(world: World) -> None:
    assert "not installed" in world.run("torch.version").finding
    world.megatron("0.17.1")
    world.torch("2.5.1+cu124")
    assert status(world, "torch.version") == Status.FAIL
    world.torch("2.11.0+cu130")
    assert status(world, "torch.version") == Status.OK


def test_torch_that_does_not_import(world: World) -> None:
    world.package(
        "torch",
        {
            "__init__.py": "raise OSError('libcudnn.so.9: cannot open shared object file')",
            "version.py": "__version__ = '2.11.0+cu130'\ncuda: Optional[str] = '13.0'\n",
        },
    )
    found = world.run("torch.version")
    assert found.status == Status.FAIL and "libcudnn.so.9" in found.finding
    assert status(world, "torch.cuda") == Status.OK  # read from version.py without importing


def test_torch_cuda(world: World) -> None:
    world.torch("2.11.0+cpu", cuda=None)
    assert status(world, "torch.cuda") == Status.FAIL
    world.torch("2.11.0+cu130", cuda="13.0")
    assert status(world, "torch.cuda") == Status.OK


def test_cuda_driver(world: World) -> None:
    world.torch(cuda="13.0")
    assert status(world, "cuda.driver") == Status.SKIP  # no driver on this host
    world.gpus(90, driver_cuda=12080)
    found = world.run("cuda.driver")
    assert found.status == Status.FAIL and "12.8" in found.finding
    world.gpus(90, driver_cuda=13000)
    assert status(world, "cuda.driver") == Status.OK
    world.torch(cuda="13.0", available=False)
    assert status(world, "cuda.driver") == Status.FAIL


def write_te(world: World, *entries: tuple[int, int]) -> None:
    te = world.package("transformer_engine")
    write_so(te / "libtransformer_engine.so", list(entries))


def test_gpu_arch(world: World) -> None:
    assert status(world, "gpu.arch") == Status.SKIP  # nothing installed
    write_te(world, (2, 80))
    found = world.run("gpu.arch")
    assert found.status == Status.SKIP and "sm_80" in found.finding  # no GPU: says what is compiled
    world.torch(ccs=(90,))
    found = world.run("gpu.arch")
    assert found.status == Status.FAIL and "no code for sm_90" in found.finding
    assert "cuda-archs include 90" in found.fix and "\n" not in found.fix
    assert found.details["method"] == ["fatbin headers (.nv_fatbin)"]
    write_te(world, (2, 80), (1, 80))
    assert status(world, "gpu.arch") == Status.WARN  # PTX JIT only
    write_te(world, (2, 90))
    write_so(world.site / "transformer_engine" / "libnccl_ep.so", [(2, 100)])  # optional extra: ignored
    assert status(world, "gpu.arch") == Status.OK


def test_gpu_arch_reads_the_gpus_from_torch(world: World) -> None:
    write_te(world, (2, 90), (2, 100))
    world.gpus(80, driver_cuda=13000)  # the driver's view is not what this check asks
    world.torch(ccs=(100, 90))
    found = world.run("gpu.arch")
    assert found.status == Status.OK and "sm_100, sm_90" in found.finding
    assert found.details["gpus"] == ["GPU sm_100 sm_100", "GPU sm_90 sm_90"]
    world.torch(ccs=(90,), available=False)
    found = world.run("gpu.arch")
    assert found.status == Status.SKIP and "torch.cuda.is_available() is False" in found.finding


def in_image(world: World, stack: str, cuda_archs: str) -> None:
    """The settings an image gives the doctor: its stack, and env/stacks.json under MCORE_IMAGES_ROOT."""
    root = world.tmp / "opt"
    (root / "env").mkdir(parents=True, exist_ok=True)
    (root / "env" / "stacks.json").write_text(json.dumps(
        {"stacks": [{"name": stack, "cuda_archs": cuda_archs}]}))
    world.environ.update(MCORE_IMAGES_STACK=stack, MCORE_IMAGES_ROOT=str(root))


def test_gpu_arch_compares_the_gpu_with_the_declared_architectures(world: World) -> None:
    write_te(world, (2, 80), (2, 90), (2, 100), (2, 120), (2, -103))
    in_image(world, "debian", "90")
    world.torch(ccs=(90,))
    found = world.run("gpu.arch")
    assert found.status == Status.OK and "declared 90" in found.finding
    assert found.details["declared_gpus"] == "sm_90 H100/H200/GH200"
    world.torch(ccs=(103,))  # TE carries sm_103a and sm_100 (runs on 10.3), but the image declares 90 only
    found = world.run("gpu.arch")
    assert found.status == Status.WARN and "sm_103 (GPU sm_103)" in found.finding
    assert "declares 90 (sm_90 H100/H200/GH200)" in found.finding and "cuda-archs include 103" in found.fix
    in_image(world, "cuda", "90;100;103;120")
    assert status(world, "gpu.arch") == Status.OK


def test_gpu_arch_fails_when_a_compiled_extension_lacks_the_gpu_and_names_the_rebuild(world: World) -> None:
    write_te(world, (2, 90), (2, 100))
    amp = world.site / "amp_C.so"
    world.unhide("amp_C")
    write_so(amp, [(2, 80), (2, 90)])
    in_image(world, "cuda", "80;90")
    world.torch(ccs=(90, 100))  # the fix names the GPU that lacks code, not the first one
    found = world.run("gpu.arch")
    assert found.status == Status.FAIL and found.finding.startswith("amp_C.so has no code for sm_100")
    assert "add 100 to the stack's cuda_archs" in found.fix


def test_torch_without_a_version(world: World) -> None:
    world.package("torch")  # no version.py, no __version__, no dist-info
    found = world.run("torch.version")
    assert found.status == Status.FAIL and "has no version" in found.finding and "reinstall torch" in found.fix
    assert status(world, "torch.cuda") == Status.SKIP  # not "CPU-only": its CUDA is unknown too
    sys.modules.pop("torch", None)
    world.package("torch", {"__init__.py": "__version__ = '2.11.0'\n"})  # the imported module says
    found = world.run("torch.version")
    assert found.status == Status.OK and "2.11.0" in found.finding
