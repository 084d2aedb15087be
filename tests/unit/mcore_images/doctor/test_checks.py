"""Every doctor check made to fail and made to pass, in a fake world: fake packages on sys.path, fake
modules in sys.modules, a fake /proc and environment. Runs on a host without torch or a GPU."""

from __future__ import annotations

import json
import sys
import textwrap
import types
from pathlib import Path
from typing import Any

import pytest

from mcore_images.catalogue import flash_attention
from mcore_images.doctor import checks_stack, fatbin, model, probes
from mcore_images.doctor import command as doctor
from mcore_images.doctor.model import Context, Finding, Status
from tests.unit.mcore_images.doctor.test_fatbin import write_so  # the ELF/fatbin builder beside the reader's tests

# Real packages are hidden so the tests behave the same on a machine that has them.
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

    def meminfo(self, total_gib: float, available_gib: float) -> None:
        (self.proc / "meminfo").write_text(
            f"MemTotal: {int(total_gib * GIB_KB)} kB\nMemAvailable: {int(available_gib * GIB_KB)} kB\n"
        )

    def run(self, check_id: str) -> Finding:
        return model.run_one(doctor.load_checks()[check_id], self.ctx)


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    doctor.load_checks()
    before = set(sys.modules)
    yield World(tmp_path, monkeypatch)
    for name in set(sys.modules) - before:  # fake packages imported during the test, nothing else
        module = sys.modules.get(name)
        where = str(getattr(module, "__file__", None) or getattr(module, "__path__", [""])[0] or "")
        if module is None or where.startswith(str(tmp_path)) or name.split(".")[0] in HIDDEN:
            sys.modules.pop(name, None)


def status(world: World, check_id: str) -> Status:
    return world.run(check_id).status


# --- python, torch, driver, GPU architecture -------------------------------------------------------


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
        {"variable": {"STACKS": {"default": [{"name": stack, "cuda_archs": cuda_archs}]}}}))
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


# --- megatron-core ----------------------------------------------------------------------------------


def test_megatron_core_not_found_is_the_seed_error(world: World) -> None:
    found = world.run("megatron.core")
    assert found.status == Status.FAIL and "megatron.core not found" in found.finding
    assert "pip install" in found.fix


def test_megatron_core_too_old_or_broken_or_fine(world: World) -> None:
    world.megatron("0.12.0")
    assert "older than 0.13.0" in world.run("megatron.core").finding
    world.megatron("0.19.2", init="raise ModuleNotFoundError(\"No module named 'triton'\")")
    found = world.run("megatron.core")
    assert found.status == Status.FAIL and "triton" in found.fix


def test_megatron_core_ok(world: World) -> None:
    world.megatron("0.19.2")
    found = world.run("megatron.core")
    assert found.status == Status.OK and "0.19.2" in found.finding


def test_megatron_shadow(world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert status(world, "megatron.shadow") == Status.SKIP
    world.megatron("0.19.2")
    assert status(world, "megatron.shadow") == Status.OK
    checkout = tmp_path / "Megatron-LM"
    world.megatron("0.20.0", root=checkout)
    monkeypatch.syspath_prepend(str(checkout))
    found = world.run("megatron.shadow")
    assert found.status == Status.FAIL and "0.20.0" in found.finding and "hides" in found.finding


def test_a_declared_megatron_lm_checkout_may_shadow_the_same_release(world: World, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: a Megatron-LM checkout on PYTHONPATH always failed megatron.shadow, even when the user meant it
    (Megatron-LM's training scripts run from their checkout); now $MEGATRON_LM_CHECKOUT declares it."""
    world.megatron("0.19.2")
    checkout = tmp_path / "Megatron-LM"
    world.megatron("0.19.2", root=checkout)
    monkeypatch.syspath_prepend(str(checkout))
    assert world.run("megatron.shadow").status == Status.FAIL
    world.environ["MEGATRON_LM_CHECKOUT"] = str(checkout)
    found = world.run("megatron.shadow")
    assert found.status == Status.OK and "declared Megatron-LM checkout" in found.finding


def test_a_declared_checkout_of_another_release_or_not_in_front_fails(world: World, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    world.megatron("0.19.2")
    checkout = tmp_path / "Megatron-LM"
    world.megatron("0.20.0", root=checkout)
    world.environ["MEGATRON_LM_CHECKOUT"] = str(checkout)
    absent = world.run("megatron.shadow")
    assert absent.status == Status.FAIL and "no megatron/core on sys.path is inside it" in absent.finding
    monkeypatch.syspath_prepend(str(checkout))
    other = world.run("megatron.shadow")
    assert other.status == Status.FAIL and "0.20.0" in other.finding and "core_v0.19.2" in other.fix


# --- mbridge / Megatron-Bridge -----------------------------------------------------------------------

MBRIDGE_UTIL = """
from megatron.core.enums import ModelType
def get_model(model_type=None):
    if model_type == ModelType.encoder_and_decoder:
        pass
"""
MBRIDGE_BRIDGE = """
_MODEL_REGISTRY = {}
def register_model(types):
    types = [types] if isinstance(types, str) else types
    def deco(cls):
        for t in types:
            _MODEL_REGISTRY[t] = cls
        return cls
    return deco
"""
MBRIDGE_MODELS = """
from mbridge.core.bridge import register_model
@register_model("qwen2")
class Qwen2Bridge: pass
@register_model(["llama", "mistral"])
class LlamaBridge: pass
"""


def fake_mbridge(world: World, version: str = "0.15.1", init: str = "from mbridge import models\n") -> None:
    world.package(
        "mbridge",
        {
            "__init__.py": init,
            "core/__init__.py": "",
            "core/bridge.py": MBRIDGE_BRIDGE,
            "core/util.py": MBRIDGE_UTIL,
            "models.py": MBRIDGE_MODELS,
        },
    )
    world.dist("mbridge", version)


def test_bridge_missing_is_the_seed_error(world: World) -> None:
    found = world.run("bridge.import")
    assert found.status == Status.WARN and "Megatron-Bridge package not found" in found.finding
    assert "pip install mbridge" in found.fix and "megatron-bridge" in found.fix


def test_bridge_import(world: World) -> None:
    fake_mbridge(world, init="raise ImportError('cannot import name GPTModel')")
    assert status(world, "bridge.import") == Status.FAIL
    sys.modules.pop("mbridge", None)
    fake_mbridge(world, init="import transformers_not_here")
    found = world.run("bridge.import")
    assert found.status == Status.FAIL and found.fix.startswith("pip install transformers_not_here")
    sys.modules.pop("mbridge", None)
    fake_mbridge(world)
    found = world.run("bridge.import")
    assert found.status == Status.OK and "mbridge 0.15.1" in found.finding


def test_bridge_mcore_compat(world: World) -> None:
    fake_mbridge(world)
    assert status(world, "bridge.mcore-compat") == Status.SKIP  # no megatron-core
    world.megatron("0.17.1", enums="import enum\nclass ModelType(enum.Enum):\n    encoder_or_decoder = 1\n")
    found = world.run("bridge.mcore-compat")
    assert found.status == Status.FAIL and "encoder_and_decoder" in found.finding
    assert found.details["method"].startswith("hasattr")  # asked the attribute, not the version


def test_bridge_mcore_compat_ok(world: World) -> None:
    fake_mbridge(world)
    world.megatron(
        "0.16.1",
        enums="import enum\nclass ModelType(enum.Enum):\n    encoder_or_decoder = 1\n"
        "    encoder_and_decoder = 2\n",
    )
    assert status(world, "bridge.mcore-compat") == Status.OK


def hf_config(world: World, arch: str, model_type: str) -> None:
    path = world.tmp / "model"
    path.mkdir(exist_ok=True)
    path.joinpath("config.json").write_text(f'{{"architectures": ["{arch}"], "model_type": "{model_type}"}}')
    world.hf_config = path


def test_hf_config_unsupported_architecture_is_the_seed_error(world: World) -> None:
    assert status(world, "bridge.hf-config") == Status.SKIP  # no --hf-config
    hf_config(world, "FooForCausalLM", "foo")
    assert "Megatron-Bridge package not found" in world.run("bridge.hf-config").finding
    fake_mbridge(world)
    world.megatron("0.16.1")
    found = world.run("bridge.hf-config")
    assert found.status == Status.FAIL and "config conversion will fail" in found.finding
    assert "check model architecture compatibility" in found.fix
    assert found.details["mbridge"]["method"] == "mbridge.core.bridge._MODEL_REGISTRY"


def test_hf_config_supported_by_mbridge(world: World) -> None:
    fake_mbridge(world, init="raise ImportError('no transformers')")  # registry read from the source
    hf_config(world, "MistralForCausalLM", "mistral")
    found = world.run("bridge.hf-config")
    assert found.status == Status.OK and "mistral" in found.finding
    assert "decorators read" in found.details["mbridge"]["method"]


def test_hf_config_supported_by_megatron_bridge(world: World) -> None:
    world.package(
        "megatron.bridge",
        {
            "models/__init__.py": "",
            "models/llama.py": """
        from transformers import LlamaForCausalLM
        try:
            from transformers import Qwen3_5ForConditionalGeneration as _Q35
        except ImportError:
            _Q35 = "Qwen3_5ForConditionalGeneration"
        @MegatronModelBridge.register_bridge(source=LlamaForCausalLM, target=GPTModel)
        class LlamaBridge: pass
        @MegatronModelBridge.register_bridge(source=_Q35, target=GPTModel)
        class Q35Bridge: pass
        @MegatronModelBridge.register_bridge(source="DeepseekV3ForCausalLM", target=GPTModel)
        class DSBridge: pass
    """,
        },
    )
    for arch in ("LlamaForCausalLM", "Qwen3_5ForConditionalGeneration", "DeepseekV3ForCausalLM"):
        hf_config(world, arch, "x")
        assert status(world, "bridge.hf-config") == Status.OK, arch
    hf_config(world, "MambaForCausalLM", "mamba")
    assert status(world, "bridge.hf-config") == Status.FAIL


# --- Transformer Engine -----------------------------------------------------------------------------

UNDEFINED = "ImportError: transformer_engine_torch.so: undefined symbol: _ZN3c104cuda9SetDeviceEa"


def test_te_import(world: World) -> None:
    found = world.run("te.import")
    assert found.status == Status.WARN and "local spec" in found.finding
    world.package("transformer_engine", {"pytorch.py": f"raise ImportError({UNDEFINED!r})"})
    found = world.run("te.import")
    assert found.status == Status.FAIL and "torch ABI mismatch" in found.finding and "rebuild" in found.fix


def test_te_import_ok(world: World) -> None:
    world.package("transformer_engine", {"__init__.py": "__version__ = '2.20.2'\n", "pytorch.py": ""})
    found = world.run("te.import")
    assert found.status == Status.OK and "2.20.2" in found.finding


def test_te_cuda_wheel(world: World) -> None:
    assert status(world, "te.cuda-wheel") == Status.SKIP
    world.torch(cuda="13.0")
    world.dist("transformer-engine-cu12", "2.20.2")
    found = world.run("te.cuda-wheel")
    assert found.status == Status.FAIL and "transformer-engine-cu13" in found.fix


def test_te_cuda_wheel_ok(world: World) -> None:
    world.torch(cuda="12.8")
    world.dist("transformer-engine-cu12", "2.20.2")
    assert status(world, "te.cuda-wheel") == Status.OK


SYS_CUDNN = "/usr/lib/x86_64-linux-gnu/libcudnn.so.9.14.0"


def test_te_cudnn_mismatch_trap(world: World) -> None:
    assert status(world, "te.cudnn") == Status.SKIP
    world.package("transformer_engine", {"pytorch.py": ""})
    world.torch(cudnn=91900)
    pip_cudnn = str(world.site / "nvidia" / "cudnn" / "lib" / "libcudnn.so.9")
    world.maps(pip_cudnn, SYS_CUDNN, "/usr/lib/x86_64-linux-gnu/libcudnn_graph.so.9")
    world.versions.update({pip_cudnn: 91900, SYS_CUDNN: 91400})
    found = world.run("te.cudnn")
    assert found.status == Status.FAIL and "9.14.0" in found.finding and "unfused" in found.finding
    assert "CUDNN_HOME" in found.fix


def test_te_cudnn_torch_refuses_the_mix(world: World) -> None:
    """Seen on the H200 box: after TE loaded the system cuDNN, torch raised instead of answering."""
    world.package("transformer_engine", {"pytorch.py": ""})
    torch = world.torch(cudnn=91900)

    def refuse() -> int:
        raise RuntimeError("cuDNN version incompatibility: PyTorch was compiled against (9, 19, 0) "
                           "but found runtime version (9, 14, 0)")

    torch.backends.cudnn.version = refuse
    world.maps(SYS_CUDNN)
    world.versions[SYS_CUDNN] = 91400
    found = world.run("te.cudnn")
    assert found.status == Status.FAIL and "incompatibility" in found.finding
    assert "LD_LIBRARY_PATH" in found.fix


def test_te_cudnn_one_copy(world: World) -> None:
    world.package("transformer_engine", {"pytorch.py": ""})
    world.torch(cudnn=91900)
    pip_cudnn = str(world.site / "nvidia" / "cudnn" / "lib" / "libcudnn.so.9")
    world.maps(pip_cudnn)
    world.versions[pip_cudnn] = 91900
    found = world.run("te.cudnn")
    assert found.status == Status.OK and "9.19.0" in found.finding


# --- apex -------------------------------------------------------------------------------------------


def test_apex_absent_names_the_fallbacks(world: World) -> None:
    found = world.run("apex.fused")
    assert found.status == Status.WARN and "gradient_accumulation_fusion" in found.finding


def test_apex_broken_and_ok(world: World) -> None:
    world.torch()
    for name in ("fused_layer_norm_cuda", "fused_weight_gradient_mlp_cuda"):
        world.module_file(name)
    world.module_file("amp_C", "raise ImportError('amp_C.so: undefined symbol: _ZN2at4_ops')")
    found = world.run("apex.fused")
    assert found.status == Status.FAIL and "amp_C" in found.finding
    world.module_file("amp_C", "")
    sys.modules.pop("amp_C", None)
    assert status(world, "apex.fused") == Status.OK


# --- NCCL -------------------------------------------------------------------------------------------

PIN = ('nvidia-nccl-cu13==2.27.7; platform_system == "Linux"',)


def test_nccl_pip_differs_from_torch_pin(world: World) -> None:
    world.torch()
    world.dist("torch", "2.11.0", requires=PIN)
    world.dist("nvidia-nccl-cu13", "2.26.2")
    found = world.run("nccl.version")
    assert found.status == Status.FAIL and "pip install nvidia-nccl-cu13==2.27.7" in found.fix


def test_nccl_loaded_library_differs(world: World) -> None:
    world.torch(nccl=(2, 27, 7))
    world.dist("torch", "2.11.0", requires=PIN)
    world.dist("nvidia-nccl-cu13", "2.27.7")
    world.maps("/usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5")
    world.versions["/usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5"] = 22105
    found = world.run("nccl.version")
    assert found.status == Status.FAIL and "2.21.5" in found.finding


def test_nccl_agrees(world: World) -> None:
    assert status(world, "nccl.version") == Status.SKIP
    world.torch(nccl=(2, 27, 7))
    world.dist("torch", "2.11.0", requires=PIN)
    world.dist("nvidia-nccl-cu13", "2.27.7")
    lib = str(world.site / "nvidia" / "nccl" / "lib" / "libnccl.so.2")
    world.maps(lib)
    world.versions[lib] = 22707
    found = world.run("nccl.version")
    assert found.status == Status.OK and "2.27.7" in found.finding


def test_nccl_nvls(world: World) -> None:
    assert status(world, "nccl.nvls") == Status.OK  # no GPUs
    world.gpus(90, 90, driver_cuda=13000)
    assert status(world, "nccl.nvls") == Status.WARN
    world.environ["NCCL_NVLS_ENABLE"] = "0"
    assert status(world, "nccl.nvls") == Status.OK
    world.environ["NCCL_NVLS_ENABLE"] = "yes"
    assert status(world, "nccl.nvls") == Status.WARN


# --- environment ------------------------------------------------------------------------------------


def test_cuda_device_max_connections(world: World) -> None:
    assert status(world, "env.cuda-max-connections") == Status.SKIP
    world.gpus(90, driver_cuda=13000)
    assert status(world, "env.cuda-max-connections") == Status.WARN
    world.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    assert status(world, "env.cuda-max-connections") == Status.OK
    world.gpus(100, driver_cuda=13000)
    assert status(world, "env.cuda-max-connections") == Status.WARN  # =1 not wanted on Blackwell
    del world.environ["CUDA_DEVICE_MAX_CONNECTIONS"]
    assert status(world, "env.cuda-max-connections") == Status.OK


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({}, Status.OK),
        ({"NVTE_FLASH_ATTN": "1", "NVTE_FUSED_ATTN": "1"}, Status.OK),
        ({"NVTE_FUSED_ATTN": "0"}, Status.WARN),  # fits flash / unfused / local, not the default auto
        ({"NVTE_FLASH_ATTN": "1", "NVTE_FUSED_ATTN": "1", "NVTE_UNFUSED_ATTN": "0"}, Status.FAIL),
        ({"NVTE_FLASH_ATTN": "true"}, Status.FAIL),
    ],
)
def test_stale_nvte_attention(world: World, values: dict[str, str], expected: Status) -> None:
    world.environ.update(values)
    assert status(world, "env.nvte-attn") == expected


def test_pip_constraint(world: World) -> None:
    assert status(world, "pip.constraint") == Status.OK
    (world.tmp / "etc" / "pip").mkdir()
    ngc = world.tmp / "etc" / "pip" / "constraint.txt"
    ngc.write_text("requests==2.31\n")
    assert status(world, "pip.constraint") == Status.OK
    ngc.write_text("torch==2.8.0a0+5228986c39.nv25.5\ntransformer_engine==2.3.0  # NGC\nrequests==2.31\n")
    found = world.run("pip.constraint")
    assert found.status == Status.WARN and "torch==2.8.0a0" in found.finding


# --- build side -------------------------------------------------------------------------------------


def test_max_jobs(world: World) -> None:
    found = world.run("build.max-jobs")
    assert found.status == Status.OK and "MAX_JOBS=" in found.finding
    world.meminfo(total_gib=16, available_gib=8)
    world.environ["MAX_JOBS"] = "64"
    found = world.run("build.max-jobs")
    assert found.status == Status.WARN and "the planner picks" in found.finding
    world.environ["MAX_JOBS"] = "lots"
    assert "not a number" in world.run("build.max-jobs").finding


def compiler(world: World, pid: int, name: str, rss_gib: float) -> None:
    (world.proc / str(pid)).mkdir()
    (world.proc / str(pid) / "status").write_text(f"Name:\t{name}\nVmRSS:\t{int(rss_gib * GIB_KB)} kB\n")


def test_oom_risk(world: World) -> None:
    found = world.run("build.oom-risk")
    assert found.status == Status.OK and "no compiler" in found.finding
    for pid in range(100, 104):
        compiler(world, pid, "cc1plus", 2.5)
    world.meminfo(total_gib=16, available_gib=1.5)
    found = world.run("build.oom-risk")
    assert found.status == Status.FAIL and "MAX_JOBS=" in found.fix
    world.meminfo(total_gib=32, available_gib=4)
    assert status(world, "build.oom-risk") == Status.WARN
    world.meminfo(total_gib=64, available_gib=40)
    assert status(world, "build.oom-risk") == Status.OK


def test_every_check_has_a_failing_and_a_passing_test() -> None:
    """Guard: a new check needs tests beside this file (its id must appear in one of this folder's tests)."""
    text = "".join(path.read_text() for path in Path(__file__).parent.glob("test_*.py"))
    missing = [cid for cid in doctor.load_checks() if f'"{cid}"' not in text]
    assert not missing, missing


def test_bridge_mcore_compat_read_from_source_when_megatron_does_not_import(world: World) -> None:
    """megatron-core 0.16.1 keeps encoder_and_decoder as a deprecated property; 0.17.1 drops it."""
    fake_mbridge(world)
    broken = "raise ModuleNotFoundError(\"No module named 'torch'\")"
    deprecated = (
        "import enum\nclass ModelType(enum.Enum):\n    encoder_or_decoder = 1\n"
        "    @property\n    def encoder_and_decoder(self):\n        raise ValueError('deprecated')\n"
    )
    world.megatron("0.16.1", init=broken, enums=deprecated)
    found = world.run("bridge.mcore-compat")
    assert found.status == Status.OK and found.details["method"].startswith("read ")
    world.megatron(
        "0.17.1", init=broken, enums="import enum\nclass ModelType(enum.Enum):\n    encoder_or_decoder = 1\n"
    )
    assert status(world, "bridge.mcore-compat") == Status.FAIL


def test_te_core_wheel_without_torch_extension(world: World) -> None:
    """transformer-engine-cu13 alone: TE asserts on import, and megatron.core's import dies with it."""
    te_assert = "raise AssertionError('Could not find `transformer_engine`.')"
    world.package("transformer_engine", {"__init__.py": te_assert})
    world.dist("transformer-engine-cu13", "2.20.2")
    found = world.run("te.import")
    assert found.status == Status.FAIL and "PyTorch extension is not installed" in found.finding
    assert "transformer-engine[pytorch]==2.20.2" in found.fix
    world.megatron("0.19.2", init="import transformer_engine")
    assert "half-installed Transformer Engine" in world.run("megatron.core").fix


def test_te_packages_that_disagree(world: World) -> None:
    world.package("transformer_engine", {"pytorch.py": "raise AssertionError('version mismatch')"})
    world.module_file("transformer_engine_torch")
    world.dist("transformer-engine-cu13", "2.20.2")
    world.dist("transformer-engine-torch", "2.19.0")
    world.dist("transformer-engine", "2.20.2")
    found = world.run("te.import")
    assert found.status == Status.FAIL and "transformer-engine-torch 2.19.0" in found.finding


def test_hf_config_after_a_partial_mbridge_import_reads_the_source(world: World) -> None:
    """`import mbridge` that dies half-way leaves a half-filled registry in sys.modules: not trusted."""
    fake_mbridge(
        world,
        init="from mbridge.core import bridge\nbridge.register_model('early')(object)\n"
        "raise ModuleNotFoundError(\"No module named 'einops'\")\n",
    )
    hf_config(world, "MistralForCausalLM", "mistral")
    world.run("bridge.import")  # leaves mbridge.core.bridge imported with only 'early' registered
    found = world.run("bridge.hf-config")
    assert found.status == Status.OK and "decorators read" in found.details["mbridge"]["method"]


# --- a package without a version is a finding ------------------------------------------------------


def test_torch_without_a_version(world: World) -> None:
    world.package("torch")  # no version.py, no __version__, no dist-info
    found = world.run("torch.version")
    assert found.status == Status.FAIL and "has no version" in found.finding and "reinstall torch" in found.fix
    assert status(world, "torch.cuda") == Status.SKIP  # not "CPU-only": its CUDA is unknown too
    sys.modules.pop("torch", None)
    world.package("torch", {"__init__.py": "__version__ = '2.11.0'\n"})  # the imported module says
    found = world.run("torch.version")
    assert found.status == Status.OK and "2.11.0" in found.finding


def test_megatron_core_without_a_version(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    other = world.tmp / "checkout"
    other.mkdir()
    monkeypatch.syspath_prepend(str(other))
    world.package("megatron.core", root=other)
    world.dist("megatron-core", "0.16.1")  # installed in site/, but the copy imported is other/'s
    found = world.run("megatron.core")
    assert found.status == Status.FAIL and "has no version" in found.finding
    assert "pip install --force-reinstall 'megatron-core>=0.13.0'" in found.fix
    for name in ("megatron.core", "megatron"):
        sys.modules.pop(name, None)
    world.package("megatron.core", {"__init__.py": "__version__ = '0.12.0'\n"}, root=other)
    assert "older than 0.13.0" in world.run("megatron.core").finding


def test_megatron_core_version_from_its_own_dist_info(world: World) -> None:
    world.package("megatron.core")
    world.dist("megatron-core", "0.16.1")  # the dist-info that installed this very copy
    found = world.run("megatron.core")
    assert found.status == Status.OK and "0.16.1" in found.finding


def test_bridge_without_a_version(world: World) -> None:
    world.package("mbridge")  # a copy on sys.path without dist-info or __version__
    found = world.run("bridge.import")
    assert found.status == Status.WARN and "has no version" in found.finding
    assert found.fix == "reinstall it: pip install --force-reinstall mbridge"


def test_te_without_a_version(world: World) -> None:
    world.package("transformer_engine", {"pytorch.py": ""})
    found = world.run("te.import")
    assert found.status == Status.WARN and "has no version" in found.finding and "reinstall" in found.fix


def test_cudnn_and_nccl_that_do_not_say_their_version(world: World) -> None:
    world.package("transformer_engine", {"pytorch.py": ""})
    world.torch(cudnn=91900, nccl=(2, 27, 7))
    world.dist("torch", "2.11.0", requires=PIN)
    world.dist("nvidia-nccl-cu13", "2.27.7")
    cudnn = str(world.site / "nvidia" / "cudnn" / "lib" / "libcudnn.so.9")
    nccl = str(world.site / "nvidia" / "nccl" / "lib" / "libnccl.so.2")
    world.maps(cudnn, nccl)  # mapped, but world.versions has no answer for them
    found = world.run("te.cudnn")
    assert found.status == Status.WARN and "cudnnGetVersion" in found.finding
    found = world.run("nccl.version")
    assert found.status == Status.WARN and "ncclGetVersion" in found.finding


def fake_te_flash(world: World, te: str = "2.20.2", fa4: str | None = None) -> None:
    """A transformer_engine whose FlashAttentionUtils says what TE found: FlashAttention 4 ``fa4`` or none."""
    utils = (f"class FlashAttentionUtils:\n    is_installed = False\n    version = None\n    v3_is_installed = False\n"
             f"    fa3_version = None\n    v4_is_installed = {fa4 is not None}\n    fa4_version = {fa4!r}\n")
    world.package("transformer_engine", {"__init__.py": f"__version__ = {te!r}\n"})
    world.package("transformer_engine.pytorch")
    world.package("transformer_engine.pytorch.attention")
    world.package("transformer_engine.pytorch.attention.dot_product_attention", {"utils.py": utils})


MEGATRON_FLASH = {"NVTE_FLASH_ATTN": "1", "NVTE_FUSED_ATTN": "0", "NVTE_UNFUSED_ATTN": "0"}


def test_te_attention_flash_without_flash_attention_fails(world: World) -> None:
    """What megatron-core sets for attention_backend=flash (verl's default), in an environment where TE finds no
    FlashAttention: the first forward would raise "No dot product attention backend is available"."""
    world.torch(ccs=(90,))
    fake_te_flash(world)
    world.environ.update(MEGATRON_FLASH)
    found = world.run("te.attention")
    assert found.status == Status.FAIL and "No dot product attention backend" in found.finding
    assert "sm_90" in found.finding and "attention_backend=fused" in found.fix


def probe_answer(errors: dict[str, tuple[float, float, float]] | None, status: str = "",
                 reason: str | None = None) -> tuple[int, str]:
    """What `python -m mcore_images.smoke.attention --probe --json` prints, built by the smoke's own table."""
    from mcore_images.smoke.attention import table

    res = table.result("flash", "sbhd GQA 8/2 d128", status, selected="FlashAttention 4.0.0b40", reason=reason,
                       errors=errors)
    sec = table.section([res], backends=[], cases=[], environment={}, tolerance={}, wall_s=21.0)
    return {"passed": 0, "failed": 1}.get(sec["status"], 2), "[attention] …\n" + json.dumps(sec) + "\n"


RIGHT = {"out": (0.011, 0.012, 4.0), "dq": (0.02, 0.015, 3.0), "dk": (0.02, 0.02, 3.0), "dv": (0.03, 0.03, 5.0)}


def test_te_attention_flash_with_flash_attention_4_on_hopper_runs_the_probe(world: World) -> None:
    world.torch(ccs=(90, 90))
    fake_te_flash(world, fa4="4.0.0b40")
    world.environ.update({flash_attention.ASKED: "flash"})
    world.programs = [probe_answer(RIGHT)]
    found = world.run("te.attention")
    assert found.status == Status.OK and "FlashAttention 4.0.0b40" in found.finding
    assert "probe: FlashAttention 4.0.0b40 matches an fp32 reference" in found.finding
    assert world.ran == [["-m", "mcore_images.smoke.attention", "--probe", "--json", "--backends", "flash"]]


def test_te_attention_fails_when_the_probe_finds_the_selected_backend_wrong(world: World) -> None:
    world.torch(ccs=(90,))
    fake_te_flash(world, fa4="4.0.0b40")
    world.environ.update(MEGATRON_FLASH)
    world.programs = [probe_answer({**RIGHT, "out": (3.92, 0.012, 4.0)})]
    found = world.run("te.attention")
    assert found.status == Status.FAIL and "wrong against an fp32 reference" in found.finding
    assert "flash (FlashAttention 4.0.0b40) × sbhd GQA 8/2 d128: out 3.92 > 0.0865" in found.finding
    assert "attention_backend=fused" in found.fix and world.ran[0][-1] == "as-set"


def test_te_attention_probe_that_cannot_finish_is_a_warning(world: World) -> None:
    world.torch(ccs=(90,))
    fake_te_flash(world)
    world.environ.update({flash_attention.ASKED: "fused"})
    world.programs = [(None, "")]
    found = world.run("te.attention")
    assert found.status == Status.WARN and "ran past 300 s" in found.finding


def test_te_attention_flash_measured_wrong_fails_without_running_it(world: World) -> None:
    """flash-attn-4 4.0.0b36 on nvidia-cutlass-dsl 4.8.1 under TE 2.20.2 was measured wrong on an H200."""
    world.torch(ccs=(90,))
    fake_te_flash(world, te="2.20.2", fa4="4.0.0b36")
    world.dist("nvidia-cutlass-dsl", "4.8.1")
    world.environ.update({flash_attention.ASKED: "flash"})
    found = world.run("te.attention")
    assert found.status == Status.FAIL and "measured wrong" in found.finding and "sm_90" in found.finding
    assert "attention_backend=fused" in found.fix and not getattr(world, "ran", [])


def test_te_attention_flash_4_cannot_train_on_an_a100(world: World) -> None:
    """TE 2.16 selects FlashAttention 4 on sm80, whose backward it lacks."""
    world.torch(ccs=(80,))
    fake_te_flash(world, te="2.16.0", fa4="4.0.0b36")
    world.environ.update(MEGATRON_FLASH)
    found = world.run("te.attention")
    assert found.status == Status.FAIL and "sm_80" in found.finding


def test_te_attention_other_backends_and_megatrons_assertion(world: World) -> None:
    world.torch(ccs=(90,))
    fake_te_flash(world)
    world.programs = [probe_answer(RIGHT)]
    assert status(world, "te.attention") == Status.OK  # nothing set: TE may fall back to fused or unfused
    world.environ.update({flash_attention.ASKED: "local"})
    assert status(world, "te.attention") == Status.OK
    world.environ.update({flash_attention.ASKED: "flash", "NVTE_FUSED_ATTN": "1"})
    found = world.run("te.attention")
    assert found.status == Status.FAIL and "asserts" in found.finding
