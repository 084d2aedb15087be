"""Hashed per-layer locks (env/locks/<stack>/<layer>.txt), computed from env/stacks.json.

Each layer's lock is the complete closure of what that layer adds, resolved with `uv pip compile`
for the stack's Python and platform, constrained by the layers below and without re-emitting
their packages. The Dockerfile installs a lock with `pip --require-hashes --no-deps`, so a build
resolves nothing: torch cannot be swapped by a later layer, and every download is hash-checked.
Locks are derived files: `mcore-images lock --check` (run by the tests) proves they still match
the pins, and `mcore-images lock` rewrites them.

A stack is locked for each platform it lists: x86_64 at env/locks/<stack>/, aarch64 (linux/arm64) at
env/locks/aarch64/<stack>/, a tree that mirrors the first path for path. BuildKit picks the tree of the platform
it builds (bake gives the arm64 build its own `locks` context, docker-bake.hcl), so the Dockerfile mounts the same
`<stack>/<layer>.txt` on every platform and an amd64 step's cache key never sees the arm64 locks. The aarch64 locks
are resolved at the x86_64 locks' versions wherever a package exists for both, so the platforms of one tag hold
the same releases (`--check` holds them to it).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import io
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from email.parser import Parser
from pathlib import Path

from mcore_images.catalogue import components, platforms, tags
from mcore_images.catalogue.components import LOCK_LAYERS
from mcore_images.catalogue.stacks import Override, Stack, checkout_root, get_stack, load_stacks, repo_root
from mcore_images.catalogue.versions import Requirement, at_least
from mcore_images.command import Command, print_json
from mcore_images.errors import InputError
from mcore_images.resolve import declared_overrides, engine_records, engines, pypi, rules
from mcore_images.resolve.pypi import resolver_environment

# Layers that branch off the chain: built FROM base, but nothing above them inherits their packages.
SIDE_LAYERS = ("builder",)
# glibc of each base (manylinux tag uv resolves wheels for): wheels newer than the base cannot load.
GLIBC = {"ubuntu24.04": "2_39", "ubuntu22.04": "2_35", "ngc": "2_39", "debian": "2_28", "debian-bookworm": "2_36"}
"""The glibc a base offers, as a manylinux tag. "debian" is the floor the trixie stacks are locked for; bookworm's
own 2.36 is named (vLLM 0.12's wheels are manylinux_2_31)."""
# Packages a base image provides when the stack takes torch from it (NGC): never emitted.
BASE_PROVIDED = re.compile(
    r"^(torch|torchvision|torchaudio|triton|nvidia-.*|transformer-engine.*|apex|flash-attn|cuda-.*)$")
"""What NGC's PyTorch container builds against its own torch (its /etc/pip/constraint.txt pins them): a lock
for a stack whose torch comes with the base never re-installs these from PyPI."""
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;\\]+)")


DEFAULT_MACHINE = platforms.DEFAULT.machine
"""The machine whose locks sit at env/locks/<stack>/ (every stack's first platform before platforms were a
setting); another machine's are under env/locks/<machine>/."""


def platform(stack: Stack, machine: str = DEFAULT_MACHINE) -> str:
    """uv's --python-platform for the stack's base image on ``machine`` (one glibc per base, whatever the machine)."""
    if stack.flavor == "debian" and f"debian-{stack.debian_suite}" in GLIBC:
        return f"{machine}-manylinux_{GLIBC[f'debian-{stack.debian_suite}']}"
    if stack.flavor in ("ngc", "debian"):
        return f"{machine}-manylinux_{GLIBC[stack.flavor]}"
    release = re.search(r"ubuntu[0-9.]+", stack.base_image)
    if not release or release.group(0) not in GLIBC:
        raise InputError(f"no glibc recorded for base {stack.base_image}; add its Ubuntu release to GLIBC in lock.py")
    return f"{machine}-manylinux_{GLIBC[release.group(0)]}"


def cuda_major(stack: Stack) -> str:
    return stack.cuda.split(".")[0]


def sdist_requirements(name: str, version: str) -> list[str]:
    """Requires-Dist of an sdist, read from its PKG-INFO (no build, no setup.py run)."""
    files = pypi.index_files(name)
    wanted = [f for f in files if f["filename"].endswith(".tar.gz") and f"-{version}.tar.gz" in f["filename"]]
    if not wanted:
        raise InputError(f"no sdist of {name}=={version} on PyPI; check the pin in env/stacks.json")
    with urllib.request.urlopen(wanted[0]["url"], timeout=300) as resp:
        data = resp.read()
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        member = next(m for m in tar.getmembers() if m.name.count("/") == 1 and m.name.endswith("/PKG-INFO"))
        pkg_info = tar.extractfile(member).read().decode()
    return Parser().parsestr(pkg_info).get_all("Requires-Dist") or []


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


def pins(text: str) -> dict[str, str]:
    """name -> version for every `name==version` line of a lock."""
    out = {}
    for line in text.splitlines():
        match = _PIN.match(line.strip())
        if match:
            out[match.group(1).lower().replace("_", "-")] = match.group(3)
    return out


def _uv() -> str:
    uv = shutil.which("uv")
    if not uv:
        raise InputError("`uv` is needed to compute locks; install it with `pip install uv` "
                         "(or `pip install -e .[lock]`)")
    return uv


def uv_reason(stderr: str) -> str:
    """The lines of uv's explanation that say why: the first step of its chain (it names the conflicting
    requirements) and its conclusion ("… are unsatisfiable"), not a hint after it."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    conclusion = next((line for line in reversed(lines) if "unsatisfiable" in line), None)
    if conclusion is None:
        return next((line for line in reversed(lines) if not line.startswith("hint:")), None) or "no output"
    first = next((line for line in lines if "Because" in line), conclusion)
    first = first[first.index("Because"):] if "Because" in first else first
    return conclusion if first == conclusion or first in conclusion else f"{first} … {conclusion}"


def compile_layer(stack: Stack, requirements: list[str], below: dict[str, str],
                  constraints: dict[str, str] | None = None, machine: str = DEFAULT_MACHINE,
                  preferred: str = "") -> str:
    """Resolve requirements with uv at the given versions, without re-emitting the layers below, under the stack's
    declared overrides. ``preferred`` (lock text, e.g. the committed lock of an overridden layer) is given to uv as
    its existing output file, whose pins uv keeps wherever the requirements allow: an override moves what it must
    and nothing else."""
    result, text, cmd = _uv_compile(stack, requirements, below, constraints, machine, preferred, stack.overrides)
    if result.returncode != 0:
        log = repo_root() / "build" / f"lock-{stack.name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        pinned = {**(constraints or {}), **below}
        log.write_text(f"$ {' '.join(cmd)}\n# requirements: {requirements}\n# constraints: {pinned}\n" + result.stderr)
        raise InputError(f"uv could not resolve a layer of stack '{stack.name}' ({log} has uv's reasoning): "
                         f"{uv_reason(result.stderr).strip()}")
    if stack.torch_source == "base":
        text = _drop_base_provided(text)
    return text


def _uv_compile(stack: Stack, requirements: list[str], below: dict[str, str], constraints: dict[str, str] | None,
                machine: str, preferred: str,
                overrides: tuple[Override, ...]) -> tuple[subprocess.CompletedProcess[str], str, list[str]]:
    """One `uv pip compile` of the stack's Python and platform: (uv's result, the lock text, the command)."""
    with tempfile.TemporaryDirectory() as tmp:
        req = Path(tmp) / "requirements.in"
        req.write_text("\n".join(requirements) + "\n")
        con = Path(tmp) / "constraints.txt"
        pinned = {**(constraints or {}), **below}
        con.write_text("".join(f"{n}=={v}\n" for n, v in pinned.items())
                       + "".join(f"{c}\n" for c in stack.constraints if Requirement(c).name.lower() not in pinned))
        # Relative names (uv runs in the folder): the "# via -c constraints.txt" notes stay the same
        # from one resolution to the next, so an unchanged layer resolves to the same bytes.
        # --python: the interpreter uv runs builds with (this one), so it does not search the host for one of the
        # stack's Python (seconds per resolution, and host-dependent); the target is --python-version.
        cmd = [_uv(), "pip", "compile", req.name, "--constraint", con.name, "--generate-hashes",
               "--python", sys.executable,
               "--python-version", stack.python, "--python-platform", platform(stack, machine), "--no-header",
               "--quiet", "--index-url", f"{pypi.PYPI_SIMPLE}/"]
        if overrides:
            (Path(tmp) / "overrides.txt").write_text("".join(f"{o.pin}\n" for o in overrides))
            cmd += ["--override", "overrides.txt"]
        for name in below:
            cmd += ["--no-emit-package", name]
        out = Path(tmp) / "resolved.txt"
        if preferred:
            out.write_text(preferred)
            cmd += ["--output-file", out.name]
        result = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=tmp,
                                env=resolver_environment())
        text = out.read_text() if preferred and result.returncode == 0 else result.stdout
    return result, text, cmd


NO_SOLUTION = "No solution found"
"""How uv begins its answer when the requirements conflict (not when the index cannot be read)."""


def prove_overrides(stack: Stack, inputs: dict[str, list[str]], machine: str = DEFAULT_MACHINE) -> None:
    """Before a stack with declared overrides is locked: each is needed (its whole chain resolves without none of
    them), and none overrides more than the one requirement it names (declared_overrides.hidden). InputError
    naming the fix otherwise; nothing is written."""
    if not stack.overrides:
        return
    chain = [req for layer in LOCK_LAYERS if layer not in SIDE_LAYERS for req in inputs[layer]]

    def resolve(overrides: tuple[Override, ...]) -> tuple[bool, str]:
        result, _, _ = _uv_compile(stack, chain, {}, None, machine, "", overrides)
        if result.returncode and NO_SOLUTION not in result.stderr:
            raise InputError(f"uv could not read the index for stack '{stack.name}': {uv_reason(result.stderr)}")
        return result.returncode == 0, uv_reason(result.stderr)

    declared_overrides.prove_needed(stack, resolve)
    result, text, _ = _uv_compile(stack, chain, {}, None, machine, "", stack.overrides)
    if result.returncode:
        raise InputError(f"uv could not resolve stack '{stack.name}' with its overrides: {uv_reason(result.stderr)}")
    hidden = declared_overrides.hidden(stack, text)
    if hidden:
        raise InputError(hidden[0])


def _drop_base_provided(text: str) -> str:
    """Remove blocks of packages the base image itself provides (NGC's torch, TE, apex, CUDA libs)."""
    out: list[str] = []
    skipping = False
    for line in text.splitlines():
        match = _PIN.match(line)
        if match:
            skipping = bool(BASE_PROVIDED.match(match.group(1).lower().replace("_", "-")))
        if not skipping:
            out.append(line)
    return "\n".join(out) + "\n"


def resolution_line(stack: Stack, machine: str = DEFAULT_MACHINE) -> str:
    """What every layer of the stack is resolved for: Python, platform and the stack's constraints."""
    constraints = f", constraints: {'; '.join(stack.constraints)}" if stack.constraints else ""
    return f"# Python {stack.python}, {platform(stack, machine)}{constraints}."


def header(stack: Stack, layer: str, requirements: list[str], machine: str = DEFAULT_MACHINE) -> str:
    top = ", ".join(requirements) or "nothing (this layer installs no package from PyPI)"
    return (f"# Lock of layer '{layer}' of stack '{stack.name}': derived from env/stacks.json by "
            f"`mcore-images lock --stack {stack.name}`; do not edit.\n"
            f"{resolution_line(stack, machine)} Top level: {top}\n")


def resolved_inputs(stack: Stack) -> dict[str, list[str]]:
    """Every layer's top-level requirements, with what TE's extension sdist requires (read from PyPI)."""
    te_requires = (sdist_requirements("transformer-engine-torch", stack.te)
                   if stack.te_source == "build" else [])
    return layer_inputs(stack, te_requires)


_HEADER_STACK = re.compile(r"^# Lock of layer 'base' of stack '([^']+)'")


def base_lock_source(stack: Stack, text: str, root: Path | None = None,
                     machine: str = DEFAULT_MACHINE) -> Stack | None:
    """The stack whose base lock ``text`` is, byte for byte, when another stack of the same base tag
    (`lock --base-from`); None for a stack's own lock. A copy is judged as its source's lock."""

    match = _HEADER_STACK.match(text)
    if not match or match.group(1) == stack.name:
        return None
    source = load_stacks((root or repo_root()) / "env" / "stacks.json").get(match.group(1))
    if source is None or tags.layer_tag("base", source) != tags.layer_tag("base", stack):
        return None
    original = lock_dir(source, root, machine) / "base.txt"
    return source if original.is_file() and original.read_text() == text else None


def stale_layers(stack: Stack, inputs: dict[str, list[str]], folder: Path,
                 machine: str = DEFAULT_MACHINE) -> list[str]:
    """The lock layers whose committed file was not resolved from these inputs (a layer's header records
    its Python, platform, constraints and top-level requirements); a base copied from a stack of the same base
    tag is current while it equals that stack's."""
    stale = []
    for layer in own_layers(stack):
        path = folder / f"{layer}.txt"
        text = path.read_text() if path.is_file() else ""
        if layer == "base" and text and base_lock_source(stack, text, machine=machine) is not None:
            continue
        if not text.startswith(header(stack, layer, inputs[layer], machine)):
            stale.append(layer)
    texts = {layer: (folder / f"{layer}.txt").read_text() if (folder / f"{layer}.txt").is_file() else ""
             for layer in LOCK_LAYERS}
    held = held_by_layer(stack, texts)
    stale += [layer for layer in declared_overrides.problems(stack, held, texts)
              if layer in own_layers(stack) and layer not in stale]
    if declared_overrides.unheld(stack, held.get("app", {})) and own_layers(stack)[-1] not in stale:
        stale.append(own_layers(stack)[-1])  # `lock` then proves it needed, or refuses it
    return sorted(stale, key=LOCK_LAYERS.index)


def held_by_layer(stack: Stack, texts: dict[str, str]) -> dict[str, dict[str, str]]:
    """Each lock layer -> {distribution: version} it and the layers below it install (a side layer: with the base
    alone), from the lock texts given (a layer of ``layers_from`` read where it is when not given)."""
    chain: dict[str, str] = {}
    out = {}
    for layer in LOCK_LAYERS:
        text = texts.get(layer) or ""
        if not text and stack.layer_stack(layer) != stack.name and lock_path(stack, layer).is_file():
            text = lock_path(stack, layer).read_text()
        mine = pins(text)
        if layer in SIDE_LAYERS:
            out[layer] = {**pins(texts.get("base") or ""), **mine}
            continue
        chain.update(mine)
        out[layer] = dict(chain)
    return out


def write_side_lock(stack: Stack, layer: str, inputs: dict[str, list[str]], folder: Path,
                    machine: str = DEFAULT_MACHINE) -> Path:
    """Re-resolve a side layer (the builder) alone, at the versions the committed chain already pins:
    its toolchain never reaches the published layers, so they stay byte for byte."""
    chain = {layer_: pins((folder / f"{layer_}.txt").read_text()) for layer_ in LOCK_LAYERS
             if layer_ not in SIDE_LAYERS}
    below = chain["base"]
    agreed = {**default_pins(stack, machine),
              **{name: version for layer_pins in chain.values() for name, version in layer_pins.items()}}
    requirements = inputs["base"] + inputs[layer]
    text = compile_layer(stack, requirements, below, constraints=agreed, machine=machine) if inputs[layer] else ""
    path = folder / f"{layer}.txt"
    path.write_text(header(stack, layer, inputs[layer], machine)
                    + declared_overrides.header_lines(stack, {**below, **pins(text)}) + text)
    return path


def locks_root(root: Path | None = None, machine: str = DEFAULT_MACHINE) -> Path:
    """The tree of one machine's locks: env/locks for x86_64, env/locks/<machine> for another (bake's `locks`
    context of that platform)."""
    top = (root or repo_root()) / "env" / "locks"
    return top if machine == DEFAULT_MACHINE else top / machine


def lock_dir(stack: Stack, root: Path | None = None, machine: str = DEFAULT_MACHINE) -> Path:
    return locks_root(root, machine) / stack.name


def lock_path(stack: Stack, layer: str, root: Path | None = None, machine: str = DEFAULT_MACHINE) -> Path:
    """The lock file of one layer: a stack with ``layers_from`` reads its lower layers' from that stack."""
    return locks_root(root, machine) / stack.layer_stack(layer) / f"{layer}.txt"


def default_pins(stack: Stack, machine: str, root: Path | None = None, tree: Path | None = None) -> dict[str, str]:
    """For another machine than x86_64: every version the stack's x86_64 locks pin (its own layers, from ``tree``
    when given, an override's; and those it shares), which that machine's resolution is held to wherever a package
    exists for both; {} for x86_64."""
    if machine == DEFAULT_MACHINE:
        return {}
    found: dict[str, str] = {}
    for layer in LOCK_LAYERS:
        path = lock_path(stack, layer, root)
        if tree is not None and stack.layer_stack(layer) == stack.name:
            path = tree / stack.name / f"{layer}.txt"
        if path.is_file():
            found.update(pins(path.read_text()))
    return found


def own_layers(stack: Stack) -> tuple[str, ...]:
    """The lock layers a stack resolves and commits itself."""
    return tuple(layer for layer in LOCK_LAYERS if stack.layer_stack(layer) == stack.name)


def write_locks(stack: Stack, root: Path | None = None, keep_below: str | None = None,
                keep_from: Path | None = None, folder: Path | None = None,
                machine: str = DEFAULT_MACHINE, agree_with: Path | None = None) -> list[Path]:
    """Resolve all layers together once, then split that one solution into per-layer locks.

    Resolving layer by layer against the pins below can paint itself into a corner (a lower layer
    picks a numpy that an upper layer's package refuses); one joint solution cannot. Each layer's
    lock holds what its inputs need beyond the layers below, at the joint solution's versions.

    With `keep_below` (a layer), the locks of the layers under it are copied unchanged from
    `keep_from` and only that layer and the ones above are resolved, against their pins: a
    megatron-core bump then changes the runtime lock alone, and the layers below stay cached.
    Every layer gets a file (a header alone where it installs nothing). Another machine than x86_64 is resolved
    at the versions the x86_64 locks pin (``default_pins``; those of the tree ``agree_with``, an override's, when
    given).
    """
    inputs = resolved_inputs(stack)
    if machine == DEFAULT_MACHINE:  # another machine's locks follow x86_64's, where the overrides were proved
        prove_overrides(stack, inputs, machine)
    folder = folder or lock_dir(stack, root, machine)
    agreed = default_pins(stack, machine, root, agree_with)
    folder.mkdir(parents=True, exist_ok=True)
    shared = len(LOCK_LAYERS) - len(own_layers(stack))  # layers taken from layers_from come first
    first = max(LOCK_LAYERS.index(keep_below) if keep_below else 0, shared)
    below: dict[str, str] = {}
    for layer in LOCK_LAYERS[:first]:
        if stack.layer_stack(layer) != stack.name:
            text = lock_path(stack, layer, root, machine).read_text()  # the other stack's, read where it is
        else:
            text = (Path(keep_from or lock_dir(stack, machine=machine)) / f"{layer}.txt").read_text()
            (folder / f"{layer}.txt").write_text(text)
        if layer not in SIDE_LAYERS:
            below.update(pins(text))
    upper = [req for layer in LOCK_LAYERS[first:] for req in inputs[layer]]
    # An override (keep_from) re-resolves the upper layers preferring their committed pins.
    kept = Path(keep_from) if keep_from and keep_below else None
    committed = {layer: (kept / f"{layer}.txt").read_text() if kept and (kept / f"{layer}.txt").is_file() else ""
                 for layer in LOCK_LAYERS[first:]}
    joint = pins(compile_layer(stack, upper, below, constraints=agreed, machine=machine,
                               preferred="".join(committed.values()))) if upper else {}
    chain = [req for layer in LOCK_LAYERS[:first] if layer not in SIDE_LAYERS for req in inputs[layer]]
    written = []
    for layer in LOCK_LAYERS[first:]:
        path = folder / f"{layer}.txt"
        requirements = chain + inputs[layer]
        text = (compile_layer(stack, requirements, below, constraints={**agreed, **joint}, machine=machine,
                              preferred=committed[layer])
                if inputs[layer] else "")
        held = {**below, **pins(text)}
        path.write_text(header(stack, layer, inputs[layer], machine) + declared_overrides.header_lines(stack, held)
                        + text)
        if layer not in SIDE_LAYERS:
            # The builder is a side branch (its toolchain never reaches kernels or runtime).
            chain = requirements
            below.update(pins(text))
        written.append(path)
    return written


def check_locks(stack: Stack, root: Path | None = None) -> list[str]:
    """Problems between a stack's pins and its committed locks, for each of its platforms (offline; no
    resolution); a folder of locks for a platform the stack does not list is one too."""
    problems = [p for machine in stack.machines for p in _check_machine(stack, root, machine)]
    for machine in platforms.BY_MACHINE:
        folder = lock_dir(stack, root, machine)
        if machine not in stack.machines and any(folder.glob("*.txt")):
            problems.append(f"{_shown(folder, root)}/ holds {machine} locks, but stack '{stack.name}' does not list "
                            f"{platforms.BY_MACHINE[machine].name} in its platforms; delete the folder, or add the "
                            "platform")
    return problems


def _shown(path: Path, root: Path | None) -> str:
    """A lock's path as messages name it: from the checkout's top (env/locks/…)."""
    return str(path.relative_to(root or repo_root()))


def _check_machine(stack: Stack, root: Path | None, machine: str) -> list[str]:
    """check_locks for one machine's locks; another machine than x86_64 must pin what the x86_64 locks pin."""
    problems = []
    expected = expected_pins(stack)
    agreed = default_pins(stack, machine, root) if DEFAULT_MACHINE in stack.machines else {}
    seen: dict[str, str] = {}
    for layer in LOCK_LAYERS:
        path = lock_path(stack, layer, root, machine)
        if stack.layer_stack(layer) != stack.name:  # checked with its own stack; pins agree by validation
            seen.update(pins(path.read_text()) if path.is_file() and layer not in SIDE_LAYERS else {})
            continue
        shown = _shown(path, root)
        if not path.is_file():
            problems.append(f"{shown} is missing; run `mcore-images lock --stack {stack.name}`")
            continue
        found = pins(path.read_text())
        for name, version in expected.get(layer, {}).items():
            if found.get(name) != version:
                problems.append(f"{shown}: {name} is {found.get(name, 'missing')}, env/stacks.json pins {version}; "
                                f"run `mcore-images lock --stack {stack.name}`")
        for name, version in found.items():
            if name in seen and seen[name] != version:
                problems.append(f"{path.name}: {name}=={version} conflicts with {seen[name]} from a lower layer")
            seen[name] = version
            if name in agreed and agreed[name] != version:
                problems.append(f"{shown}: {name} is {version}, the {DEFAULT_MACHINE} locks pin {agreed[name]} (the "
                                f"platforms of one tag hold the same releases); run `mcore-images lock --stack "
                                f"{stack.name}`")
        text = path.read_text()
        if found and "--hash=sha256:" not in text:
            problems.append(f"{path}: no hashes; run `mcore-images lock --stack {stack.name}`")
        lines = text.splitlines()
        resolved_as = (base_lock_source(stack, text, root, machine) if layer == "base" else None) or stack
        if len(lines) < 2 or not lines[1].startswith(resolution_line(resolved_as, machine)):
            problems.append(f"{shown} was not resolved for {resolution_line(stack, machine)[2:]} "
                            f"run `mcore-images lock --stack {stack.name}`")
    problems += _override_problems(stack, root, machine)
    if stack.mcore != components.NONE and not problems:
        absent = [name for name in UNDECLARED_RUNTIME if name not in seen]
        if absent:
            problems.append(f"{_shown(lock_dir(stack, root, machine), root)}: {', '.join(absent)} missing from the "
                            f"locks ({UNDECLARED_RUNTIME[absent[0]]}); run `mcore-images lock --stack {stack.name} "
                            "--from-layer runtime`")
    return problems


def _override_problems(stack: Stack, root: Path | None, machine: str) -> list[str]:
    """Where the committed locks disagree with the stack's declared overrides (offline)."""
    paths = {layer: lock_path(stack, layer, root, machine) for layer in LOCK_LAYERS}
    texts = {layer: path.read_text() if path.is_file() else "" for layer, path in paths.items()}
    held = held_by_layer(stack, texts)
    fix = f"run `mcore-images lock --stack {stack.name}`"
    problems = [f"{_shown(paths[layer], root)}: {'; '.join(found)}; {fix}"
                for layer, found in declared_overrides.problems(stack, held, texts).items()
                if stack.layer_stack(layer) == stack.name]
    problems += [f"stack '{stack.name}': override {o.pin} pins a distribution no lock of the stack holds, so it is not "
                 f"needed; remove it from the stack's overrides, or {fix}"
                 for o in declared_overrides.unheld(stack, held["app"])]
    return problems


def update_locks(stack: Stack, full: bool = False, from_layer: str | None = None) -> tuple[str | None, list[Path]]:
    """Re-resolve what the pins changed, for every platform of the stack: from the lowest stale layer up (``full``:
    every layer; ``from_layer``: from that one), keeping the layers below it byte for byte. Another machine than
    x86_64 re-resolves from where x86_64 did too (it is held to x86_64's versions), and only once the rules allow
    the platform. Returns (first layer resolved or None when all were current, files written)."""
    if engines.unrecorded(stack):  # what the rules engine-torch and platform-torch read, from the index like the locks
        engine_records.record(stack)
    inputs = resolved_inputs(stack)
    firsts: list[str] = []
    written: list[Path] = []
    for machine in sorted(stack.machines, key=lambda m: m != DEFAULT_MACHINE):  # x86_64 first: the others follow it
        if machine != DEFAULT_MACHINE:
            refused = platform_refusal(stack, machine)
            if refused:
                raise InputError(refused)
        follow = firsts[0] if firsts and machine != DEFAULT_MACHINE else None
        first, paths = _update_machine(stack, inputs, machine, full, from_layer or follow)
        firsts += [first] if first else []
        written += paths
    return (min(firsts, key=LOCK_LAYERS.index) if firsts else None), written


def _shared_base(stack: Stack, machine: str) -> Path | None:
    """For another machine than x86_64: the base lock of the stack whose x86_64 base lock this stack's is a copy of
    (one content tag, one content), None when its x86_64 base is its own."""
    if machine == DEFAULT_MACHINE:
        return None
    own = lock_dir(stack) / "base.txt"
    source = base_lock_source(stack, own.read_text()) if own.is_file() else None
    if source is None or machine not in source.machines:
        return None
    path = lock_dir(source, machine=machine) / "base.txt"
    return path if path.is_file() else None


def platform_refusal(stack: Stack, machine: str) -> str | None:
    """Why the rules refuse the platform of ``machine`` for this stack (one line), None when they allow it."""

    name = platforms.BY_MACHINE[machine].name
    broken = [v for v in rules.check(stack) if v.rule.startswith("platform-") and name in v.message]
    return f"no {machine} locks resolved: {broken[0]}" if broken else None


def _update_machine(stack: Stack, inputs: dict[str, list[str]], machine: str, full: bool,
                    from_layer: str | None) -> tuple[str | None, list[Path]]:
    folder = lock_dir(stack, machine=machine)
    shared = _shared_base(stack, machine)
    if shared is not None:  # the x86_64 base is another stack's (`lock --base-from`): so is this machine's
        mine = folder / "base.txt"
        if not mine.is_file() or mine.read_text() != shared.read_text():
            return "builder", write_locks(stack, keep_below="builder", keep_from=shared.parent, machine=machine)
    stale = stale_layers(stack, inputs, folder, machine)
    if not (full or from_layer) and stale and set(stale) <= set(SIDE_LAYERS):
        return stale[0], [write_side_lock(stack, layer, inputs, folder, machine) for layer in stale]
    first = "base" if full else (from_layer or (stale[0] if stale else None))
    if first is None and not _check_machine(stack, None, machine):
        return None, []
    first = first or "base"
    keep_below = None if first == "base" else first
    return first, write_locks(stack, keep_below=keep_below, keep_from=folder if keep_below else None, machine=machine)


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--stack", help="one stack (default: every stack)")
    p.add_argument("--check", action="store_true",
                   help="only check the committed locks against env/stacks.json, offline (exit 1 on a problem)")
    p.add_argument("--full", action="store_true", help="re-resolve every layer, not just the stale ones")
    p.add_argument("--from-layer", choices=LOCK_LAYERS[1:], default=None,
                   help="re-resolve from this layer up, keeping the layers below byte for byte")
    p.add_argument("--base-from", metavar="STACK", default=None,
                   help="take the base layer's lock from STACK, whose base tag this stack shares, and re-resolve the "
                        "layers above against it (one content tag, one content: the tag-content rule)")


def _lock_on_base_of(stack: Stack | None, source: str, stacks: dict[str, Stack], as_json: bool) -> int:
    """Copy ``source``'s base lock into ``stack`` and re-resolve the layers above it against that base."""

    if stack is None:
        raise InputError("--base-from needs --stack: the stack whose base lock is replaced")
    other = get_stack(source, stacks)
    if other.name == stack.name or stack.layer_stack("base") != stack.name:
        raise InputError(f"--base-from {source}: stack '{stack.name}' must build its own base, from another stack")
    mine, theirs = tags.layer_tag("base", stack), tags.layer_tag("base", other)
    if mine != theirs:
        raise InputError(f"--base-from {source}: its base is {theirs}, stack '{stack.name}''s is {mine}; only stacks "
                         "that tag one base image share its lock")
    lacking = [m for m in stack.machines if m not in other.machines]
    if lacking:
        raise InputError(f"--base-from {source}: it has no {', '.join(lacking)} locks to share; add its platforms, or "
                         "lock this stack on its own")
    written = [path for machine in sorted(stack.machines, key=lambda m: m != DEFAULT_MACHINE)
               for path in write_locks(stack, keep_below="builder", keep_from=lock_dir(other, machine=machine),
                                       machine=machine)]
    print_json({stack.name: {"base_from": other.name, "written": [str(p) for p in written]}}
          if as_json else f"{stack.name}: base lock from {other.name}; re-resolved from 'builder' up "
          f"({len(written)} files)")
    return 0


def _run(args: argparse.Namespace) -> int:
    checkout_root("lock")
    stacks = load_stacks()
    chosen = [get_stack(args.stack, stacks)] if args.stack else list(stacks.values())
    if args.check:
        problems = {s.name: check_locks(s) for s in chosen}
        if args.json:
            print_json(problems)
        else:
            for name, found in problems.items():
                print(f"{name}: " + ("locks match env/stacks.json" if not found else f"{len(found)} problem(s)"))
                for problem in found:
                    print(f"  error: {problem}", file=sys.stderr)
        return 1 if any(problems.values()) else 0
    if args.base_from:
        return _lock_on_base_of(get_stack(args.stack, stacks) if args.stack else None, args.base_from, stacks,
                                args.json)
    report = {}
    for stack in chosen:
        first, written = update_locks(stack, args.full, args.from_layer)
        report[stack.name] = {"from_layer": first, "written": [str(p) for p in written]}
        if not args.json:
            print(f"{stack.name}: locks current" if first is None else
                  f"{stack.name}: re-resolved side layer '{first}' alone"
                  if all(path.stem in SIDE_LAYERS for path in written) else
                  f"{stack.name}: re-resolved from layer '{first}' up ({len(written)} files)")
    if args.json:
        print_json(report)
    return 0


COMMANDS = (Command("lock", "resolve the hashed per-layer locks in env/locks (or --check them, offline)",
                    _arguments, _run, prints_data=True),)
