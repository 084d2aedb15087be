"""What each lock layer of a stack requires, and for which platform uv resolves it.

A layer's top-level requirements are its components' (from the catalogue), the builder's toolchain when something
compiles, what TE's compiled extension requires, and what the packages need at run time beyond their own metadata
(``UNDECLARED_RUNTIME``, ``UNDECLARED_APP_NUMPY1``, each with why). The tables of what a base image offers (its
glibc, ``GLIBC``; what NGC's container provides, ``BASE_PROVIDED``) say what uv resolves for and what a lock leaves
to the base.
"""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

from mcore_images.catalogue import components, platforms
from mcore_images.catalogue.components import LOCK_LAYERS
from mcore_images.catalogue.stacks import Stack, repo_root
from mcore_images.catalogue.versions import Requirement, at_least
from mcore_images.errors import InputError
from mcore_images.resolve import pypi

# glibc of each base (manylinux tag uv resolves wheels for): wheels newer than the base cannot load.
GLIBC = {"ubuntu24.04": "2_39", "ubuntu22.04": "2_35", "ngc": "2_39", "debian": "2_28", "debian-bookworm": "2_36"}
"""The glibc a base offers, as a manylinux tag. "debian" is the floor the trixie stacks are locked for; bookworm's
own 2.36 is named (vLLM 0.12's wheels are manylinux_2_31)."""
# Packages a base image provides when the stack takes torch from it (NGC): never emitted.
BASE_PROVIDED = re.compile(
    r"^(torch|torchvision|torchaudio|triton|nvidia-.*|transformer-engine.*|apex|flash-attn|cuda-.*)$")
"""What NGC's PyTorch container builds against its own torch (its /etc/pip/constraint.txt pins them): a lock
for a stack whose torch comes with the base never re-installs these from PyPI."""


def platform(stack: Stack, machine: str = platforms.DEFAULT.machine) -> str:
    """uv's --python-platform for the stack's base image on ``machine`` (one glibc per base, whatever the machine)."""
    if stack.flavor == "debian" and f"debian-{stack.debian_suite}" in GLIBC:
        return f"{machine}-manylinux_{GLIBC[f'debian-{stack.debian_suite}']}"
    if stack.flavor in ("ngc", "debian"):
        return f"{machine}-manylinux_{GLIBC[stack.flavor]}"
    release = re.search(r"ubuntu[0-9.]+", stack.base_image)
    if not release or release.group(0) not in GLIBC:
        raise InputError(f"no glibc recorded for base {stack.base_image}; add its Ubuntu release to GLIBC in "
                         "layer_requirements.py")
    return f"{machine}-manylinux_{GLIBC[release.group(0)]}"


def cuda_major(stack: Stack) -> str:
    return stack.cuda.split(".")[0]


UNDECLARED_RUNTIME: dict[str, str] = {
    "psutil": "megatron-core's checkpoint writer processes import it; without it they die at start and every "
              "save waits for them forever",
    "ninja": "torch.utils.cpp_extension builds with it (load_inline: megatron-core's NCCL allocator and "
             "unified-memory paths)",
    "pybind11": "megatron.core.datasets.utils.compile_helpers() builds the dataset helpers against its headers",
    "nvtx": "megatron-core's NVTX ranges (its dev extra names it; the ranges fail with NameError without it)",
    "six": "megatron.training imports it",
    "tensorboard": "megatron.training's and megatron.rl's summary writer",
    "msgpack": "megatron-core 0.19's inference coordinator",
}
"""What megatron-core and Megatron-LM's training scripts need at run time beyond megatron-core's own
requirements and its [mlm] extra (transformers and its tokenizers, sentencepiece, tiktoken, wandb),
and why; each runtime lock holds them."""


NUMPY1_VERL_BELOW = "0.9"
"""verl releases before this one require numpy < 2."""
UNDECLARED_APP_NUMPY1: dict[str, str] = {
    "pyarrow<21": "pyarrow >= 26 refuses to import with numpy 1.x, and the datasets release that fits torch's "
                  "fsspec (2.14.4, the last without an fsspec ceiling) subclasses pa.PyExtensionType, which "
                  "pyarrow 21 removed; neither is in the metadata. Ray imports pyarrow in every actor (its "
                  "serializer) and verl's trainer imports datasets",
}
"""What the app layer of a numpy-1 verl (before NUMPY1_VERL_BELOW) needs beyond its packages' metadata, and
why."""


V1_TRAINER_FROM = "0.9"
"""The verl release from which the default trainer is the v1 trainer (``trainer.use_v1: true``)."""
UNDECLARED_APP_V1_TRAINER: dict[str, str] = {
    "TransferQueue>=0.1.10": "verl's v1 trainer imports transfer_queue unconditionally (TaskRunnerV1.run in "
                             "verl/trainer/main_ppo.py, verl/trainer/ppo/v1/agent_loop_tq.py); verl declares it "
                             "(this requirement) only under its verl-core extra, so `pip install verl` leaves it out "
                             "and GRPO stops at its first step",
}
"""What verl's v1 trainer imports beyond verl's own requirements, and why (found by the trainer's import closure,
smoke.verl_step.trainer_imports); the app lock of a stack with such a verl holds them."""


NATIVE_DLPACK_EXCHANGE_TORCH = "2.10"
"""The torch release from which torch.Tensor carries DLPack's C exchange API itself."""
UNDECLARED_APP_OLD_TORCH: dict[str, str] = {
    "torch-c-dlpack-ext": "apache-tvm-ffi (vLLM's flashinfer imports it, and megatron-core imports flashinfer) "
                          "compiles torch's DLPack exchange addon at every process start where torch lacks it "
                          "and this prebuilt one is absent: `import megatron.core` took 31.5 s in app-debian-verl "
                          "on 2 cores, 5.7 s with it; the compile needs a compiler at run time, and ranks that "
                          "start together wait on one build lock",
}
"""What the app layer of a rollout engine over a torch before NATIVE_DLPACK_EXCHANGE_TORCH needs beyond its
packages' metadata, and why."""


def needs_prebuilt_dlpack_addon(torch: str, vllm: str, sglang: str) -> bool:
    """Whether a rollout engine (which brings apache-tvm-ffi) sits over a torch without DLPack's exchange API, so
    that the app layer needs UNDECLARED_APP_OLD_TORCH (versions as the stack and the image labels give them)."""
    return (vllm != components.NONE or sglang != components.NONE) and not at_least(torch, NATIVE_DLPACK_EXCHANGE_TORCH)


def tooling_requirements(root: Path | None = None) -> list[str]:
    """What the tool's own wheel requires (pyproject.toml's ``[project].dependencies``; installed without a
    checkout, its metadata): the runtime layer installs that wheel without deps, so its lock holds them."""
    pyproject = (root or repo_root()) / "pyproject.toml"
    if pyproject.is_file():
        try:
            import tomllib  # novermin: the lock is resolved in a checkout, on Python 3.11 or newer
        except ModuleNotFoundError as exc:
            raise InputError("lock reads pyproject.toml with tomllib: run it with Python 3.11 or newer") from exc
        return list(tomllib.loads(pyproject.read_text())["project"]["dependencies"])
    return [r for r in importlib.metadata.requires("mcore-images") or [] if "extra ==" not in r]


def layer_inputs(stack: Stack, te_torch_requires: list[str] | None = None) -> dict[str, list[str]]:
    """Top-level requirements each layer adds: each component's (from the catalogue) in the lock of the
    layer that installs it, the builder's toolchain when something compiles, and what TE's compiled
    extension requires."""
    inputs: dict[str, list[str]] = {layer: [] for layer in LOCK_LAYERS}
    for comp in components.CATALOGUE:
        inputs[comp.layer] += comp.lock_requirements(stack)
    compiles = any(c.compiled(stack) for c in components.CATALOGUE)
    # setuptools and wheel build the tooling's own wheel (every stack); the rest compiles extensions.
    inputs["builder"] += ["setuptools", "wheel", *(("pybind11", "ninja", "packaging") if compiles else ())]
    inputs["runtime"] += tooling_requirements()  # the tool's wheel: `mcore-images`, the smoke, the doctor
    inputs["runtime"] += [r for r in UNDECLARED_RUNTIME if stack.mcore != components.NONE]
    if stack.verl != components.NONE and not at_least(stack.verl, NUMPY1_VERL_BELOW):
        inputs["app"] += list(UNDECLARED_APP_NUMPY1)
    if stack.verl != components.NONE and at_least(stack.verl, V1_TRAINER_FROM):
        inputs["app"] += list(UNDECLARED_APP_V1_TRAINER)
    if needs_prebuilt_dlpack_addon(stack.torch, stack.vllm, stack.sglang):
        inputs["app"] += list(UNDECLARED_APP_OLD_TORCH)
    if compiles and stack.flavor == "debian":
        # No CUDA toolkit in a plain Debian base: nvcc comes from PyPI, as wheels that must all match torch's
        # CUDA minor. CUDA 13 splits it into four wheels; CUDA 12's nvcc wheel carries crt and nvvm itself,
        # and its wheels are named -cu12. The other flavors' bases carry nvcc.
        if cuda_major(stack) == "12":
            inputs["builder"] += [f"nvidia-{part}-cu12=={stack.cuda}.*" for part in ("cuda-nvcc", "cuda-cccl")]
        else:
            parts = ("cuda-nvcc", "cuda-cccl", "cuda-crt", "nvvm")
            inputs["builder"] += [f"nvidia-{part}=={stack.cuda}.*" for part in parts]
    if stack.te_source == "build":
        # The extension is compiled here and installed without deps: lock what it requires.
        for requirement in te_torch_requires or []:
            name = Requirement(requirement).name.lower().replace("_", "-")
            # The core wheel is the catalogue's (its cuXX from the stack): the sdist's metadata names the one
            # of the CUDA it was prepared on, which need not be the stack's.
            if name != "torch" and not name.startswith("transformer-engine-cu"):
                inputs["kernels"].append(requirement)
    return inputs


def resolved_inputs(stack: Stack) -> dict[str, list[str]]:
    """Every layer's top-level requirements, with what TE's extension sdist requires (read from PyPI)."""
    te_requires = (pypi.sdist_requirements("transformer-engine-torch", stack.te)
                   if stack.te_source == "build" else [])
    return layer_inputs(stack, te_requires)


def expected_pins(stack: Stack) -> dict[str, dict[str, str]]:
    """Lock layer -> {distribution: version} that the committed locks must hold for the stack's pins."""
    out: dict[str, dict[str, str]] = {}
    for comp in components.CATALOGUE:
        for text in comp.lock_requirements(stack):
            requirement = Requirement(text)
            if not requirement.specifier:  # a companion whose release the stack's constraints choose (CuTe DSL)
                continue
            version = next(iter(requirement.specifier)).version
            out.setdefault(comp.layer, {})[requirement.name.lower()] = version
    return out
