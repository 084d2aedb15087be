"""The component catalogue: what each versioned part of an image is, written once.

A component is something a stack pins in env/stacks.json (under the component's ``key``) and an image
carries. Everything that needs to know about components derives it from ``CATALOGUE``: the OCI labels and
build args and tags of the generated bake file (docker-bake.json, image_build/bake_file.py),
the Dockerfile's ARG and check-version lines (`make validate` holds them to the catalogue), the stack fields
and their validation, the lock inputs and which lock layer a pin change re-resolves, the stacks table (docs/stacks.md),
promotion's label and certificate checks, the image tests' version and import checks, and the package list
the smoke certificate records. Adding a component is one entry here, its pin in each stack of
env/stacks.json, and the Dockerfile step that installs it (docs/contributing.md).

Standard library only: the smoke suite imports this module inside images, next to torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

LAYERS = ("base", "kernels", "runtime", "app")
"""Image layers, bottom up; each has its own tag."""

LOCK_LAYERS = ("base", "builder", "kernels", "runtime", "app")
"""Lock files per stack (env/locks/<stack>/<layer>.txt); the builder is a side branch off base."""

NONE = "none"
"""The pin of a component a stack does not carry."""

FROM_BASE = "base"
"""The pin of a component the base image itself provides (NGC's apex and cuDNN)."""

PIN_KINDS = ("version", "major_minor", "commit")
"""How a pin is written and compared: a PEP 440 version (compared by public release), a major.minor
version (Python, CUDA: any patch release matches), or a 40-hex git commit (a source checkout)."""
COMMIT = re.compile(r"^[0-9a-f]{40}$")
"""A pin of kind "commit": the full git commit (a branch or tag moves)."""
COMMIT_SHOWN = 8
"""How many digits of a commit tags and tables show (``apex6424da3b``)."""


@dataclass(frozen=True)
class TagPart:
    """How image tags name a component's pin: ``<prefix><pin>`` (``te2.16.0``; a commit by its first 8 digits).
    tags.py writes every tag from these, the bake file's included."""

    prefix: str
    """What stands before the pin (``cu`` for CUDA: ``cu12.8``)."""
    rank: int
    """Where the part stands in a tag: parts run by rank, lowest first, so a tag reads from its own layer's
    components down to the platform (``app-verl…-vllm…-mcore…-te…-torch…-cu…-py…-<origin>``)."""
    until: str = "app"
    """The highest layer whose tag names it; from the component's own layer up to here (apex: kernels alone)."""
    optional: bool = False
    """Left out where the stack does not carry it (``-vllm0.12.0``, never ``-vllmnone``)."""


@dataclass(frozen=True)
class Component:
    """One versioned component. Field docs say which consumer reads what."""

    key: str
    """The field in env/stacks.json that pins it (also `Stack.<key>`, `--set <key>=…`)."""
    label: str
    """The OCI label ``io.mcore-images.<label>`` on every image from ``layer`` up."""
    title: str
    """How README and messages name it."""
    layer: str
    """The image layer that adds it (its label and checks apply from there up)."""
    lock_layer: str | None
    """The lowest lock layer a change of its pin can change (None: a pin change touches no lock)."""
    pin: str = "version"
    """One of PIN_KINDS."""
    distributions: tuple[str, ...] = ()
    """PyPI distributions: the first is the one whose version the pin names; the others are names the
    same install may carry (megatron_core) or its sibling wheels, which must be the same release where
    installed (TE's compiled extension and its CUDA core library)."""
    modules: tuple[str, ...] = ()
    """Imports that must work where the component is pinned, and fail with ModuleNotFoundError where it
    is 'none' (the image tests' import checks)."""
    requirements: tuple[str, ...] = ()
    """Lock inputs, formatted with ``version`` (the pin), ``cuda_major`` and ``cuda_extra`` (``cuda_extra``)."""
    source: str | None = None
    """A stack field saying where the component comes from; the lock lists it only for LOCKED_SOURCES."""
    certificate: str | None = None
    """Its key under the certificate's environment.packages (None: recorded elsewhere, e.g. CUDA)."""
    rollout_engine: bool = False
    """verl's rollout engine: its torch pin is judged by the rule engine-torch."""
    per_cuda_major: bool = False
    """Its distributions are one wheel per CUDA major (nvidia-cudnn-cu12, -cu13): the pin names the stack's."""
    follows: str | None = None
    """The component whose own exact requirement fixes this pin (cuDNN: torch's wheel requires one release).
    It adds no lock input (the lock holds it as that component's requirement); a rule holds the two together,
    and `outdated` reports it as following that component instead of PyPI."""
    build_arg: str | None = None
    """The Dockerfile build arg bake passes the pin as (image_build/bake_file.py writes it into docker-bake.json).
    The Dockerfile declares it in the stages that read it, from the component's layer up,
    and checks a PyPI release there with docker/check-version.sh (dockerfile.py; `make validate`). None: no
    build step reads the pin (a lock installs it, or it follows another component)."""
    in_tag: TagPart | None = None
    """How tags name the pin (tags.py); None: tags do not name it."""
    compile_profile: str | None = None
    """The job planner's memory profile (jobs.PROFILES) of the Dockerfile step that compiles it: `build` judges an
    explicit MAX_JOBS / NVCC_THREADS against it, and a stack that compiles anything locks the builder's compile
    toolchain (layer_requirements.py). None: never compiled here."""

    @property
    def oci_label(self) -> str:
        return f"io.mcore-images.{self.label}"

    @property
    def distribution(self) -> str | None:
        return self.distributions[0] if self.distributions else None

    def distribution_for(self, cuda: str) -> str | None:
        """The distribution whose version the pin names on a stack of this CUDA (MAJOR.MINOR): for a component
        published per CUDA major, the wheel of that major (None when there is none)."""
        if not self.per_cuda_major:
            return self.distribution
        suffix = f"-cu{cuda.split('.')[0]}"
        return next((d for d in self.distributions if d.endswith(suffix)), None)

    def short(self, pin: str) -> str:
        """The pin as tags and tables show it (a commit by its first 8 digits)."""
        return pin[:COMMIT_SHOWN] if self.pin == "commit" and COMMIT.match(pin) else pin

    def compiled(self, stack: Any) -> bool:
        """Whether a build of ``stack`` (any object with the stack's fields as attributes) compiles it: it has a
        compile profile, the stack pins it, not as the base image's, and its source (where it names one) is 'build'."""
        if self.compile_profile is None or getattr(stack, self.key) in (NONE, FROM_BASE):
            return False
        return self.source is None or getattr(stack, self.source) == "build"

    def lock_requirements(self, stack: Any) -> list[str]:
        """What this component adds to the lock of its layer for a stack (any object with the stack's
        fields as attributes); [] when it adds nothing (absent, from the base image, or not locked)."""
        version = getattr(stack, self.key)
        if version in (NONE, FROM_BASE) or not self.requirements:
            return []
        if self.source and getattr(stack, self.source) not in LOCKED_SOURCES:
            return []
        major = stack.cuda.split(".")[0]
        return [r.format(version=version, cuda_major=major, cuda_extra=cuda_extra(major)) for r in self.requirements]


def cuda_extra(cuda_major: str) -> str:
    """The extra NVIDIA's CuTe DSL (nvidia-cutlass-dsl) and flash-attn-4 name their CUDA libraries by: CUDA 12's
    come without one (nvidia-cutlass-dsl 4.6.0 and newer), CUDA 13's with ``[cu13]``."""
    return "" if cuda_major == "12" else f"[cu{cuda_major}]"


LOCKED_SOURCES = ("pypi", "build")
"""Sources whose packages the locks pin (`base` means the base image provides them)."""

CATALOGUE: tuple[Component, ...] = (
    Component("python", "python", "Python", "base", "base", pin="major_minor", certificate="python",
              build_arg="PYTHON_VERSION", in_tag=TagPart("py", 42)),
    Component("cuda", "cuda", "CUDA", "base", "base", pin="major_minor", build_arg="CUDA_VERSION",
              in_tag=TagPart("cu", 41)),
    Component("torch", "torch", "torch", "base", "base", distributions=("torch",), modules=("torch",),
              requirements=("torch=={version}",), source="torch_source", certificate="torch",
              build_arg="TORCH_VERSION", in_tag=TagPart("torch", 40)),
    # cuDNN is the copy torch loads: torch's wheel requires one nvidia-cudnn-cuXX release exactly (rule
    # cudnn-torch), TE's extension is compiled against it (CUDNN_HOME) and loads it (docker/link-nvidia-libs.sh
    # registers torch's nvidia/* libraries; an image test checks which file the loader maps). So the system
    # cuDNN of nvidia/cuda's -cudnn- bases is not the one pinned. Where torch comes with the base (NGC), so
    # does its cuDNN: 'base'.
    Component("cudnn", "cudnn", "cuDNN", "base", None, distributions=("nvidia-cudnn-cu12", "nvidia-cudnn-cu13"),
              source="torch_source", certificate="cudnn", per_cuda_major=True, follows="torch"),
    Component("te", "te", "TE", "kernels", "kernels",
              distributions=("transformer-engine", "transformer-engine-torch", "transformer-engine-cu12",
                             "transformer-engine-cu13"),
              modules=("transformer_engine", "transformer_engine.pytorch"),
              requirements=("transformer-engine=={version}", "transformer-engine-cu{cuda_major}=={version}"),
              source="te_source", certificate="transformer-engine", build_arg="TE_VERSION",
              in_tag=TagPart("te", 30), compile_profile="te"),
    # apex is compiled from its git source (a commit), so a change re-runs the builder's compile step.
    # fused_weight_gradient_mlp_cuda is apex's where the stack has apex and this project's elsewhere
    # (catalogue/wgrad_fusion.py: the image tests check it by its provider, not as apex's module).
    Component("apex", "apex", "apex", "kernels", "builder", pin="commit", distributions=("apex",),
              modules=("apex", "fused_layer_norm_cuda", "amp_C"),
              certificate="apex", build_arg="APEX_COMMIT", in_tag=TagPart("apex", 31, until="kernels"),
              compile_profile="apex"),
    # FlashAttention 4 (CuTe DSL): a pure-Python wheel whose kernels nvidia-cutlass-dsl compiles at run time, so
    # nothing is compiled at build time. TE selects it under megatron-core's attention_backend=flash (verl's
    # default), which otherwise finds no backend. The CuTe DSL release it runs on is the stack's constraint,
    # judged by the rule flash-attn-cutlass (flash_attention.py holds the facts).
    Component("flash_attn", "flash-attn", "FlashAttention", "kernels", "kernels", distributions=("flash-attn-4",),
              modules=("flash_attn.cute.interface",),
              requirements=("flash-attn-4=={version}", "nvidia-cutlass-dsl{cuda_extra}"),
              certificate="flash-attn-4"),
    # The run-time C/C++ compiler (gcc from the OS): Triton builds its kernel launcher with it on the first
    # launch, torch.compile's inductor and torch.utils.cpp_extension compile with it. Pinned as gcc's
    # major.minor, which the OS release fixes; no lock holds it (it is not a PyPI package).
    Component("gcc", "gcc", "gcc", "runtime", None, pin="major_minor", certificate="gcc", build_arg="GCC_VERSION"),
    Component("mcore", "mcore", "megatron-core", "runtime", "runtime",
              distributions=("megatron-core", "megatron_core"),
              modules=("megatron.core", "megatron.core.parallel_state", "megatron.core.models.gpt"),
              # [mlm]: what Megatron-LM's training scripts import (transformers, sentencepiece, tiktoken, wandb,
              # flask-restful; accelerate and omegaconf from 0.19), so they run on the image.
              requirements=("megatron-core[mlm]=={version}",), certificate="megatron-core",
              build_arg="MCORE_VERSION", in_tag=TagPart("mcore", 20)),
    Component("mbridge", "mbridge", "mbridge", "runtime", "runtime", distributions=("mbridge",),
              modules=("mbridge",), requirements=("mbridge[megatron]=={version}",), certificate="mbridge"),
    Component("megatron_bridge", "megatron-bridge", "Megatron-Bridge", "runtime", "runtime",
              distributions=("megatron-bridge", "megatron_bridge"), modules=("megatron.bridge",),
              requirements=("megatron-bridge=={version}",), certificate="megatron-bridge"),
    Component("verl", "verl", "verl", "app", "app", distributions=("verl",), modules=("verl",),
              requirements=("verl=={version}",), certificate="verl", build_arg="VERL_VERSION",
              in_tag=TagPart("verl", 10)),
    # verl's rollout engine next to the Megatron backend; it pins torch exactly (rule engine-torch).
    Component("vllm", "vllm", "vLLM", "app", "app", distributions=("vllm",), modules=("vllm",),
              requirements=("vllm=={version}",), certificate="vllm", rollout_engine=True,
              build_arg="VLLM_VERSION", in_tag=TagPart("vllm", 11, optional=True)),
    Component("sglang", "sglang", "SGLang", "app", "app", distributions=("sglang",), modules=("sglang",),
              requirements=("sglang=={version}",), certificate="sglang", rollout_engine=True,
              build_arg="SGLANG_VERSION", in_tag=TagPart("sglang", 12, optional=True)),
)

BY_KEY: dict[str, Component] = {c.key: c for c in CATALOGUE}
BY_LABEL: dict[str, Component] = {c.label: c for c in CATALOGUE}
KEYS: tuple[str, ...] = tuple(c.key for c in CATALOGUE)


def of_layer(layer: str) -> list[Component]:
    """The components an image layer adds."""
    return [c for c in CATALOGUE if c.layer == layer]


def labelled_in(layer: str) -> list[Component]:
    """The components whose label an image of ``layer`` carries (its own and its parents')."""
    return [c for c in CATALOGUE if LAYERS.index(c.layer) <= LAYERS.index(layer)]


def certificate_packages() -> tuple[str, ...]:
    """The package keys a certificate records, in catalogue order."""
    return tuple(c.certificate for c in CATALOGUE if c.certificate)


def by_certificate(key: str) -> Component:
    return next(c for c in CATALOGUE if c.certificate == key)


def cudnn_release(code: int) -> str:
    """cuDNN's version number as cudnnGetVersion() and torch.backends.cudnn.version() give it, as the release
    it names: MAJOR*10000 + MINOR*100 + PATCH from cuDNN 9 on (91900 -> '9.19.0'), MAJOR*1000 + … before."""
    major, rest = divmod(code, 10000) if code >= 90000 else divmod(code, 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


def check() -> list[str]:
    """Problems with the catalogue itself (a test keeps this empty)."""
    problems = []
    for c in CATALOGUE:
        if c.layer not in LAYERS:
            problems.append(f"{c.key}: layer {c.layer!r} is not one of {LAYERS}")
        if c.lock_layer is not None and c.lock_layer not in LOCK_LAYERS:
            problems.append(f"{c.key}: lock_layer {c.lock_layer!r} is not one of {LOCK_LAYERS}")
        if c.pin not in PIN_KINDS:
            problems.append(f"{c.key}: pin kind {c.pin!r} is not one of {PIN_KINDS}")
        if (c.requirements or c.modules) and not c.distributions:
            problems.append(f"{c.key}: requirements or modules without a distribution")
        if c.follows is not None and (c.follows not in BY_KEY or c.requirements):
            problems.append(f"{c.key}: follows {c.follows!r}, which must be another component, and adds no "
                            "requirements of its own")
        if c.per_cuda_major and not all(re.search(r"-cu\d+$", d) for d in c.distributions):
            problems.append(f"{c.key}: per_cuda_major, but not every distribution ends in -cuNN")
        if c.build_arg is not None and not re.fullmatch(r"[A-Z][A-Z0-9_]*", c.build_arg):
            problems.append(f"{c.key}: build_arg {c.build_arg!r} is not an ARG name such as 'TE_VERSION'")
        if c.in_tag is not None:
            problems += _tag_part_problems(c, c.in_tag)
    named = [c.in_tag for c in CATALOGUE if c.in_tag is not None]
    for name, values in (("key", [c.key for c in CATALOGUE]), ("label", [c.label for c in CATALOGUE]),
                         ("build_arg", [c.build_arg for c in CATALOGUE if c.build_arg]),
                         ("tag prefix", [p.prefix for p in named]), ("tag rank", [p.rank for p in named])):
        if len(set(values)) != len(values):
            problems.append(f"two components share a {name}")
    return problems


def _tag_part_problems(c: Component, part: TagPart) -> list[str]:
    problems = []
    if not re.fullmatch(r"[a-z][a-z0-9]*", part.prefix):
        problems.append(f"{c.key}: tag prefix {part.prefix!r} is not lowercase letters and digits, e.g. 'te'")
    if part.until not in LAYERS or (c.layer in LAYERS and LAYERS.index(part.until) < LAYERS.index(c.layer)):
        problems.append(f"{c.key}: in_tag until {part.until!r} must be a layer from its own ({c.layer!r}) up")
    return problems
