"""How test_gpu_scripts calls each step of the GPU scripts: the steps as each script's usage line names them
(`a X | b [Y] | c Z… (steps: …)`), and a value for every placeholder those lines use (GOOD), or one it must refuse
(BAD), in a sandbox of tests/support/gpu_host.py."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from mcore_images.catalogue.stacks import load_stacks
from tests.support.gpu_host import SYSTEM_PATH, Result, Sandbox, make_sandbox
from tests.unit.conftest import ROOT

SCRIPTS = [".ci/image-env-replica.sh", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / ".ci" / "gpu").glob("*.sh"))]
"""The GPU scripts and the replica script they both call, in the order a machine runs them."""
CUDA = load_stacks(ROOT / "env" / "stacks.json")["cuda"]
"""The stack the GPU machine's Python and torch are (replica-stack.sh replicates it over them)."""
PAIR = "te2.20-b36-c4.8.1"
"""The TE / FlashAttention 4 pair attention-pairs.sh runs here (PAIR_SET): one whose measured section is recorded."""
HERE = {("image-env-replica.sh", "export"), ("image-env-replica.sh", "locks"), ("replica-stack.sh", "apex-source"),
        ("replica-stack.sh", "megatron-lm-source"), ("attention-pairs.sh", "prepare")}
"""Steps the headers run on the CPU machine (PyPI, Docker, an apex or Megatron-LM checkout); every other step runs
on the GPU machine, where nothing outside can be reached."""


@dataclass(frozen=True)
class Step:
    """One call of a script: a step of its usage line and its placeholders; for a step that takes STEP…, one of
    those steps (``each``)."""

    script: str
    name: str
    params: tuple[str, ...]
    each: str | None = None

    @property
    def key(self) -> tuple[str, str]:
        return Path(self.script).name, self.name

    @property
    def id(self) -> str:
        return " ".join(filter(None, (Path(self.script).name, self.name, self.each)))


def name_of(param: str) -> str:
    return param.strip("[]").rstrip("…")


def optional(param: str) -> bool:
    return param.startswith("[")


def variadic(param: str) -> bool:
    return param.rstrip("]").endswith("…")


def steps_of(script: str) -> list[Step]:
    """The steps the script's usage line (what it prints when called with no step) names, in its order."""
    line = subprocess.run(["bash", script], cwd=ROOT, env={"PATH": SYSTEM_PATH}, capture_output=True, text=True,
                          check=False).stderr.strip()
    assert "usage: " in line, f"{script} with no step printed no usage line: {line!r}"
    text = line.split("usage: ", 1)[1].split(" ", 1)[1]
    each = re.search(r"\(steps: ([^;)]*)", text)
    steps = []
    for alternative in re.sub(r"\s*\(.*\)$", "", text).split(" | "):
        name, *params = alternative.split()
        if each and any(name_of(p) == "STEP" for p in params):
            steps += [Step(script, name, tuple(params), one) for one in each[1].split()]
        else:
            steps.append(Step(script, name, tuple(params)))
    return steps


STEPS = [step for script in SCRIPTS for step in steps_of(script)]
"""Every step of every script in order (`all DIR OUT STEP` once for each STEP)."""
CALLS = list(dict.fromkeys(Step(s.script, s.name, s.params) for s in STEPS))
"""Every step once (`all DIR OUT`, its steps by default)."""


@dataclass
class Box:
    """A sandbox and the folders the steps are given in it."""

    sandbox: Sandbox

    @property
    def root(self) -> Path:
        return self.sandbox.root

    def context(self, step: Step) -> dict[str, str]:
        """The values a step's command line and expectations are written with; its OUT is a new empty folder."""
        stem = Path(step.script).stem
        out = self.root / "out" / step.id.replace(" ", "-")
        out.mkdir(parents=True)
        return {"root": str(self.sandbox.repo), "dir": str(self.root / "dir"), "replica": str(self.root / stem),
                "pairs": str(self.root / f"{stem}-pairs"), "out": str(out), "tmp": str(self.root / "tmp"),
                "site": str(next(self.sandbox.host("gpu").glob("lib/python*/site-packages"))), "te": CUDA.te,
                "stack": CUDA.name, "pair": PAIR, "image": f"mcore-images:runtime-{CUDA.name}",
                "freeze": str(self.root / "freeze.txt"), "apex": str(self.root / "apex"),
                "megatron_lm": str(self.root / "megatron-lm"), "part": str(self.root / "carried.part.000")}

    def run(self, step: Step, args: list[str], ctx: dict[str, str], env: dict[str, str] | None = None) -> Result:
        """``bash SCRIPT STEP ARGS`` on the machine the step runs on; REPLICA, PAIRS and OUT in the sandbox."""
        role = "cpu" if step.key in HERE else "gpu"
        return self.sandbox.run(step.script, [step.name, *args], role,
                                {"REPLICA": ctx["replica"], "PAIRS": ctx["pairs"], "OUT": ctx["out"],
                                 "PAIR_SET": PAIR, **(env or {})})


def make_box(base: Path) -> Box:
    """A sandbox where nothing was prepared: DIR and the apex checkout are empty folders."""
    box = Box(make_sandbox(base, ROOT, CUDA.python, CUDA.torch))
    (box.root / "dir").mkdir()
    (box.root / "apex").mkdir()
    (box.root / "megatron-lm").mkdir()
    (box.root / "freeze.txt").write_text(f"torch=={CUDA.torch}\npip==24.0\n")
    (box.root / "carried.part.000").write_text("a carried part\n")
    return box


def ready_dir(ctx: dict[str, str]) -> None:
    """DIR as `export` or `locks` leaves it: the image's variables, its constraints and its PATH's commands."""
    folder = Path(ctx["dir"])
    (folder / "image-env.json").write_text(f'["MCORE_IMAGES_STACK={CUDA.name}"]\n')
    (folder / "constraints.txt").write_text(f"torch=={CUDA.torch}\n")
    (folder / "path-tools.txt").write_text("bash\nsh\n")


GOOD: dict[str, Callable[[dict[str, str]], list[str]]] = {
    "IMAGE": lambda c: [c["image"]],
    "DIR": lambda c: [c["dir"]],
    "STACK": lambda c: [CUDA.name],
    "FREEZE": lambda c: [c["freeze"]],
    "FILE": lambda c: sorted(str(p) for p in Path(c["dir"], "parts").glob("*")) or [c["part"]],
    "CMD": lambda c: ["python", "-m", "mcore_images.smoke", "--out", f"{c['out']}/smoke"],
    "APEX_CHECKOUT": lambda c: [c["apex"]],
    "MEGATRON_LM_CHECKOUT": lambda c: [c["megatron_lm"]],
    "OUT": lambda c: [c["out"]],
    ".whl/carry/NN": lambda c: [".whl/carry/00"],
    "PAIR": lambda c: [c["pair"]],
}
"""A value for each placeholder of the usage lines, as the headers use them."""


def _full(c: dict[str, str]) -> list[str]:
    full = Path(c["tmp"], "full")
    full.mkdir(exist_ok=True)
    (full / "summary.txt").write_text("an earlier run\n")
    return [str(full)]


BAD: dict[str, Callable[[dict[str, str]], list[str]]] = {
    "STACK": lambda c: ["no-such-stack"],
    "FREEZE": lambda c: [f"{c['tmp']}/no-such-freeze.txt"],
    "FILE": lambda c: [f"{c['tmp']}/no-such.part.000"],
    "APEX_CHECKOUT": lambda c: [c["tmp"]],
    "MEGATRON_LM_CHECKOUT": lambda c: [c["tmp"]],
    "OUT": _full,
    "STEP": lambda c: ["no-such-step"],
    ".whl/carry/NN": lambda c: [".whl/carry/99"],
    "PAIR": lambda c: ["te9.9-b9-c9.9"],
}
"""A value each placeholder must refuse where it can be wrong on its own (the refusal names it)."""


def arguments(step: Step, ctx: dict[str, str], bad: str | None = None) -> list[list[str]]:
    """Each placeholder's values, in order (``bad``: that placeholder's bad value)."""
    out = []
    for param in step.params:
        name = name_of(param)
        if name == bad:
            out.append(BAD[name](ctx))
        elif name == "STEP":
            out.append([step.each] if step.each else [])
        elif name in GOOD:
            out.append(GOOD[name](ctx))
        else:
            pytest.fail(f"{step.id}: no value for the placeholder {param} of its usage line: add one to GOOD")
    return out


def flat(values: list[list[str]]) -> list[str]:
    return [value for each in values for value in each]
