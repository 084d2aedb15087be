"""Hashed per-layer locks (env/locks/<stack>/<layer>.txt), computed from env/stacks.json.

Each layer's lock is the complete closure of what that layer adds, resolved with `uv pip compile`
for the stack's Python and platform, constrained by the layers below and without re-emitting
their packages. The Dockerfile installs a lock with `pip --require-hashes --no-deps`, so a build
resolves nothing: torch cannot be swapped by a later layer, and every download is hash-checked.
Locks are derived files: `mcore-images lock --check` (run by the tests) proves they still match
the pins, and `mcore-images lock` rewrites them.
"""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import tarfile
import tempfile
import urllib.request
from email.parser import Parser
from pathlib import Path

from mcore_images.errors import InputError
from mcore_images.stacks import Stack, repo_root

LOCK_LAYERS = ("base", "builder", "kernels", "runtime", "app")
PLATFORM = "x86_64-manylinux_2_28"
PYPI_SIMPLE = "https://pypi.org/simple"
# Packages a base image provides when the stack takes torch from it (NGC): never emitted.
BASE_PROVIDED = re.compile(r"^(torch|triton|nvidia-.*|transformer-engine.*|apex|cuda-.*)$")
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;\\]+)")


def cuda_major(stack: Stack) -> str:
    return stack.cuda.split(".")[0]


def sdist_requirements(name: str, version: str) -> list[str]:
    """Requires-Dist of an sdist, read from its PKG-INFO (no build, no setup.py run)."""
    url = f"{PYPI_SIMPLE}/{name}/"
    req = urllib.request.Request(url, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        files = json.load(resp)["files"]
    wanted = [f for f in files if f["filename"].endswith(".tar.gz") and f"-{version}.tar.gz" in f["filename"]]
    if not wanted:
        raise InputError(f"no sdist of {name}=={version} on PyPI; check the pin in env/stacks.json")
    with urllib.request.urlopen(wanted[0]["url"], timeout=300) as resp:
        data = resp.read()
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        member = next(m for m in tar.getmembers() if m.name.count("/") == 1 and m.name.endswith("/PKG-INFO"))
        pkg_info = tar.extractfile(member).read().decode()
    return Parser().parsestr(pkg_info).get_all("Requires-Dist") or []


def layer_inputs(stack: Stack, te_torch_requires: list[str] | None = None) -> dict[str, list[str]]:
    """Top-level requirements each layer adds, from the stack's pins."""
    inputs: dict[str, list[str]] = {layer: [] for layer in LOCK_LAYERS}
    if stack.torch_source == "pypi":
        inputs["base"].append(f"torch=={stack.torch}")
    compiles = stack.te_source == "build" or stack.apex not in ("none", "base")
    if compiles:
        inputs["builder"] += ["setuptools", "wheel", "pybind11", "ninja", "packaging"]
        if stack.torch_source == "pypi":
            cu = stack.cuda
            # nvcc's pieces ship as separate wheels; all of them must match torch's CUDA minor.
            inputs["builder"] += [f"nvidia-{part}=={cu}.*" for part in ("cuda-nvcc", "cuda-cccl", "cuda-crt", "nvvm")]
    if stack.te_source in ("build", "pypi"):
        core = f"transformer-engine-cu{cuda_major(stack)}"
        inputs["kernels"] += [f"transformer-engine=={stack.te}", f"{core}=={stack.te}"]
        # The extension is compiled here and installed without deps: lock what it requires.
        for requirement in te_torch_requires or []:
            name = re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].lower().replace("_", "-")
            if name not in ("torch", core):
                inputs["kernels"].append(requirement)
    if stack.has("mcore"):
        inputs["runtime"].append(f"megatron-core=={stack.mcore}")
    if stack.has("mbridge"):
        inputs["runtime"].append(f"mbridge[megatron]=={stack.mbridge}")
    if stack.has("megatron_bridge"):
        inputs["runtime"].append(f"megatron-bridge=={stack.megatron_bridge}")
    if stack.has("verl"):
        inputs["app"].append(f"verl=={stack.verl}")
    return inputs


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
        raise InputError("`uv` is needed to compute locks; install it with `pip install uv` (or `pip install -e .[lock]`)")
    return uv


def compile_layer(stack: Stack, requirements: list[str], below: dict[str, str]) -> str:
    """Resolve one layer with uv, constrained by (and not re-emitting) the layers below it."""
    with tempfile.TemporaryDirectory() as tmp:
        req = Path(tmp) / "requirements.in"
        req.write_text("\n".join(requirements) + "\n")
        con = Path(tmp) / "constraints.txt"
        con.write_text("".join(f"{n}=={v}\n" for n, v in below.items()))
        cmd = [_uv(), "pip", "compile", str(req), "--constraint", str(con), "--generate-hashes",
               "--python-version", stack.python, "--python-platform", PLATFORM, "--no-header",
               "--quiet", "--index-url", f"{PYPI_SIMPLE}/"]
        for name in below:
            cmd += ["--no-emit-package", name]
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise InputError(f"uv could not resolve layer of stack '{stack.name}': "
                             f"{result.stderr.strip().splitlines()[-1] if result.stderr.strip() else 'no output'}")
    text = result.stdout
    if stack.torch_source == "base":
        text = _drop_base_provided(text)
    return text


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


def header(stack: Stack, layer: str, requirements: list[str]) -> str:
    return (f"# Lock of layer '{layer}' of stack '{stack.name}': derived from env/stacks.json by "
            f"`mcore-images lock --stack {stack.name}`; do not edit.\n"
            f"# Python {stack.python}, {PLATFORM}. Top level: {', '.join(requirements)}\n")


def lock_dir(stack: Stack, root: Path | None = None) -> Path:
    return (root or repo_root()) / "env" / "locks" / stack.name


def write_locks(stack: Stack, root: Path | None = None) -> list[Path]:
    te_requires = (sdist_requirements("transformer-engine-torch", stack.te)
                   if stack.te_source == "build" else [])
    inputs = layer_inputs(stack, te_requires)
    below: dict[str, str] = {}
    written = []
    folder = lock_dir(stack, root)
    folder.mkdir(parents=True, exist_ok=True)
    for layer in LOCK_LAYERS:
        path = folder / f"{layer}.txt"
        if not inputs[layer]:
            path.unlink(missing_ok=True)
            continue
        text = compile_layer(stack, inputs[layer], below)
        path.write_text(header(stack, layer, inputs[layer]) + text)
        below.update(pins(text))
        written.append(path)
    return written


def check_locks(stack: Stack, root: Path | None = None) -> list[str]:
    """Problems between a stack's pins and its committed locks (offline; no resolution)."""
    problems = []
    folder = lock_dir(stack, root)
    expected = {
        "base": {"torch": stack.torch} if stack.torch_source == "pypi" else {},
        "kernels": ({"transformer-engine": stack.te, f"transformer-engine-cu{cuda_major(stack)}": stack.te}
                    if stack.te_source in ("build", "pypi") else {}),
        "runtime": {k: v for k, v in (("megatron-core", stack.mcore), ("mbridge", stack.mbridge),
                                      ("megatron-bridge", stack.megatron_bridge)) if v != "none"},
        "app": {"verl": stack.verl} if stack.has("verl") else {},
    }
    seen: dict[str, str] = {}
    for layer in LOCK_LAYERS:
        path = folder / f"{layer}.txt"
        found = pins(path.read_text()) if path.is_file() else {}
        for name, version in expected.get(layer, {}).items():
            if found.get(name) != version:
                problems.append(f"{path.relative_to(folder.parents[2])}: {name} is "
                                f"{found.get(name, 'missing')}, env/stacks.json pins {version}; "
                                f"run `mcore-images lock --stack {stack.name}`")
        for name, version in found.items():
            if name in seen and seen[name] != version:
                problems.append(f"{path.name}: {name}=={version} conflicts with {seen[name]} from a lower layer")
            seen[name] = version
        if path.is_file() and "--hash=sha256:" not in path.read_text():
            problems.append(f"{path}: no hashes; run `mcore-images lock --stack {stack.name}`")
    return problems
