"""`mcore-images doctor`: the command: its options, which checks run where, and the report."""


from __future__ import annotations

import argparse
import os
import platform
import sys
from collections.abc import Sequence
from pathlib import Path

from mcore_images import reading
from mcore_images.catalogue import flash_attention
from mcore_images.command import Command, configure, dispatch
from mcore_images.doctor import (
    checks_apex,
    checks_bridge,
    checks_build,
    checks_cluster,
    checks_env,
    checks_megatron,
    checks_nccl,
    checks_stack,
    checks_te,
)
from mcore_images.doctor.isolate import DEFAULT_TIMEOUT_S, run_isolated
from mcore_images.doctor.model import (
    REGISTRY,
    Check,
    Context,
    Finding,
    exit_code,
    run_checks,
    stdout_to_stderr,
    to_json,
    to_table,
)
from mcore_images.options import OneLineParser, number

CHECK_MODULES = (checks_stack, checks_megatron, checks_bridge, checks_te, checks_apex, checks_nccl, checks_env,
                 checks_cluster, checks_build)
"""The check modules, in report order: each registers its checks in REGISTRY when imported."""


def load_checks() -> dict[str, Check]:
    """Every registered check in report order: by CHECK_MODULES, then as each module declares them (the modules
    are imported above, stdlib-only at module level, and register their checks in REGISTRY)."""
    order = {module.__name__: i for i, module in enumerate(CHECK_MODULES)}
    return dict(sorted(REGISTRY.items(), key=lambda item: order.get(item[1].func.__module__, len(order))))


def select(checks: dict[str, Check], only: Sequence[str] | None) -> list[Check]:
    """`--only te` picks every te.* check; an id that matches nothing is a usage error."""
    if not only:
        return list(checks.values())
    chosen: list[Check] = []
    for wanted in only:
        hits = [c for cid, c in checks.items() if cid == wanted or cid.startswith(wanted + ".")]
        if not hits:
            raise SystemExit(f"doctor: unknown check '{wanted}'; `mcore-images doctor --list` shows the ids")
        chosen += [c for c in hits if c not in chosen]
    return chosen


def hf_config(text: str) -> Path:
    """``--hf-config`` as argparse reads it: a HF config.json, or a folder holding one, a regular file either way
    (a FIFO or a device is refused here, before any check starts)."""
    path = Path(text)
    named = path / "config.json" if path.is_dir() else path
    if problem := reading.file_problem(named):
        raise argparse.ArgumentTypeError(f"{problem}: give a HF config.json or the folder holding one")
    return path


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--only",
        action="append",
        metavar="ID",
        help="run only this check, or every check under a prefix (repeatable): --only te",
    )
    parser.add_argument(
        "--hf-config",
        type=hf_config,
        metavar="PATH",
        help="HF config.json (or its folder): can mbridge / Megatron-Bridge convert it?",
    )
    parser.add_argument(
        "--attention-backend",
        choices=sorted(flash_attention.MEGATRON_SETS),
        help="the attention_backend megatron-core will be given (verl's engine config defaults to flash, Megatron-LM's "
        "--attention-backend to auto): te.attention judges the backends it leaves TE (default: the NVTE_* variables)",
    )
    parser.add_argument("--list", action="store_true", help="list the checks and exit")
    parser.add_argument(
        "--timeout",
        type=number(0, above=True, example=f"{DEFAULT_TIMEOUT_S:g}"),
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"stop a worker check that runs longer, report it as crashed, go on (default {DEFAULT_TIMEOUT_S:g})",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--in-process",
        action="store_true",
        help="run every check in this interpreter: fastest, but a crash or hang in an import ends or stalls the doctor",
    )
    where.add_argument(
        "--isolate",
        action="store_true",
        help="run every check, the cheap ones too, in a fresh interpreter of its own (slowest; nothing shared)",
    )


def run_all(checks: list[Check], ctx: Context, args: argparse.Namespace) -> list[Finding]:
    """The findings in `checks` order: cheap checks here, the others in worker interpreters."""
    if getattr(args, "in_process", False):
        return run_checks(ctx, checks)
    fresh = getattr(args, "isolate", False)
    here = [] if fresh else [c for c in checks if not c.isolated]
    found = {f.id: f for f in run_checks(ctx, here)}
    away = [c for c in checks if c.id not in found]
    found.update(run_isolated(away, ctx.hf_config, getattr(args, "timeout", DEFAULT_TIMEOUT_S), fresh))
    return [found[c.id] for c in checks]


def mode(args: argparse.Namespace) -> str:
    if getattr(args, "in_process", False):
        return "in-process"
    return "isolate" if getattr(args, "isolate", False) else "worker"


def run(args: argparse.Namespace) -> int:
    """Run the checks; exit 0 when none failed, 1 when one failed or crashed, 2 when the doctor cannot run."""
    try:
        checks = select(load_checks(), getattr(args, "only", None))
    except SystemExit as error:
        print(error, file=sys.stderr)
        return 2
    except Exception as error:  # the doctor itself is broken: say so in one line
        print(f"doctor: cannot load checks: {type(error).__name__}: {error}", file=sys.stderr)
        return 2
    if getattr(args, "list", False):
        for item in checks:
            print(f"{item.id:28} {item.severity.value:5} {'worker' if item.isolated else 'here':6} {item.summary}")
        return 0
    timeout = getattr(args, "timeout", DEFAULT_TIMEOUT_S)
    hf_config = getattr(args, "hf_config", None)  # judged as it was parsed (hf_config)
    if backend := getattr(args, "attention_backend", None):  # the workers read it from the environment they inherit
        os.environ[flash_attention.ASKED] = backend
    ctx = Context(hf_config=hf_config)
    as_json = getattr(args, "json", False)
    restore = stdout_to_stderr() if as_json else None
    try:
        findings = run_all(checks, ctx, args)
    finally:
        if restore:
            restore()
    if as_json:
        meta = {
            "python": platform.python_version(),
            "executable": sys.executable,
            "host": platform.node(),
            "hf_config": ctx.hf_config,
            "pythonpath": os.environ.get("PYTHONPATH", ""),
            "mode": mode(args),
            "timeout_s": timeout,
        }
        print(to_json(findings, meta))
    else:
        print(to_table(findings))
    return exit_code(findings)


COMMANDS = (Command("doctor", "Diagnose this environment (an image or your own) and name the fix for each problem.",
                    _arguments, run, prints_data=True,
                    description="Check this environment the way Megatron-Core training will use it: Python, torch, "
                    "megatron-core and its bridges, Transformer Engine and its attention backends, gradient "
                    "accumulation fusion, NCCL, the cluster settings and the build toolchain. Each problem is a row "
                    "with its fix. Exit 0: nothing failed; 1: a check failed; 2: the doctor could not run."),)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m mcore_images.doctor`: the doctor on its own, without the rest of the command line, under the
    parser of every command (one line for a bad or empty value)."""
    command = COMMANDS[0]
    parser = OneLineParser(prog=f"mcore-images {command.name}", description=command.description or command.help)
    configure(parser, command)
    return dispatch(lambda _: parser, list(sys.argv[1:] if argv is None else argv))
