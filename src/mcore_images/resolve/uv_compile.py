"""uv, the locks' one resolver: `uv pip compile` for a stack's Python and platform, and what its answer says.

A layer is resolved at the versions given (the layers below, the stack's constraints, another machine's agreed
pins), without re-emitting the layers below or the stack's left-out distributions, under the stack's declared
overrides, with hashes. uv runs in a temporary folder with relative names, so an unchanged layer resolves to the
same bytes; what uv says when it finds no lock is cut to the lines that say why (``uv_reason``).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from mcore_images import tools
from mcore_images.catalogue.stacks import Override, Stack, repo_root
from mcore_images.catalogue.versions import Requirement
from mcore_images.errors import InputError
from mcore_images.resolve import pypi
from mcore_images.resolve.layer_requirements import BASE_PROVIDED, platform
from mcore_images.resolve.lock_files import DEFAULT_MACHINE, PIN
from mcore_images.resolve.pypi import resolver_environment

NO_SOLUTION = "No solution found"
"""How uv begins its answer when the requirements conflict (not when the index cannot be read)."""


def _uv() -> str:
    return tools.require("uv")


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
    result, text, cmd = run(stack, requirements, below, constraints, machine, preferred, stack.overrides)
    if result.returncode != 0:
        log = repo_root() / "build" / f"lock-{stack.name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        pinned = {**(constraints or {}), **below}
        log.write_text(f"$ {' '.join(cmd)}\n# requirements: {requirements}\n# constraints: {pinned}\n" + result.stderr)
        raise InputError(f"uv could not resolve a layer of stack '{stack.name}' ({log} has uv's reasoning): "
                         f"{uv_reason(result.stderr).strip()}")
    if stack.torch_source == "base":
        text = drop_base_provided(text)
    return text


def run(stack: Stack, requirements: list[str], below: dict[str, str], constraints: dict[str, str] | None,
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
        for name in [*below, *(o.name for o in stack.left_out)]:  # uv resolves them and does not write them
            cmd += ["--no-emit-package", name]
        out = Path(tmp) / "resolved.txt"
        if preferred:
            out.write_text(preferred)
            cmd += ["--output-file", out.name]
        result = tools.run(cmd, capture_output=True, text=True, check=False, cwd=tmp, env=resolver_environment())
        text = out.read_text() if preferred and result.returncode == 0 else result.stdout
    return result, text, cmd


def drop_base_provided(text: str) -> str:
    """Remove blocks of packages the base image itself provides (NGC's torch, TE, apex, CUDA libs)."""
    out: list[str] = []
    skipping = False
    for line in text.splitlines():
        match = PIN.match(line)
        if match:
            skipping = bool(BASE_PROVIDED.match(match.group(1).lower().replace("_", "-")))
        elif not line.startswith(" "):  # the file's own lines (uv's list of what it left out) end a block
            skipping = False
        if not skipping:
            out.append(line)
    return "\n".join(out) + "\n"
