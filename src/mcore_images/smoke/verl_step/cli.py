"""``python -m mcore_images.smoke.verl_step``: verl's own training step on this environment's GPU, offline.

It makes a tiny Qwen2 model and its tokenizer on the spot (random weights, seeded; no hub), writes a few prompts
as parquet in verl's RL format, and runs
- engine: verl's TrainingWorker and Megatron engine (verl's own classes) under attention_backend flash and fused,
  each in a process of its own: log-probs of one batch and one PPO update, judged against transformers' fp32
  log-probs of the same weights and against each other (smoke.kit.numerics.verl_logprobs). Without
  FlashAttention in the image the flash case ends in TE's "No dot product attention backend is available":
  reported as the expected refusal (spec.NO_FLASH_IN_IMAGE), not a failure;
- grpo: one GRPO step of ``python -m verl.trainer.main_ppo model_engine=megatron …`` (vLLM rollout and the
  Megatron actor on one GPU, a rule reward), verl's step metrics read from verl's file logger.
It reports which verl path ran and with what (verl's version, worker and engine classes, the bridge, the attention
backend TE selected, where verl's padding helpers came from, every flash_attn import on verl's Megatron path).
One JSON report on stdout; ``--certificate DIR`` adds it to a smoke certificate as its ``verl_step`` section.
Exit 0 passed, 1 failed, 2 could not run (no GPU: refused in one line before anything is imported).
``--cpu-check`` runs what needs no GPU: the model, tokenizer and data made, the data read back by verl's dataset
class, the trainer's config composed from verl's own and validated by verl.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mcore_images import create_only, reading
from mcore_images.errors import InputError
from mcore_images.options import OneLineParser, number, whole
from mcore_images.smoke import certificate
from mcore_images.smoke.kit import errors, numerics, seeds, stdout
from mcore_images.smoke.kit.gpus import count_gpus
from mcore_images.smoke.verl_step import flash_imports, spec

PROG = "python -m mcore_images.smoke.verl_step"
NEEDS = {
    "common": ("torch", "transformers", "tokenizers", "pandas", "pyarrow", "hydra", "omegaconf", "verl"),
    "engine": ("megatron.core", "transformer_engine"),
    "grpo": ("megatron.core", "transformer_engine", "ray", "vllm"),
}
"""The modules each part imports (checked by name, nothing imported, before any work)."""
NO_GPU = (f"no GPU visible: the verl step runs verl's Megatron engine and vLLM on a GPU (1 needed); run it on a GPU "
          f"host, or `{PROG} --cpu-check` for the parts that need none")


COULD_NOT_RUN = "smoke.verl_step: could not run: "
OUTPUT_OWNER = "verl-step"
"""The command an --out folder's marker names (create_only.py): a folder this program wrote, which it may write
again."""
REPORT = "verl_step.json"


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=PROG, prefix=COULD_NOT_RUN,
        description="verl's Megatron engine (log-probs and an update under attention_backend flash and fused) and "
        "one GRPO step of verl's trainer (vLLM + Megatron, one GPU) on a tiny model made here, offline. JSON on "
        "stdout. Exit 0 passed, 1 failed, 2 could not run.")
    parser.add_argument("--parts", default=",".join(spec.PARTS),
                        help=f"comma-separated subset of {', '.join(spec.PARTS)} (default: both)")
    parser.add_argument("--bridge", default="auto", choices=("auto", *spec.BRIDGES),
                        help="how verl's engine builds the model: auto takes Megatron-Bridge where it imports "
                        "(verl 0.9's default), else mbridge")
    parser.add_argument("--grpo-attention-backend", default="fused", choices=spec.BACKENDS,
                        help="megatron-core attention_backend of the GRPO step's actor (default fused: this image "
                        "ships no FlashAttention)")
    parser.add_argument("--seed", type=whole(0, seeds.SEEDS - 1, example=str(seeds.DEFAULT_SEED)),
                        default=seeds.DEFAULT_SEED, help="seed of the weights, data and batch")
    parser.add_argument("--timeout", type=number(0, above=True, example="1200"), default=1200.0,
                        help="seconds each engine case and the GRPO step may take before they are stopped")
    parser.add_argument("--out", metavar="DIR", help=f"also write DIR/{REPORT}: a new or empty folder, or one this "
                        "program wrote before")
    parser.add_argument("--certificate", metavar="DIR",
                        help="a smoke certificate folder: add the report as the 'verl_step' section of its "
                        "certificate.json (and .md); a run that could not run adds nothing")
    parser.add_argument("--keep", metavar="DIR", help="work in DIR (created; must not exist) and keep the model, "
                        "data, batch, records and the trainer's log")
    parser.add_argument("--cpu-check", action="store_true",
                        help="only what needs no GPU: model, tokenizer and data made, data read back by verl's "
                        "dataset class, the trainer config composed and validated by verl")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the parts, the trainer's overrides and the tolerance; needs no torch")
    return parser


def parse_parts(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    bad = [n for n in names if n not in spec.PARTS]
    if bad or not names:
        raise ValueError(f"--parts {text!r}: use a comma-separated subset of {', '.join(spec.PARTS)}")
    return names


def missing_modules(parts: tuple[str, ...]) -> list[str]:
    wanted = dict.fromkeys(m for part in ("common", *parts) for m in NEEDS.get(part, ()))
    return [m for m in wanted if importlib.util.find_spec(m.split(".")[0]) is None
            or (("." in m) and importlib.util.find_spec(m) is None)]


def choose_bridge(wanted: str, installed_only: bool = True) -> str:
    """The bridge verl's engine uses: the one asked for, or the first of spec.BRIDGES that is installed. A bridge
    named for the CPU check (``installed_only`` False) needs no install: only the config names it there."""
    found = [b for b in spec.BRIDGES if importlib.util.find_spec(spec.BRIDGE_MODULES[b].split(".")[0]) is not None
             and importlib.util.find_spec(spec.BRIDGE_MODULES[b]) is not None]
    if wanted == "auto":
        if not found:
            raise errors.CouldNotRun("neither Megatron-Bridge (megatron.bridge) nor mbridge is installed: verl's "
                                     "Megatron engine builds its models through one of them")
        return found[0]
    if wanted not in found and installed_only:
        raise errors.CouldNotRun(f"--bridge {wanted}: {spec.BRIDGE_MODULES[wanted]} is not installed here")
    return wanted


def verl_facts() -> dict[str, Any]:
    """verl's version and every flash_attn import on its Megatron path (read from its installed source)."""
    spec_ = importlib.util.find_spec("verl")
    package = Path(spec_.origin).parent if spec_ and spec_.origin else None
    found = flash_imports.scan(package) if package else []
    return {"version": importlib.metadata.version("verl"), "package": str(package),
            "flash_attn_imports": [f.to_dict() | {"how": f.how + ("" if f.where == "module level" or f.used_at
                                                                   else ", in a function nothing in verl calls")}
                                   for f in found],
            "needs_flash_attn_2": [f"{f.file}:{f.line} ({f.where})" for f in found
                                   if f.how == "unguarded" and f.used_at]}


def example_paths(workdir: Path) -> spec.Paths:
    """Where the program writes what verl reads, under ``workdir``."""
    return spec.Paths(model=workdir / "model", train=workdir / "data" / "train.parquet",
                      val=workdir / "data" / "test.parquet", reward=Path(__file__).with_name("reward.py").resolve(),
                      workdir=workdir)


def prepare(workdir: Path, seed: int) -> dict[str, Any]:
    """Model, tokenizer and data made; the train split read back through verl's dataset class."""
    from mcore_images.smoke.verl_step import assets

    paths = example_paths(workdir)
    assets.make_checkpoint(paths.model, seed)
    written = assets.write_data(paths.train.parent, seed)
    return {"model": str(paths.model), "data": {k: str(v) for k, v in written.items()},
            "read_back": assets.read_back(paths.train, paths.model)}


def cpu_check(workdir: Path, seed: int, bridge: str, backend: str) -> dict[str, Any]:
    """What runs on a CPU: prepare(), then the GRPO step's config composed from verl's and validated by verl."""
    from mcore_images.smoke.verl_step import config

    record = prepare(workdir, seed)
    composed = config.compose(spec.grpo_overrides(example_paths(workdir), bridge, backend))
    config.validate(composed)
    record["config"] = config.summary(composed)
    return record


def _work(args: argparse.Namespace, report: dict[str, Any], tol: numerics.Tolerance, workdir: Path) -> None:
    missing = missing_modules(() if args.cpu_check else args.parts)
    if missing:
        raise errors.CouldNotRun(f"{', '.join(missing)} not installed: the verl step runs in an mcore-images app "
                                 "image (verl with megatron-core, TE and vLLM)")
    if problem := spec.verl_problem(importlib.metadata.version("verl")):
        raise errors.CouldNotRun(problem)
    bridge = choose_bridge(args.bridge, installed_only=not args.cpu_check)
    report["verl"] = verl_facts() | {"bridge": bridge}
    if args.cpu_check:
        report["cpu_check"] = cpu_check(workdir, args.seed, bridge, args.grpo_attention_backend)
        return
    report["prepared"] = prepare(workdir, args.seed)
    paths = example_paths(workdir)
    if "engine" in args.parts:
        from mcore_images.smoke.verl_step import engine

        report["engine"] = engine.run(paths.model, bridge, workdir, args.seed, tol, args.timeout)
        fused = report["engine"]["cases"].get("fused") or {}
        report["verl"].update({k: fused.get(k) for k in ("worker", "engine", "bridge_class", "vanilla_mbridge",
                                                         "padding", "versions")})
        report["verl"]["te_backend"] = {name: case.get("te_backend") for name, case in
                                        report["engine"]["cases"].items()}
    if "grpo" in args.parts:
        from mcore_images.smoke.verl_step import grpo

        report["grpo"] = grpo.run(paths, bridge, args.grpo_attention_backend, args.timeout)


def _summary(report: dict[str, Any]) -> list[str]:
    lines = []
    for name, case in ((report.get("engine") or {}).get("cases") or {}).items():
        lines.append(f"engine {name}: {case['status']}" + (f" — {case['reason']}" if case.get("reason") else "")
                     + (f" (TE: {case['te_backend']})" if case.get("te_backend") else ""))
    grpo = report.get("grpo") or {}
    if grpo:
        shown = ", ".join(f"{k}={v:.4g}" for k, v in (grpo.get("metrics") or {}).items()
                          if isinstance(v, int | float) and k in spec.GRPO_METRICS)
        lines.append(f"GRPO step: {grpo.get('status')}" + (f" — {grpo['reason']}" if grpo.get("reason") else "")
                     + (f"; {shown}" if shown else ""))
    return lines


def judged_first(args: argparse.Namespace) -> create_only.Output | None:
    """Every argument that can be judged before anything runs (ValueError or InputError, one line): the parts,
    --keep a folder that does not exist yet, --certificate a smoke certificate this program may add to (read and
    held to its shape), --out a folder it may write (claimed: create_only.py). Returns the claimed --out."""
    args.parts = parse_parts(args.parts)
    if args.keep and os.path.lexists(args.keep):
        raise ValueError(f"--keep {args.keep} exists: name a folder that does not (it is created and kept)")
    if args.certificate:
        if args.cpu_check:
            raise ValueError("--cpu-check runs none of the GPU parts a certificate records: drop --certificate")
        if problem := reading.folder_problem(args.certificate, "--certificate"):
            raise ValueError(f"{problem}: name a smoke certificate folder")
        if reading.file_problem(Path(args.certificate) / "certificate.json"):
            raise ValueError(f"--certificate {args.certificate} holds no certificate.json: name a smoke "
                             "certificate folder")
        certificate.read(Path(args.certificate) / "certificate.json")
    return create_only.claim(Path(args.out), OUTPUT_OWNER) if args.out else None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    try:
        out = judged_first(args)
    except (ValueError, InputError) as exc:
        print(f"{COULD_NOT_RUN}{exc}", file=sys.stderr)
        return errors.COULD_NOT_RUN
    tol = numerics.verl_logprobs(numerics.settle("bf16", "cuda"))
    if args.dry_run:
        overrides = spec.grpo_overrides(example_paths(Path("WORKDIR")), "mbridge", args.grpo_attention_backend)
        print(f"verl step: parts {', '.join(args.parts)}; engine under attention_backend "
              f"{' and '.join(spec.BACKENDS)}; GRPO: {' '.join(spec.grpo_command('python', overrides))}\n"
              f"tolerance: {tol.why}")
        return errors.PASSED
    if not args.cpu_check and count_gpus() == 0:
        print(f"{COULD_NOT_RUN}{NO_GPU}", file=sys.stderr)
        return errors.COULD_NOT_RUN
    # No hub: every file verl, transformers and vLLM read is written here.
    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    report = spec.new_report([*PROG.split(), *argv], () if args.cpu_check else args.parts, tol)
    start = time.perf_counter()
    try:
        with stdout.to_stderr(), tempfile.TemporaryDirectory(prefix="mcore-images-verl-step-") as tmp:
            workdir = Path(args.keep) if args.keep else Path(tmp)
            try:
                workdir.mkdir(parents=True, exist_ok=not args.keep)
            except OSError as exc:
                raise errors.CouldNotRun(f"--keep {args.keep} cannot be created ({exc.strerror or exc}): name a new "
                                         "folder where you can write") from None
            _work(args, report, tol, workdir)
    except errors.CouldNotRun as exc:
        report["error"] = str(exc)
    parts = {p: report[p] for p in spec.PARTS if isinstance(report.get(p), dict)}
    report["status"], report["exit_code"] = spec.overall(parts, report["error"])
    report["seconds"] = round(time.perf_counter() - start, 2)
    for line in _summary(report):
        print(f"smoke.verl_step: {line}", file=sys.stderr)
    if report["error"]:
        print(f"{COULD_NOT_RUN}{report['error']}", file=sys.stderr)
    text = json.dumps(report, indent=2, default=str)
    if out is not None:
        try:
            with create_only.filled(create_only.claim(out.path, OUTPUT_OWNER)) as folder:
                create_only.replace_text(folder / REPORT, text + "\n")
        except (OSError, InputError) as exc:
            print(f"smoke.verl_step: could not write --out: {exc}", file=sys.stderr)
            report["exit_code"] = max(report["exit_code"], errors.COULD_NOT_RUN)
    if args.certificate and report["status"] == "could-not-run":
        print(f"smoke.verl_step: {args.certificate} left as it was: this run tested nothing to add to it",
              file=sys.stderr)
    elif args.certificate:
        try:
            certificate.attach(Path(args.certificate), "verl_step", report)
        except (OSError, ValueError) as exc:
            print(f"smoke.verl_step: could not add the report to {args.certificate}: {exc}", file=sys.stderr)
            report["exit_code"] = max(report["exit_code"], errors.COULD_NOT_RUN)
    print(text)
    return int(report["exit_code"])
