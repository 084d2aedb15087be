"""What test_gpu_scripts holds a GPU script's step to: every command line it reached that stood in (our program
exists where it runs and takes its arguments, a program on stdin compiles, every path it is given lies in the
sandbox and those it reads exist), the first one as its header documents it (EXPECTED), what a step that finishes
leaves (LEAVES), and how it refuses (one line, exit 2, nothing written)."""

from __future__ import annotations

import fnmatch
import importlib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.gpu_host import Result
from tests.support.stand_in import paths_in
from tests.unit.repo.gpu_scripts_calls import CUDA

INPUTS = ("PYTHONPATH", "PIP_CONSTRAINT", "MCORE_IMAGES_ROOT", "MCORE_IMAGES_REPLICA_SITE", "CUDNN_HOME",
          "CPLUS_INCLUDE_PATH", "LD_LIBRARY_PATH", "CUDA_HOME")
"""Variables a step hands a program as paths it reads: each entry must exist."""
SYSTEM = ("PATH", "_", "CUDA_HOME")
"""Variables that may name the machine's own folders (its commands, its CUDA toolkit): read, never written."""
EROFS = "Read-only file system"
"""What a write outside the sandbox fails with (every other file system is mounted read-only for the step)."""


@dataclass(frozen=True)
class Expect:
    """The first command a step reaches: its kind, its program (a shell pattern of the name), arguments that must
    appear in this order (shell patterns with the step's {context}), and variables it must be given."""

    kind: str
    program: str
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()


TE_COMPILE = Expect("build", "python3*", ("-m", "pip", "wheel", "--no-build-isolation", "-w", "{replica}/wheels",
                                          "{replica}/parts/transformer_engine_torch-{te}.tar.gz"),
                    (("NVTE_FRAMEWORK", "pytorch"), ("CPLUS_INCLUDE_PATH", "{site}/nvidia/cudnn/include")))
IN_REPLICA = (("PATH", "{replica}/bin"), ("PIP_CONSTRAINT", "{dir}/constraints.txt"), ("MCORE_IMAGES_ROOT", "{root}"),
              ("MCORE_IMAGES_STACK", CUDA.name), ("CUDNN_HOME", "{site}/nvidia/cudnn"))


def _gpu(*args: str) -> Expect:
    """A program run in the replica (image-env-replica.sh run: the image's variables, the replica's PATH)."""
    return Expect("gpu", "python3*", args, IN_REPLICA)


EXPECTED = {
    "image-env-replica.sh export": Expect("image", "docker", ("image", "inspect", "{image}")),
    "image-env-replica.sh locks": Expect("network", "python3", ("-m", "pip", "download", "--require-hashes", "--dest",
                                                                "{dir}/wheels", "-r", "{dir}/kernels.carry.txt")),
    "image-env-replica.sh install": TE_COMPILE,
    "image-env-replica.sh run": _gpu("-m", "mcore_images.smoke", "--out", "{out}/smoke"),
    "replica-stack.sh freeze": Expect("gpu", "nvidia-smi", ("--query-gpu=name,driver_version", "--format=csv")),
    "replica-stack.sh all install": TE_COMPILE,
    "replica-stack.sh all smoke": _gpu("-m", "mcore_images.smoke", "--out", "{out}/smoke"),
    "replica-stack.sh all wgrad": _gpu("-m", "mcore_images.smoke.wgrad_fusion", "--json"),
    "replica-stack.sh all apex-wgrad": _gpu("-", "{dir}/apex-csrc"),
    "replica-stack.sh all trainer-imports": _gpu("-m", "mcore_images.smoke.verl_step.trainer_imports"),
    "replica-stack.sh all verl-step": _gpu("-m", "mcore_images.smoke.verl_step", "--keep", "{tmp}/*", "--out",
                                           "{out}/verl-step"),
    "replica-stack.sh all megatron-lm": _gpu("-m", "torch.distributed.run", "--nproc-per-node", "1",
                                             "{tmp}/megatron-lm.*/pretrain_gpt.py"),
    "replica-stack.sh all bridge": _gpu("-m", "mcore_images.smoke.bridge", "--bridges", "megatron-bridge"),
    "attention-pairs.sh prepare": Expect("network", "python3", ("-m", "pip", "download", "--only-binary=:all:", "-d",
                                                                "{root}/.whl/attention-pairs/te-2.20",
                                                                "transformer-engine-cu13==2.20.*")),
    "attention-pairs.sh install": Expect("build", "python3*", ("-m", "pip", "wheel", "--no-build-isolation", "-w",
                                                               "{pairs}/wheels/te-2.20",
                                                               "{pairs}/wheels/te-2.20/transformer_engine_torch-*")),
    "attention-pairs.sh check": Expect("gpu", "python3*", ("-m", "mcore_images.smoke.attention", "--out",
                                                           "{out}/{pair}.json"),
                                       (("PYTHONPATH", "{pairs}/startup:{root}/src:{pairs}/pair-{pair}:*"),)),
}
"""The first command of each step that reaches one (a step missing here is held to what every command is)."""
LEAVES = {
    "image-env-replica.sh stash": ["{replica}/parts/{stack}-wheels.tar.part.001",
                                   "{replica}/parts/transformer_engine_torch-{te}.tar.gz"],
    "replica-stack.sh apex-source": ["{dir}/apex-csrc/COMMIT"],
    "attention-pairs.sh stash": ["{pairs}/parts/attention-pairs.tar.part.00"],
    "attention-pairs.sh table": ["{out}/attention-pairs.md"],
}
"""What a step that reaches no stand-in leaves."""


def _inside(path: str, root: Path) -> bool:
    return path == str(root) or path.startswith(f"{root}/")


def _runnable(entries: list[str], module: str) -> bool:
    """Whether ``python -m module`` finds it on these path entries (a package's __main__ or a module's file)."""
    parts = module.split(".")
    return any(Path(e, *parts, "__main__.py").is_file() or Path(e, *parts[:-1], f"{parts[-1]}.py").is_file()
               for e in entries)


def _parse_problem(module: str, args: list[str]) -> str | None:
    """Whether our program's own parser (build_parser in the module or its cli) takes ``args``."""
    build = getattr(importlib.import_module(module), "build_parser", None)
    if build is None and importlib.util.find_spec(f"{module}.cli"):
        build = getattr(importlib.import_module(f"{module}.cli"), "build_parser", None)
    if build is None:
        return f"{module} has no build_parser to check its arguments with"
    try:
        build().parse_args(args)
    except SystemExit as exc:
        return f"{module} refuses its arguments {args} (exit {exc.code})"
    return None


def command_problems(record: dict[str, Any], root: Path) -> list[str]:
    """What is wrong with a command line a step reached, whatever the step (``root``: the sandbox)."""
    problems, args, env = [], record["argv"][1:], record["env"]
    named = " ".join(record["argv"][:4])
    for path in sorted(paths_in(args)):
        if not _inside(path, root):
            problems.append(f"{named}: {path} is outside the sandbox")
        elif record["paths"].get(path) == "absent":
            problems.append(f"{named}: neither {path} nor its folder exists")
    for name, value in env.items():
        for path in sorted(paths_in([value])) if name not in SYSTEM else []:
            if not _inside(path, root):
                problems.append(f"{named}: {name} names {path}, outside the sandbox")
            elif name in INPUTS and record["paths"].get(path) != "exists":
                problems.append(f"{named}: {name} names {path}, which does not exist")
    if args[:1] == ["-m"] and args[1].startswith("mcore_images"):
        entries = [*filter(None, env.get("PYTHONPATH", "").split(os.pathsep)), record["cwd"]]
        if not _runnable(entries, args[1]):
            problems.append(f"{named}: {args[1]} is not on its PYTHONPATH {entries}")
        elif problem := _parse_problem(args[1], args[2:]):
            problems.append(f"{named}: {problem}")
    if args[:1] == ["-"]:
        try:
            compile(record["stdin"] or "", "<stdin>", "exec")
        except SyntaxError as exc:
            problems.append(f"{named}: the program on its stdin does not compile: {exc}")
    return problems


def expect_problems(expect: Expect, record: dict[str, Any], ctx: dict[str, str]) -> list[str]:
    """How the first command a step reached differs from the one its header documents."""
    problems, args, program = [], record["argv"][1:], Path(record["argv"][0]).name
    if record["kind"] != expect.kind or not fnmatch.fnmatchcase(program, expect.program):
        problems.append(f"reached the {record['kind']} command {program}, not the {expect.kind} command "
                        f"{expect.program}")
    at = 0
    for pattern in (p.format(**ctx) for p in expect.args):
        at = next((i + 1 for i in range(at, len(args)) if fnmatch.fnmatchcase(args[i], pattern)), -1)
        if at < 0:
            problems.append(f"no argument {pattern} (in that order) in {args}")
            break
    for name, pattern in expect.env:
        if not fnmatch.fnmatchcase(record["env"].get(name, ""), pattern.format(**ctx)):
            problems.append(f"{name}={record['env'].get(name)!r}, expected {pattern.format(**ctx)}")
    return problems


def writes_outside(result: Result, ctx: dict[str, str]) -> list[str]:
    """Lines of the step's output and logs saying that a write outside the sandbox failed."""
    texts = [result.text, *(p.read_text(errors="replace") for p in Path(ctx["out"]).rglob("*.log"))]
    return [line for text in texts for line in text.splitlines() if EROFS in line]


def refusal(result: Result) -> str | None:
    """The one line of a refusal, or None where the step did not refuse in one line with exit 2."""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    if result.rc == 2 and len(lines) == 1 and not result.stdout.strip() and not result.records:
        return lines[0]
    return None


def state(root: Path) -> dict[str, tuple[bool, int]]:
    """Every file and folder under ``root`` (links not followed) and its size: what a refusal leaves as it was."""
    found = {}
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(folder, name)
            found[str(path.relative_to(root))] = (path.is_dir(), path.lstat().st_size)
    found.pop("records.jsonl", None)
    return found
