"""The te checks (src/mcore_images/doctor/checks_te.py) made to fail and made to pass in the fake world of world.py:
Transformer Engine: its import, its CUDA wheel, the cuDNN it loads, its attention backends."""

from __future__ import annotations

import json

import pytest

from mcore_images.catalogue import flash_attention
from mcore_images.doctor.model import Status
from tests.unit.mcore_images.doctor.world import World, status, unversioned_libraries

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
    pip_cudnn = world.pip_library("cudnn", "libcudnn.so.9")
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
    world.loads(SYS_CUDNN, 91400)
    found = world.run("te.cudnn")
    assert found.status == Status.FAIL and "incompatibility" in found.finding
    assert "LD_LIBRARY_PATH" in found.fix


def test_te_cudnn_one_copy(world: World) -> None:
    world.package("transformer_engine", {"pytorch.py": ""})
    world.torch(cudnn=91900)
    world.loads(world.pip_library("cudnn", "libcudnn.so.9"), 91900)
    found = world.run("te.cudnn")
    assert found.status == Status.OK and "9.19.0" in found.finding


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


def test_te_without_a_version(world: World) -> None:
    world.package("transformer_engine", {"pytorch.py": ""})
    found = world.run("te.import")
    assert found.status == Status.WARN and "has no version" in found.finding and "reinstall" in found.fix


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


UNMEASURED_TE = "2.21.0"
"""A TE release whose flash backend no measurement speaks for: the probe decides."""


def test_te_attention_flash_with_flash_attention_4_on_hopper_runs_the_probe(world: World) -> None:
    world.torch(ccs=(90, 90))
    fake_te_flash(world, te=UNMEASURED_TE, fa4="4.0.0b40")
    world.environ.update({flash_attention.ASKED: "flash"})
    world.programs = [probe_answer(RIGHT)]
    found = world.run("te.attention")
    assert found.status == Status.OK and "FlashAttention 4.0.0b40" in found.finding
    assert "probe: FlashAttention 4.0.0b40 matches an fp32 reference" in found.finding
    assert world.ran == [["-m", "mcore_images.smoke.attention", "--probe", "--json", "--backends", "flash"]]


def test_te_attention_fails_when_the_probe_finds_the_selected_backend_wrong(world: World) -> None:
    world.torch(ccs=(90,))
    fake_te_flash(world, te=UNMEASURED_TE, fa4="4.0.0b40")
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


@pytest.mark.parametrize(("fa4", "cutlass"), [("4.0.0b36", "4.8.1"), ("4.0.0b40", "4.8.1"), ("4.0.0b37", None)])
def test_te_attention_flash_measured_wrong_fails_without_running_it_and_says_which_half(
        world: World, fa4: str, cutlass: str | None) -> None:
    """TE 2.20.2's flash backend was measured wrong on an H200 with FlashAttention 4 b36 and b40, which were right
    called directly: the finding blames TE's integration, not FlashAttention 4, whatever pair is installed."""
    world.torch(ccs=(90,))
    fake_te_flash(world, te="2.20.2", fa4=fa4)
    if cutlass:
        world.dist("nvidia-cutlass-dsl", cutlass)
    world.environ.update({flash_attention.ASKED: "flash"})
    found = world.run("te.attention")
    assert found.status == Status.FAIL and "measured wrong on sm_90" in found.finding
    assert f"lets TE 2.20.2 select FlashAttention {fa4}" in found.finding
    assert "FlashAttention 4 called directly on the same inputs was right" in found.finding
    assert "the fault is TE 2.20's integration, not FlashAttention 4" in found.finding
    assert "attention_backend=fused" in found.fix and not getattr(world, "ran", [])


def test_te_attention_fused_beside_the_measured_pair_is_not_blamed(world: World) -> None:
    """attention_backend=fused never reaches TE's flash backend: the measurement says nothing against it."""
    world.torch(ccs=(90,))
    fake_te_flash(world, te="2.20.2", fa4="4.0.0b36")
    world.environ.update({flash_attention.ASKED: "fused"})
    world.programs = [probe_answer(RIGHT)]
    found = world.run("te.attention")
    assert found.status == Status.OK and "measured" not in found.finding


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


def test_cudnn_that_does_not_say_its_version(world: World) -> None:
    unversioned_libraries(world)
    found = world.run("te.cudnn")
    assert found.status == Status.WARN and "cudnnGetVersion" in found.finding
