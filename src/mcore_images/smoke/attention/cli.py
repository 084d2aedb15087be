"""Command line of ``python -m mcore_images.smoke.attention``: run the cases on every backend, print the table, write
the certificate's section. Exit 0 passed, 1 a selectable backend is wrong, 2 could not run, 130 Ctrl-C.

``--out FILE`` is claimed before anything runs (create_only.py): a new file, or one this program wrote before (its
``written_by``); anyone else's file, a folder or a path that cannot be written is one line and exit 2, nothing
touched. The section is written beside it under a name of its own and renamed into place."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from mcore_images import create_only
from mcore_images.errors import InputError
from mcore_images.options import OneLineParser, whole
from mcore_images.smoke.attention import cases as cs
from mcore_images.smoke.attention import table
from mcore_images.smoke.kit import errors, numerics, seeds

PROG = "python -m mcore_images.smoke.attention"
COULD_NOT_RUN = "smoke.attention: could not run: "
OUTPUT_OWNER = "smoke.attention"
"""What an --out file's ``written_by`` names (create_only.py): the files this program may replace."""


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=PROG, prefix=COULD_NOT_RUN,
        description="Check every attention backend TE can select here (under the NVTE variables megatron-core sets "
        "for each attention_backend), megatron-core's own attention and FlashAttention 4 called directly, forward "
        "and backward, against an fp32 reference. Exit 0 passed, 1 a backend is wrong, 2 could not run.")
    parser.add_argument("--cpu", action="store_true",
                        help="run on CPU (CI): megatron-core's attention and SDPA; TE's backends are unavailable")
    parser.add_argument("--backends", metavar="NAMES",
                        help=f"comma-separated subset of {', '.join(cs.BY_NAME)}, or {cs.AS_SET} (the NVTE "
                        "variables as this environment sets them); default: all")
    parser.add_argument("--probe", action="store_true",
                        help=f"one small case only ({cs.PROBE.id}): the doctor's seconds-long probe")
    parser.add_argument("--quick", action="store_true",
                        help="on a GPU, the four shapes of the first measurement only (sbhd and thd, MHA and GQA, "
                        "head dim 128)")
    parser.add_argument("--out", metavar="FILE", help="write the certificate's attention section (JSON) to FILE")
    parser.add_argument("--json", action="store_true", help="print the section as JSON (progress goes to stderr)")
    parser.add_argument("--seed", type=whole(0, seeds.SEEDS - 1, example=str(seeds.DEFAULT_SEED)),
                        default=seeds.DEFAULT_SEED, help="seed of the inputs")
    parser.add_argument("--dry-run", action="store_true", help="list the backends and cases, run nothing")
    parser.add_argument("--inject-fault", choices=("noncausal", "perturb"), help=argparse.SUPPRESS)
    return parser


def _environment(torch: Any, device: Any) -> dict[str, Any]:
    from mcore_images.smoke.kit import envinfo

    env: dict[str, Any] = {"device": str(device), "torch": torch.__version__}
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        env.update(gpu=torch.cuda.get_device_name(device), sm=f"{major}{minor}", cuda=torch.version.cuda)
    for name in ("transformer-engine", "flash-attn-4", "nvidia-cutlass-dsl", "quack-kernels", "megatron-core"):
        env[name] = envinfo.distribution_version(name)
    return env


def _machine_unavailable(backend: cs.Backend, cpu: bool, te: tuple[bool, str | None], sm: int | None) -> str | None:
    """Why a backend cannot run on this machine at all (one row instead of one per case); None: it may."""
    if backend.variables is not None:
        if not any(v == "1" for v in backend.variables.values()):
            return "no TE backend is allowed (megatron-core's own attention runs instead: see local)"
        if cpu:
            return "no GPU: TE's attention runs on CUDA only"
        if not te[0]:
            return te[1] or "Transformer Engine is not installed"
    if backend.name == "fa4":
        if importlib.util.find_spec("flash_attn") is None:
            return "FlashAttention 4 is not installed"
        if cpu or (sm is not None and sm < 90):
            return "FlashAttention 4's backward runs on sm90 and newer only"
    if backend.name == "local" and importlib.util.find_spec("megatron") is None:
        return "megatron-core is not installed"
    return None


def _cases(args: argparse.Namespace) -> list[cs.Case]:
    if args.probe:
        return [cs.PROBE]
    return cs.CPU_CASES if args.cpu else (cs.MEASURED_SHAPES if args.quick else cs.GPU_CASES)


def _line(res: dict[str, Any]) -> str:
    head = f"[attention] {res['backend']} × {res['case']}: {res['status'].upper()}"
    if res["status"] not in table.RAN:
        return f"{head} ({res['reason']})"
    errs = " ".join(f"{n} {t['error']:.2e}/{t['limit']:.2e}" for n, t in res["tensors"].items())
    return f"{head} ({res['selected']}) error/limit {errs}" + (f" — {res['reason']}" if res.get("reason") else "")


def run(args: argparse.Namespace, backends: list[cs.Backend], log: Any = print) -> dict[str, Any]:
    """Every case on every backend; the certificate's section."""
    started = time.time()
    numerics.settle("fp32", "cpu" if args.cpu else "cuda")  # the reference: no TF32 in its GEMMs
    try:
        import torch
    except ImportError as exc:
        return table.could_not_run(f"{exc}: run in an image with torch")
    if not args.cpu and not torch.cuda.is_available():
        return table.could_not_run("torch sees no GPU: run on a GPU machine, or pass --cpu")
    numerics.apply_to_torch(numerics.Math("fp32", "fp32", "reference"))
    from mcore_images.smoke.kit import transformer_engine as kit_te

    if args.cpu:
        from mcore_images.smoke.kit import cpu_shim

        cpu_shim.install()
        cpu_shim.hide_transformer_engine()
    te = kit_te.state(not args.cpu and any(b.variables for b in backends))
    if any(b.name == "local" for b in backends) and importlib.util.find_spec("megatron") is not None:
        import megatron.core  # noqa: F401

        from mcore_images.smoke.kit import bootstrap

        if args.cpu:
            cpu_shim.patch_megatron()
        bootstrap.init_process_group(args.cpu, 60.0)
        bootstrap.init_parallel(cpu=args.cpu, timeout_s=60.0, seed=args.seed)
    from mcore_images.smoke.attention import compute

    device = torch.device("cpu") if args.cpu else torch.device("cuda", torch.cuda.current_device())
    sm = None if args.cpu else int("".join(map(str, torch.cuda.get_device_capability(device))))
    te_log = compute.te_log() if te[0] else None
    chosen = _cases(args)
    results: list[dict[str, Any]] = []
    whole = {b.name: why for b in backends if (why := _machine_unavailable(b, args.cpu, te, sm))}
    for b in backends:
        if b.name in whole:
            results.append(table.result(b.name, "every case", "unavailable", reason=whole[b.name]))
            log(_line(results[-1]))
    for case in chosen:
        data = compute.inputs(case, device, args.seed)
        ref, bf16 = compute.reference(case, data)
        for b in (b for b in backends if b.name not in whole):
            if why := cs.applicable(b, case):
                res = table.result(b.name, case.id, "not-applicable", reason=why)
            else:
                try:
                    if b.variables is not None:
                        got, selected = compute.run_te(b, case, data, te_log, args.inject_fault)
                    elif b.name == "local":
                        got, selected = compute.run_local(case, data, args.inject_fault)
                    elif b.name == "sdpa":
                        got, selected = compute.run_sdpa(case, data, args.inject_fault)
                    else:
                        got, selected = compute.run_fa4(case, data, args.inject_fault)
                    res = table.result(b.name, case.id, "", selected=selected, errors=compute.errors(got, ref, bf16))
                except compute.Unavailable as exc:
                    res = table.result(b.name, case.id, "unavailable", reason=str(exc))
                except Exception as exc:  # a backend that is selected and raises is wrong for this case
                    res = table.result(b.name, case.id, "failed", reason=f"raised {type(exc).__name__}: "
                                       f"{str(exc).splitlines()[0][:300] if str(exc) else ''}")
            results.append(res)
            log(_line(res))
        del data, ref, bf16
        if not args.cpu:
            torch.cuda.empty_cache()
    tol = numerics.attention().to_dict()
    return table.section(results, backends=[{"name": b.name, "about": b.about, "variables": b.variables}
                                            for b in backends],
                         cases=[c.describe() for c in chosen], environment=_environment(torch, device),
                         tolerance=tol, wall_s=time.time() - started)


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:  # Ctrl-C: one line; a section half written was never renamed into place
        print("\nsmoke.attention: interrupted (Ctrl-C): stopped; --out left as it was", file=sys.stderr)
        return 130


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    try:
        backends = cs.select(args.backends, dict(os.environ))
        out = create_only.claim_file(Path(args.out), OUTPUT_OWNER) if args.out else None
    except (ValueError, InputError) as exc:
        print(f"{COULD_NOT_RUN}{exc}", file=sys.stderr)
        return errors.COULD_NOT_RUN
    if args.dry_run:
        chosen = _cases(args)
        print("\n".join([*(f"backend {b.name}: {b.about}" for b in backends), *(f"case {c.describe()}"
                                                                                for c in chosen)]))
        return errors.PASSED

    def log(line: str) -> None:
        print(line, file=sys.stderr if args.json else sys.stdout, flush=True)

    try:
        sec = run(args, backends, log)
    except errors.CouldNotRun as exc:
        sec = table.could_not_run(str(exc))
    if out is not None:
        try:
            create_only.write_file(out, OUTPUT_OWNER, sec)
        except InputError as exc:
            print(f"{COULD_NOT_RUN}{exc}", file=sys.stderr)
            return errors.COULD_NOT_RUN
    if args.json:
        print(json.dumps(sec))
    else:
        print("\n".join(table.markdown(sec)))
    return {"passed": errors.PASSED, "failed": errors.FAILED}.get(sec["status"], errors.COULD_NOT_RUN)
