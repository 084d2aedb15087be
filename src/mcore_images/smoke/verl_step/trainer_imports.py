"""What verl's trainer imports for the configuration the images certify, read from verl's own source, and whether
this environment (or a folder of a lock's wheels) has each of those packages.

verl imports much of what a run needs inside functions (verl 0.9's v1 trainer imports ``transfer_queue`` in
``TaskRunnerV1.run``), so ``import verl`` and verl's CPU tests pass in an image that stops at a GRPO run's first step.
This reads the closure instead: from the modules the certified configuration runs (``main_ppo`` with
``model_engine=megatron``, the v1 trainer where verl has one, the image's rollout engine), every verl module they
import, at module level or in a function, transitively; and every other package those modules import where no
``except ImportError`` catches it (verl's optional backends import inside such handlers). What the configuration does
not select is named below with the setting that would select it, so a reader sees what is left out and why; nothing
else is.

``python -m mcore_images.smoke.verl_step.trainer_imports`` checks the installed verl; ``--wheels DIR`` checks a folder
of a lock's wheels (verl's source from its wheel, the other packages from the top-level names in each wheel's
RECORD), for a stack no image of which can be built here. Exit 0 every package is there, 1 one is missing, 2 could
not run.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mcore_images import reading
from mcore_images.options import OneLineParser
from mcore_images.smoke.kit import errors

PROG = "python -m mcore_images.smoke.verl_step.trainer_imports"

ENTRIES = {
    "v1": ("verl.trainer.main_ppo", "verl.trainer.ppo.v1.trainer_sync", "verl.trainer.ppo.v1.agent_loop_tq",
           "verl.workers.engine_workers", "verl.workers.engine.megatron"),
    "v0": ("verl.trainer.main_ppo", "verl.trainer.ppo.ray_trainer", "verl.workers.engine_workers",
           "verl.workers.engine.megatron"),
}
"""The modules the certified configuration runs: ``main_ppo`` (its Ray task runner), the trainer (verl 0.9's v1
trainer in sync mode and its TransferQueue agent loop, where verl has them; else the Ray PPO trainer), the
engine workers and the Megatron engine. The rollout engine's module is added by ``entries``."""

ROLLOUTS = {"vllm": "verl.workers.rollout.vllm_rollout", "sglang": "verl.workers.rollout.sglang_rollout"}
"""The rollout module of each engine an image may carry (``actor_rollout_ref.rollout.name``); the other engines'
modules are not selected (verl's rollout registry imports each inside the branch of its name)."""

NOT_SELECTED = {
    "verl.workers.engine.fsdp": "model_engine=fsdp",
    "verl.workers.engine.mindspeed": "model_engine=mindspeed (Ascend)",
    "verl.workers.engine.torchtitan": "model_engine=torchtitan",
    "verl.workers.engine.veomni": "model_engine=veomni",
    "verl.workers.engine.automodel": "model_engine=automodel",
    "verl.workers.rollout.trtllm_rollout": "actor_rollout_ref.rollout.name=trtllm",
    "verl.experimental.fully_async_policy": "the fully asynchronous trainer",
    "verl.experimental.one_step_off_policy": "the one-step-off-policy trainer",
    "verl.experimental.separation": "the separated trainer (trainer.v1.trainer_mode)",
    "verl.utils.qat": "quantization-aware training",
    "verl.utils.modelopt": "ModelOpt quantization",
    "verl.utils.vllm.npu_vllm_patch": "trainer.device=npu (Ascend)",
    "verl.utils.reward_score": "verl's built-in rewards, chosen by each row's data_source (the certified run gives "
                               "reward.custom_reward_function)",
}
"""verl modules (and their submodules) the certified configuration does not run, with the setting that runs them."""

OPTIONAL = {
    ("verl.utils.tracking", "clearml"): "trainer.logger=clearml",
    ("verl.utils.tracking", "mlflow"): "trainer.logger=mlflow",
    ("verl.utils.tracking", "swanlab"): "trainer.logger=swanlab",
    ("verl.utils.tracking", "trackio"): "trainer.logger=trackio",
    ("verl.utils.tracking", "volcengine_ml_platform"): "trainer.logger=vemlp_wandb",
    ("verl.utils.tracking", "rl_insight"): "trainer.logger=rl_insight",
    ("verl.utils.rollout_trace", "weave"): "actor_rollout_ref.rollout.trace.backend=weave",
    ("verl.utils.rollout_trace", "mlflow"): "actor_rollout_ref.rollout.trace.backend=mlflow",
    ("verl.utils.rollout_trace", "trackio"): "actor_rollout_ref.rollout.trace.backend=trackio",
    ("verl", "modelscope"): "VERL_USE_MODELSCOPE=True",
    ("verl", "torch_npu"): "trainer.device=npu (Ascend)",
    ("verl", "vllm_ascend"): "trainer.device=npu (Ascend)",
    ("verl.utils.dataset", "qwen_vl_utils"): "multimodal data (images or videos in the prompts)",
    ("verl.experimental.agent_loop.tool_agent_loop", "PIL"): "the tool agent loop with image tools",
    ("verl", "flash_attn"): "FlashAttention 2: flash_imports.py reports each import and whether verl's Megatron "
                            "path uses it",
}
"""(verl module prefix, package) pairs imported only under a setting the certified configuration leaves off."""


@dataclass
class Closure:
    """The verl modules the configuration runs and the packages they import (package -> the first
    ``module:line`` importing it); ``skipped`` names the packages left out and why."""

    modules: list[str] = field(default_factory=list)
    imports: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)


def entries(verl_root: Path, rollout: str) -> tuple[str, ...]:
    """The entry modules for the verl at ``verl_root`` (the folder holding the ``verl`` package)."""
    line = "v1" if _module_file(verl_root, "verl.trainer.ppo.v1") else "v0"
    return (*ENTRIES[line], ROLLOUTS[rollout])


def _module_file(root: Path, name: str) -> Path | None:
    path = root.joinpath(*name.split("."))
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    return path.with_suffix(".py") if path.with_suffix(".py").is_file() else None


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _guarded(parents: list[ast.AST]) -> bool:
    """An import under ``try`` whose handlers catch ImportError (or broader): its failure is expected."""
    caught = ("ImportError", "ModuleNotFoundError", "Exception", "BaseException")
    return any(isinstance(node, ast.Try) and any(h.type is None or any(c in ast.unparse(h.type) for c in caught)
                                                  for h in node.handlers) for node in parents)


def _imports(root: Path, module: str) -> list[tuple[str, bool, int]]:
    """(imported module, guarded, line) of every import statement in ``module``, outside ``if TYPE_CHECKING``."""
    path = _module_file(root, module)
    assert path is not None, module
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[str, bool, int]] = []

    def visit(node: ast.AST, parents: list[ast.AST]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.Import):
                found.extend((alias.name, _guarded(parents), child.lineno) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join([*parts, base] if base else parts)
                guarded = _guarded(parents)
                found.append((base, guarded, child.lineno))
                found.extend((f"{base}.{alias.name}", guarded, child.lineno) for alias in child.names)
            visit(child, [*parents, child])

    visit(ast.parse(path.read_text(encoding="utf-8"), str(path)), [])
    return found


def closure(verl_root: Path, rollout: str) -> Closure:
    """The certified configuration's import closure in the verl source at ``verl_root``."""
    result, seen = Closure(), set()
    not_selected = {**NOT_SELECTED, **{module: f"actor_rollout_ref.rollout.name={name}"
                                       for name, module in ROLLOUTS.items() if name != rollout}}
    todo = list(entries(verl_root, rollout))
    for entry in todo:
        if _module_file(verl_root, entry) is None:
            raise errors.CouldNotRun(f"verl at {verl_root} has no module {entry}: this verl's trainer is not the one "
                                     "the images certify (ENTRIES in trainer_imports.py)")
    while todo:
        module = todo.pop()
        if module in seen or any(_under(module, prefix) for prefix in not_selected):
            continue
        seen.add(module)
        for name, guarded, line in _imports(verl_root, module):
            top = name.split(".")[0]
            if top == "verl":
                if not guarded and _module_file(verl_root, name):
                    todo.append(name)
                continue
            if guarded or top in sys.stdlib_module_names or top == "__future__":
                continue
            why = next((w for (prefix, package), w in OPTIONAL.items() if package == top and _under(module, prefix)),
                       None)
            if why:
                result.skipped.setdefault(top, why)
            else:
                result.imports.setdefault(top, f"{module}:{line}")
    result.modules = sorted(seen)
    for package in result.imports:
        result.skipped.pop(package, None)
    return result


def installed_verl() -> Path:
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        raise errors.CouldNotRun("verl is not installed here: run in an app image, or give --wheels DIR")
    return Path(next(iter(spec.submodule_search_locations))).parent


def wheel_modules(folder: Path) -> tuple[set[str], Path | None]:
    """The top-level modules the wheels in ``folder`` install (from each RECORD), and verl's wheel."""
    names: set[str] = set()
    verl = None
    for wheel in sorted(folder.glob("*.whl")):
        if wheel.name.startswith("verl-"):
            verl = wheel
        with zipfile.ZipFile(wheel) as archive:
            for member in archive.namelist():
                top = member.split("/")[0]
                if top.endswith((".dist-info", ".data")):
                    continue
                names.add(top.split(".")[0] if "/" not in member else top)
    return names, verl


def missing(result: Closure, importable: Callable[[str], bool]) -> dict[str, str]:
    """The packages of the closure that ``importable`` says are absent, with where verl imports each."""
    return {package: where for package, where in sorted(result.imports.items()) if not importable(package)}


def build_parser() -> OneLineParser:
    parser = OneLineParser(prog=PROG, prefix=f"{PROG}: could not run: ",
                           description="Whether every package verl's trainer imports for the certified configuration "
                           "(main_ppo, model_engine=megatron, the v1 trainer) is installed. Exit 0 yes, 1 no, 2 could "
                           "not run.")
    parser.add_argument("--wheels", metavar="DIR", help="check a folder of a lock's wheels instead of this environment")
    parser.add_argument("--rollout", choices=sorted(ROLLOUTS),
                        help="the rollout engine (default: vllm where installed, else sglang)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    return parser


def _installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def _check(args: object, scratch: Path) -> tuple[str, str, Closure, dict[str, str]]:
    """(where verl's source is, the rollout engine, the closure, the missing packages)."""
    wheels = getattr(args, "wheels", None)
    if wheels:
        folder = Path(wheels)
        if not folder.is_dir():
            raise errors.CouldNotRun(f"--wheels {folder}: not a folder of wheels")
        have, verl_wheel = wheel_modules(folder)
        if verl_wheel is None:
            raise errors.CouldNotRun(f"no verl wheel in {folder}")
        with zipfile.ZipFile(verl_wheel) as archive:
            archive.extractall(scratch, [m for m in archive.namelist() if m.startswith("verl/")])
        root, importable, source = scratch, have.__contains__, verl_wheel.name
    else:
        root, importable = installed_verl(), _installed
        source = str(root)
    rollout = getattr(args, "rollout", None) or ("vllm" if importable("vllm") else "sglang")
    result = closure(root, rollout)
    return source, rollout, result, missing(result, importable)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.wheels and (problem := reading.folder_problem(args.wheels, "--wheels")):
        parser.error(f"{problem}: give the folder of a lock's wheels")
    try:
        with tempfile.TemporaryDirectory(prefix="verl-source-") as scratch:
            source, rollout, result, absent = _check(args, Path(scratch))
    except errors.CouldNotRun as exc:
        print(f"{PROG}: could not run: {exc}", file=sys.stderr)
        return errors.COULD_NOT_RUN
    report = {"verl": source, "rollout": rollout, "modules": len(result.modules), "packages": result.imports,
              "left_out": result.skipped, "missing": absent, "passed": not absent}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        left_out = ", ".join(sorted(result.skipped)) or "none"
        print(f"verl's trainer ({rollout} rollout): {len(result.modules)} verl modules import "
              f"{len(result.imports)} packages; left out as not selected: {left_out}")
        for package, where in absent.items():
            print(f"missing: {package} (imported at {where})")
        print("every package is installed" if not absent else f"{len(absent)} package(s) missing")
    return errors.PASSED if not absent else errors.FAILED


if __name__ == "__main__":
    raise SystemExit(main())
