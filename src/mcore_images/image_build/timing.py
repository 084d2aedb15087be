"""Build timing and the layer-reuse check, on one stack (default: debian).

Runs builds through `mcore-images build`, reads BuildKit's plain progress output, and reports
per run: wall time and which Dockerfile stages were CACHED or rebuilt. Scenarios:
  cold      after pruning the BuildKit cache (the base image from debootstrap is kept)
  warm      the same build again: everything cached
  mcore     megatron-core pin overridden (--set): only the runtime stage may rebuild
  te        Transformer Engine pin overridden: kernels and runtime rebuild, base stays cached
Layer-reuse is a check, not a timing: `--check-reuse mcore` fails unless base and kernels were
cached. Ratios are computed from the runs of one invocation, side by side.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mcore_images import create_only, docker_cli
from mcore_images.catalogue import tags
from mcore_images.command import Command, print_json
from mcore_images.errors import InputError
from mcore_images.image_build import bake
from mcore_images.image_build.bake_log import BakeLog

LAYER_STAGES = ("base", "builder", "te-build", "apex-build", "kernels-build", "tooling-build", "kernels", "runtime")
LOG_DIR = Path("build") / "build-timing"  # each scenario's full BuildKit log
COMMAND = "build-timing"


@dataclass
class Run:
    scenario: str
    command: list[str]
    wall_s: float
    returncode: int
    stages: dict[str, str] = field(default_factory=dict)  # stage -> "cached" | "built"
    steps: dict[str, str] = field(default_factory=dict)  # REUSED_STEPS fragment -> "cached" | "built"

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def stage_status(log: str) -> dict[str, str]:
    """Per Dockerfile stage: 'cached' when every step of it was CACHED, else 'built'."""
    return BakeLog.of(log).stage_status()


def run_build(scenario: str, stack: str, sets: list[str], layer: str | None = None) -> Run:
    cmd = [sys.executable, "-m", "mcore_images", "build", "--stack", stack]
    if layer:
        cmd += ["--layer", layer]
    for item in sets:
        cmd += ["--set", item]
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.monotonic() - start
    log = proc.stdout + proc.stderr
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    (LOG_DIR / f"{scenario}.log").write_text(log)
    if proc.returncode != 0:
        sys.stderr.write(log[-4000:])
    return read_run(scenario, cmd[2:], wall, proc.returncode, log)


def read_run(scenario: str, command: list[str], wall_s: float, returncode: int, log: str) -> Run:
    """A build's Run from BuildKit's plain log: per-stage cached/built, and the same for REUSED_STEPS."""
    parsed = BakeLog.of(log)
    steps = {fragment: status for fragment in REUSED_STEPS if (status := parsed.step_status(fragment))}
    return Run(scenario, command, round(wall_s, 1), returncode, parsed.stage_status(), steps)


def prune() -> None:
    docker_cli.run("builder", "prune", "-af", check=True, capture_output=True)


def image_sizes(stack: str) -> dict[str, float]:
    """Image size per layer alias in GB (1e9 bytes), as `docker image inspect` reports it."""
    sizes = {}
    for layer in ("base", "kernels", "runtime"):
        alias = tags.image(tags.target(layer, stack))
        out = docker_cli.run("image", "inspect", "--format", "{{.Size}}", alias, capture_output=True, text=True,
                             check=False)
        if out.returncode == 0 and out.stdout.strip().isdigit():
            sizes[layer] = round(int(out.stdout.strip()) / 1e9, 2)
    return sizes


REUSED_STEPS = ("install-toolchain.sh",)
"""Steps of the rebuilt runtime layer that a megatron-core bump must still take from the cache: they come
before the step that installs megatron-core, and an ARG declared above them would put the pin into their cache
key (every RUN after an ARG carries it)."""


def check_reuse(run: Run, must_be_cached: tuple[str, ...]) -> list[str]:
    problems = [f"{stage} was {run.stages.get(stage, 'not seen')}, expected cached"
                for stage in must_be_cached if run.stages.get(stage) != "cached"]
    problems += [f"the runtime step running {fragment} was {run.steps.get(fragment, 'not seen')}, expected cached"
                 for fragment in REUSED_STEPS if run.steps.get(fragment) != "cached"]
    if not run.ok:
        problems.insert(0, f"build failed (exit {run.returncode})")
    return problems




def markdown(runs: list[Run], sizes: dict[str, float]) -> str:
    cold = next((r.wall_s for r in runs if r.scenario == "cold"), None)
    lines = ["| scenario | wall s | vs cold | " + " | ".join(LAYER_STAGES) + " |",
             "|---|---|---|" + "---|" * len(LAYER_STAGES)]
    for r in runs:
        ratio = f"{100 * r.wall_s / cold:.1f} %" if cold else "—"
        cells = " | ".join(r.stages.get(s, "—") for s in LAYER_STAGES)
        lines.append(f"| {r.scenario} | {r.wall_s} | {ratio} | {cells} |")
    if sizes:
        lines += ["", "| layer | size GB |", "|---|---|"] + [f"| {k} | {v} |" for k, v in sizes.items()]
    return "\n".join(lines)


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--stack", default="debian", help="the stack to build (default: debian)")
    p.add_argument("--scenarios", default="cold,warm,mcore,te",
                   help="comma-separated, in order: cold, warm, mcore, te (default: all four)")
    p.add_argument("--mcore", help="megatron-core version for the 'mcore' scenario")
    p.add_argument("--te", help="TE version for the 'te' scenario")
    p.add_argument("--check-reuse", choices=("mcore",), help="fail unless base and kernels stay cached")
    p.add_argument("--out", help="write the runs as JSON to this file: a new one, or one this command wrote")
    p.add_argument("--prune-build-cache", action="store_true",
                   help="allow the 'cold' scenario to empty this Docker Engine's whole BuildKit cache "
                   "(`docker builder prune -af`: other projects' cache too)")


def requests(args: argparse.Namespace, scenarios: list[str]) -> dict[str, bake.BuildRequest]:
    """The build each scenario runs, as `mcore-images build` will be asked for it."""
    made = {}
    for scenario in scenarios:
        if scenario in ("mcore", "te"):
            made[scenario] = bake.BuildRequest(stack=args.stack, layer="runtime",
                                                sets=(f"{scenario}={getattr(args, scenario)}",))
        else:
            made[scenario] = bake.BuildRequest(stack=args.stack)
    return made


def _run(args: argparse.Namespace) -> int:
    scenarios = [s for s in args.scenarios.split(",") if s]
    unknown = [s for s in scenarios if s not in ("cold", "warm", "mcore", "te")]
    if unknown or not scenarios:
        raise InputError(f"unknown scenario(s) {unknown or scenarios}; use cold, warm, mcore, te")
    for scenario in ("mcore", "te"):
        if scenario in scenarios and not getattr(args, scenario):
            raise InputError(f"scenario '{scenario}' needs --{scenario} VERSION (the pin to switch to)")
    if args.check_reuse and args.check_reuse not in scenarios:
        raise InputError(f"--check-reuse {args.check_reuse} needs the '{args.check_reuse}' scenario in --scenarios")
    if "cold" in scenarios and not args.prune_build_cache:
        raise InputError("the 'cold' scenario empties this Docker Engine's whole build cache, other projects' too: "
                         "pass --prune-build-cache to allow it, or leave 'cold' out of --scenarios")
    out = create_only.claim_file(Path(args.out), COMMAND) if args.out else None
    planned = requests(args, scenarios)
    for request in planned.values():  # every build judged (stack, pins, rules, locks) before the first acts
        bake.preflight(request)
    bake.check_docker()
    runs: list[Run] = []
    for scenario in scenarios:
        if scenario == "cold":
            prune()
        request = planned[scenario]
        runs.append(run_build(scenario, args.stack, list(request.sets), layer=request.layer))
        print_json(asdict(runs[-1]), compact=True)
    print(markdown(runs, image_sizes(args.stack)))
    if out is not None:
        create_only.write_file(out, COMMAND, {"runs": [asdict(r) for r in runs]})
    if args.check_reuse:
        run = next(r for r in runs if r.scenario == args.check_reuse)
        problems = check_reuse(run, ("base", "kernels"))
        for problem in problems:
            print(f"error: layer reuse: {problem}", file=sys.stderr)
        return 1 if problems else 0
    return 0 if all(r.ok for r in runs) else 1


COMMANDS = (Command(COMMAND, "Time cold, warm and pin-bump builds of a stack and check that layers are reused.",
                    _arguments, _run,
                    description="Builds through `mcore-images build` and reads BuildKit's output: wall time and which "
                    "Dockerfile stages were cached or rebuilt per scenario (docs/build-efficiency.md)."),)
