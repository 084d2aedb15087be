"""Command line of ``python -m mcore_images.smoke.wgrad_fusion``: run the cases, print the table (or JSON).
Exit 0 passed, 1 a case is wrong, 2 could not run (no provider of the module, no megatron-core, no GPU)."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from mcore_images.catalogue import wgrad_fusion
from mcore_images.options import OneLineParser
from mcore_images.smoke.kit import errors, seeds, stdout

PROG = "python -m mcore_images.smoke.wgrad_fusion"


def build_parser() -> OneLineParser:
    parser = OneLineParser(
        prog=PROG, prefix=f"{PROG}: could not run: ",
        description="megatron-core's gradient accumulation fusion (fused_weight_gradient_mlp_cuda, apex's or this "
        "project's) through megatron-core's own ColumnParallelLinear and RowParallelLinear, against the exact sum; "
        "on a GPU also timed beside torch's unfused ways. Exit 0 passed, 1 wrong, 2 could not run.")
    parser.add_argument("--cpu", action="store_true", help="run on the CPU (CI): the contract, small shapes")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON document")
    parser.add_argument("--seed", type=int, default=seeds.DEFAULT_SEED, help="seed of the inputs")
    return parser


def _prepare(cpu: bool, seed: int) -> tuple[Any, Any, Any]:
    """(torch, device, the module) with megatron-core's parallel state up on one rank, seeded from ``seed``;
    CouldNotRun otherwise."""
    provider = wgrad_fusion.provider()
    if provider is None:
        raise errors.CouldNotRun(f"{wgrad_fusion.MODULE} does not import here: megatron-core's gradient accumulation "
                                 f"fusion cannot run (install apex or {wgrad_fusion.OURS}, or turn it off)")
    if cpu and provider == wgrad_fusion.APEX:
        raise errors.CouldNotRun("apex's extension runs on CUDA tensors only: run without --cpu on a GPU")
    if cpu:
        os.environ.setdefault("TORCH_COMPILE_DISABLE", "1")
    try:
        import torch

        if cpu:
            from mcore_images.smoke.kit import cpu_shim

            cpu_shim.install()
            cpu_shim.hide_transformer_engine()
        import megatron.core  # noqa: F401  (fails early and clearly when megatron-core is missing)

        if cpu:
            cpu_shim.patch_megatron()
        import importlib

        module = importlib.import_module(wgrad_fusion.MODULE)
        from mcore_images.smoke.kit import bootstrap
    except ImportError as exc:
        raise errors.CouldNotRun(f"{exc}: run in an image with torch and megatron-core") from exc
    if not cpu and not torch.cuda.is_available():
        raise errors.CouldNotRun("torch sees no GPU: run on a GPU machine, or pass --cpu")
    bootstrap.init_process_group(cpu, timeout_s=120)
    bootstrap.init_parallel(cpu=cpu, timeout_s=120, seed=seed)
    return torch, torch.device("cpu" if cpu else "cuda"), module


def run(args: Any) -> dict[str, Any]:
    torch, device, module = _prepare(args.cpu, args.seed)
    from mcore_images.smoke.kit import bootstrap, envinfo
    from mcore_images.smoke.wgrad_fusion import check

    try:
        rows = []
        for case in check.cases(gpu=device.type == "cuda"):
            row = check.run_case(case, torch, device, args.seed)
            if device.type == "cuda":
                row.update(check.time_case(case, torch, device, module))
            rows.append(row)
            print(f"{row['case']}: error {row['max_error_over_limit']:.3g} of its limit, "
                  f"{'passed' if row['passed'] else 'FAILED'}", file=sys.stderr)
    finally:
        bootstrap.teardown()
    return {
        "provider": wgrad_fusion.provider(), "module": getattr(module, "__file__", None),
        "gemm": (getattr(module, "GEMM", "apex's cuBLAS call") if device.type == "cuda"
                 else "the module's CPU path: torch's fp32 product, added in place"), "device": str(device),
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "versions": {name: envinfo.distribution_version(name)
                     for name in ("torch", "megatron-core", "transformer-engine", wgrad_fusion.OURS, "apex")},
        "rows": rows, "passed": all(r["passed"] for r in rows),
    }


def _table(result: dict[str, Any]) -> str:
    timed = any("fused_ms" in r for r in result["rows"])
    head = "| case | error / limit | result |" + (" fused ms | torch unfused ms | torch fp32 ms |" if timed else "")
    lines = [f"provider: {result['provider']} ({result['gemm']}) on {result['gpu'] or result['device']}", "",
             head, "|" + "---|" * head.count(" |")]
    for r in result["rows"]:
        line = f"| {r['case']} | {r['max_error_over_limit']:.3g} | {'passed' if r['passed'] else 'FAILED'} |"
        if timed:
            line += f" {r['fused_ms']:.3f} | {r['torch_unfused_ms']:.3f} | {r['torch_fp32_ms']:.3f} |"
        lines.append(line)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with stdout.to_stderr():  # torch's Gloo and TE print to fd 1: the JSON report keeps it to itself
            result = run(args)
    except errors.CouldNotRun as exc:
        print(f"{PROG}: could not run: {exc}", file=sys.stderr)
        return errors.COULD_NOT_RUN
    print(json.dumps(result, indent=2) if args.json else _table(result))
    return errors.PASSED if result["passed"] else errors.FAILED
