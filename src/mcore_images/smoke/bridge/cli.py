"""``python -m mcore_images.smoke.bridge``: Hugging Face ↔ Megatron-Core through mbridge and/or Megatron-Bridge.

For each architecture (default: Qwen2 dense and Qwen3-MoE) and each bridge that imports, it writes a
tiny config.json and random safetensors weights locally (no hub: HF_HUB_OFFLINE=1), builds the
Megatron model through the bridge's AutoBridge, loads the weights, exports them back and requires a
bit-exact round trip, compares Megatron's logits with transformers' on the same tokens within a
stated tolerance, and runs a forward-backward through megatron-core's schedule. Prints one JSON
report on stdout (everything else goes to stderr). Exit 0 passed, 1 failed, 2 could not run.

Imports only the standard library until it runs; then torch, megatron-core, the bridges,
transformers and safetensors — never the host tooling.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mcore_images import create_only, reading
from mcore_images.errors import InputError
from mcore_images.options import OneLineParser, number
from mcore_images.smoke import certificate
from mcore_images.smoke.bridge import spec
from mcore_images.smoke.kit import errors, numerics, seeds, stdout

COULD_NOT_RUN = "smoke.bridge: could not run: "
"""How every line the bridge check refuses to run with begins."""
OUTPUT_OWNER = "bridge"
"""The command the --out folder's marker names (create_only.py): the wrapper's, `mcore-images bridge`."""


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="python -m mcore_images.smoke.bridge", prefix=COULD_NOT_RUN,
        description="Check the HF <-> Megatron-Core bridge(s) of this environment on tiny local models: exact "
        "weight round trip, logits vs transformers, forward-backward. JSON on stdout. "
        "Exit 0 passed, 1 failed, 2 could not run.",
    )
    parser.add_argument("--archs", default=",".join(spec.DEFAULT_ARCHS),
                        help=f"comma-separated architectures (model_type) from: {', '.join(spec.ARCHITECTURES)} "
                        f"(default: {','.join(spec.DEFAULT_ARCHS)})")
    parser.add_argument("--hf-config", metavar="FILE",
                        help="check this config.json (or a folder holding one) instead of the built-in tiny models")
    parser.add_argument("--bridges", default="auto",
                        help="auto (every bridge that imports), or a comma-separated subset of: "
                        f"{', '.join(spec.BRIDGES)} (a named bridge that does not import could not run)")
    parser.add_argument("--cpu", action="store_true", help="run on CPU with gloo (CI); fp32 unless --dtype")
    parser.add_argument("--dtype", choices=("bf16", "fp32"), help="compute dtype (default: bf16 on GPU, fp32 on CPU)")
    parser.add_argument("--allow-tf32", action="store_true",
                        help="with --dtype fp32 on GPUs: let GEMMs run as TF32 and judge with TF32's tolerance "
                        "(default: TF32 off, fp32's tolerance)")
    parser.add_argument("--seed", type=int, default=seeds.DEFAULT_SEED,
                        help="base seed of the random weights and tokens")
    parser.add_argument("--timeout", type=number(0, above=True, example="120"), default=120.0,
                        help="seconds before a collective gives up")
    parser.add_argument("--out", metavar="DIR", help="also write DIR/bridge.json")
    parser.add_argument("--certificate", metavar="DIR",
                        help="a smoke certificate folder: add the report as the 'bridge' section of its "
                        "certificate.json (and .md)")
    parser.add_argument("--keep", metavar="DIR", help="write the tiny checkpoints here and keep them")
    parser.add_argument("--inject-fault", choices=sorted(spec.FAULTS), help=argparse.SUPPRESS)
    parser.add_argument("--dry-run", action="store_true",
                        help="print the architectures, bridges asked for and tolerance; needs no torch")
    return parser


def select_bridges(wanted: str, found: list[str], why: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """(bridges to run, {named bridge that does not import: why})."""
    if wanted == "auto":
        if not found:
            detail = "; ".join(f"{k}: {v}" for k, v in why.items())
            raise errors.CouldNotRun(f"{spec.no_bridge_message()} ({detail})")
        return list(found), {}
    names = [n.strip() for n in wanted.split(",") if n.strip()]
    bad = [n for n in names if n not in spec.BRIDGES]
    if bad or not names:
        raise errors.CouldNotRun(f"unknown bridge(s) {bad or names}: use auto or a subset of {', '.join(spec.BRIDGES)}")
    return [n for n in names if n in found], {n: why.get(n, "does not import") for n in names if n not in found}


def _run(args: argparse.Namespace, report: dict[str, Any], tol: numerics.Tolerance) -> None:
    if args.cpu:
        # megatron-core's fused bias/activation/dropout functions go through torch.compile; on CPU its
        # first compile alone takes minutes on a small machine: run them eagerly (same math).
        os.environ.setdefault("TORCH_COMPILE_DISABLE", "1")
        report["cpu_settings"] = {"TORCH_COMPILE_DISABLE": os.environ["TORCH_COMPILE_DISABLE"]}
        try:
            from mcore_images.smoke.kit import cpu_shim
        except ImportError as exc:
            raise errors.CouldNotRun(f"torch does not import ({exc}); run inside an mcore-images runtime "
                                     "image") from exc
        cpu_shim.install()
    try:
        import megatron.core  # noqa: F401
        import torch  # noqa: F401

        from mcore_images.smoke.bridge import run as bridge_run
    except ImportError as exc:
        raise errors.CouldNotRun(f"{exc}: the bridge check needs torch, megatron-core, transformers and safetensors; "
                               "run it inside an mcore-images runtime image") from exc
    numerics.apply_to_torch(args.maths)
    report["packages"] = spec.packages()
    found, why = bridge_run.available_bridges()
    bridges, missing = select_bridges(args.bridges, found, why)
    report["bridges"] = {"run": bridges, "not_importable": why}
    configs = bridge_run.arch_configs(args.archs, args.hf_config)
    for cfg in configs:
        for name, reason in missing.items():
            record = spec.new_result(cfg["model_type"], name, bridge_run.RUNNERS[name](args.cpu, args.dtype).version,
                                     tol)
            record.update(stage="import", reason=f"{name} does not import: {reason}")
            report["architectures"].append(record)
    if not bridges:
        return
    device = bridge_run.setup(args.cpu, args.seed, args.timeout)
    try:
        with tempfile.TemporaryDirectory(prefix="mcore-images-bridge-") as tmp:
            workdir = Path(args.keep) if args.keep else Path(tmp)
            for cfg in configs:
                for name in bridges:
                    record = bridge_run.check(cfg, name, args.cpu, args.dtype, tol, device, workdir, args.seed,
                                              args.inject_fault)
                    report["architectures"].append(record)
                    print(f"smoke.bridge: {spec.summary_lines({'architectures': [record]})[0]}", file=sys.stderr)
    finally:
        bridge_run.teardown()


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    # No hub: every file the check reads is written here.
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    try:
        args.archs = spec.parse_archs(args.archs) if not args.hf_config else ()
        if args.hf_config:
            if not os.path.lexists(args.hf_config):
                raise ValueError(f"--hf-config {args.hf_config} does not exist: give a config.json or its folder")
            config = Path(args.hf_config) / "config.json" if Path(args.hf_config).is_dir() else Path(args.hf_config)
            if problem := reading.file_problem(config, "--hf-config"):
                raise ValueError(f"{problem}: give a config.json or its folder")
        if problem := seeds.seed_problem(args.seed):
            raise ValueError(problem)
        if args.keep and os.path.lexists(args.keep) and (problem := reading.folder_problem(args.keep, "--keep")):
            raise ValueError(f"{problem}: name a folder for the tiny checkpoints")
        if args.certificate:
            if problem := reading.folder_problem(args.certificate, "--certificate"):
                raise ValueError(f"{problem}: name a smoke certificate folder")
            certificate.read(Path(args.certificate) / "certificate.json")
        if args.out:  # the wrapper's rule (`mcore-images bridge --out`): a new or empty folder, or one it wrote
            create_only.claim(Path(args.out), OUTPUT_OWNER)  # judged now, claimed again when the report is written
    except (ValueError, InputError) as exc:
        print(f"{COULD_NOT_RUN}{exc}", file=sys.stderr)
        return 2
    args.dtype = args.dtype or ("fp32" if args.cpu else "bf16")
    maths = numerics.settle(args.dtype, "cpu" if args.cpu else "cuda", args.allow_tf32)
    tol = numerics.bridge(maths)
    report = spec.new_report(["python", "-m", "mcore_images.smoke.bridge", *argv], "cpu" if args.cpu else "cuda",
                             args.dtype, tol)
    report["math"] = maths.to_dict()
    args.maths = maths
    if args.dry_run:
        names = [args.hf_config] if args.hf_config else list(args.archs)
        print(f"bridge check: {', '.join(names)} through {args.bridges} bridge(s), {args.dtype} on "
              f"{'CPU' if args.cpu else 'GPU'}\ntolerance: {tol.why}")
        return 0
    start = time.perf_counter()
    try:
        with stdout.to_stderr():
            _run(args, report, tol)
    except errors.CouldNotRun as exc:
        report["error"] = str(exc)
    report["status"], report["exit_code"] = spec.overall(report["architectures"], report["error"])
    report["seconds"] = round(time.perf_counter() - start, 2)
    if report["error"]:
        print(f"{COULD_NOT_RUN}{report['error']}", file=sys.stderr)
    text = json.dumps(report, indent=2, default=str)
    if args.out:
        try:
            with create_only.filled(create_only.claim(Path(args.out), OUTPUT_OWNER)) as out:
                create_only.replace_text(out / "bridge.json", text + "\n")
        except InputError as exc:
            print(f"smoke.bridge: could not write --out: {exc}", file=sys.stderr)
            report["exit_code"] = max(report["exit_code"], 2)
    if args.certificate:
        try:
            certificate.attach(Path(args.certificate), "bridge", report)
        except (OSError, ValueError) as exc:
            print(f"smoke.bridge: could not add the report to {args.certificate}: {exc}", file=sys.stderr)
            report["exit_code"] = max(report["exit_code"], 2)
    print(text)
    return int(report["exit_code"])

