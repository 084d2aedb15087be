"""The smoke certificate: a JSON document and the Markdown table rendered from it.

Pure Python. The ranks fill ``environment``/``settings``/``runs``; the launcher adds the outcome and
wall time; ``mcore-images certify`` adds the image reference and digest. One schema, one renderer.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from mcore_images import create_only, reading, schemas
from mcore_images.catalogue import components, gpu_archs
from mcore_images.errors import InputError
from mcore_images.smoke.attention import table as attention_table

SCHEMA = schemas.CERTIFICATE
STATUSES = ("passed", "failed", "could-not-run", "running")
RUN_STATUSES = ("passed", "failed", "skipped", "not-run")

TOP_KEYS = {
    "schema": str,
    "status": str,
    "exit_code": int,
    "error": (str, type(None)),
    "image": dict,
    "created": str,
    "command": list,
    "environment": dict,
    "settings": dict,
    "tolerance": dict,
    "runs": list,
    "timing": dict,
}
RUN_KEYS = {
    "id": str,
    "layout": str,
    "model": str,
    "spec": str,
    "status": str,
    "reason": (str, type(None)),
    "checks": list,
    "losses": list,
    "grad_norms": list,
    "parity": (dict, type(None)),
    "timing": dict,
}


def new(command: list[str], created: str) -> dict[str, Any]:
    """An empty certificate in the ``running`` state."""
    return {
        "schema": SCHEMA,
        "status": "running",
        "exit_code": -1,
        "error": None,
        "image": {"ref": None, "digest": None, "digest_source": None},
        "created": created,
        "command": list(command),
        "environment": {},
        "settings": {},
        "tolerance": {},
        "runs": [],
        "timing": {},
    }


def validate(cert: dict[str, Any]) -> list[str]:
    """Problems with a certificate's shape (empty list when it is well-formed)."""
    problems = [f"missing or mistyped key {k!r}" for k, t in TOP_KEYS.items() if not isinstance(cert.get(k), t)]
    if problems:
        return problems
    if cert["schema"] != SCHEMA:
        problems.append(f"schema {cert['schema']!r} is not {SCHEMA!r}")
    if cert["status"] not in STATUSES:
        problems.append(f"status {cert['status']!r} not one of {STATUSES}")
    for i, run in enumerate(cert["runs"]):
        problems += [f"runs[{i}]: missing or mistyped {k!r}" for k, t in RUN_KEYS.items()
                     if not isinstance(run.get(k), t)]
        if run.get("status") not in RUN_STATUSES:
            problems.append(f"runs[{i}]: status {run.get('status')!r} not one of {RUN_STATUSES}")
    if "checkpoint" in cert:
        section = cert["checkpoint"]
        if not isinstance(section, dict) or not isinstance(section.get("pairs"), list):
            problems.append("checkpoint section is not an object with a pairs list")
        elif section.get("verdict") not in ("passed", "failed", "skipped"):
            problems.append(f"checkpoint verdict {section.get('verdict')!r} not one of passed/failed/skipped")
    if "attention" in cert:  # added by the launcher: smoke.attention's table
        problems += attention_table.shape_problems(cert["attention"])
    if "bench" in cert and not isinstance(cert["bench"], dict):
        problems.append("bench section is not an object")
    if "bridge" in cert:  # optional section added by `python -m mcore_images.smoke.bridge --certificate FILE`
        from mcore_images.smoke.bridge.spec import shape_problems

        problems += shape_problems(cert["bridge"])
    if "verl_step" in cert:  # optional section added by `python -m mcore_images.smoke.verl_step --certificate DIR`
        from mcore_images.smoke.verl_step.spec import shape_problems as verl_step_problems

        problems += verl_step_problems(cert["verl_step"])
    digest = cert["image"].get("digest")
    if digest is not None and not str(digest).startswith("sha256:"):
        problems.append(f"image digest {digest!r} is not a sha256 digest")
    return problems


def _num(value: Any, fmt: str = ".4g") -> str:
    if value is None:
        return "–"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return format(value, fmt)


def _ms(seconds: Any) -> str:
    return "–" if seconds is None else f"{seconds * 1000:.1f}"


def _platform_line(platform: dict[str, Any] | None) -> str:
    """What the image ran on, as Python read it inside: ``linux/arm64 (aarch64)``."""
    if not isinstance(platform, dict):
        return "- Platform: – (not recorded)"
    return f"- Platform: {platform.get('platform') or '–'} (machine {platform.get('machine') or '–'})"


def _source_line(source: dict[str, Any] | None) -> str:
    if not source:
        return "- Environment: not recorded"
    differs = source.get("differences") or []
    return (f"- Environment: {source['kind']}" + (f" of stack {source['stack']}" if source.get("stack") else "")
            + (f" — differs from the image: {'; '.join(differs)}" if differs else ""))


def _archs_line(archs: dict[str, Any] | None, capability: str | None) -> str:
    """The GPU architectures the image declares, the GPUs they are, and whether this run's GPU is one of them."""
    if not archs:
        return "- GPU architectures: not recorded (not run in an image)"
    line = f"- GPU architectures: {archs['declared']} ({archs['gpus']})"
    if capability:
        sm = capability.replace(".", "")
        declared = {str(gpu_archs.number(a)) for a in gpu_archs.parse(str(archs["declared"]))}
        line += f"; this run's GPU is sm_{sm}" + ("" if sm in declared else ", which the image does not declare")
    return line


def render_markdown(cert: dict[str, Any]) -> str:
    """The certificate as Markdown: header facts, one table row per run, failed checks listed."""
    env, settings, image = cert["environment"], cert["settings"], cert["image"]
    gpu = env.get("gpu", {})
    pkgs = env.get("packages", {})
    lines = [f"# Smoke certificate: {cert['status'].upper()} (exit {cert['exit_code']})", ""]
    if cert.get("error"):
        lines += [f"**Error:** {cert['error']}", ""]
    if image.get("ref"):
        lines.append(f"- Image: `{image['ref']}` — digest `{image.get('digest')}` ({image.get('digest_source')})")
    lines += [
        f"- Created: {cert['created']}",
        f"- Hardware: {gpu.get('count', 0)} × {gpu.get('model', 'no GPU')}, driver {gpu.get('driver', '–')}, "
        f"CUDA {env.get('cuda') or '–'}, NCCL {env.get('nccl') or '–'}, cuDNN {env.get('cudnn') or '–'}",
        _platform_line(env.get("platform")),
        _source_line(env.get("source")),
        _archs_line(env.get("gpu_archs"), gpu.get("capability")),
        "- Packages: " + ", ".join(f"{name} {pkgs.get(name) or '–'}" for name in components.certificate_packages()),
        f"- Settings: {settings.get('world_size', '?')} rank(s) on {settings.get('nodes', '?')} node(s), "
        f"{settings.get('backend', '?')}, {settings.get('dtype', '?')}, {settings.get('steps', '?')} steps × "
        f"{settings.get('global_batch', '?')} sequences × {settings.get('seq', '?')} tokens",
        f"- Math: {(settings.get('math') or {}).get('how', '–')}",
        f"- Gradient accumulation fusion: {(settings.get('gradient_accumulation_fusion') or {}).get('why', '–')}",
        f"- Tolerance: {cert['tolerance'].get('why', '–')}",
    ]
    if cert.get("determinism"):
        det = cert["determinism"]
        verdict = "bitwise equal" if det["bitwise_equal"] else "NOT bitwise equal"
        lines.append(f"- Determinism: each dp baseline run twice under deterministic settings: losses and grad "
                     f"norms {verdict} ({', '.join(det['runs'])})")
    timing = cert["timing"]
    if timing:
        parts = ", ".join(f"{k.removesuffix('_s')} {v:.1f} s" for k, v in timing.items() if isinstance(v, int | float))
        lines.append(f"- Wall time: {parts}")
    lines += [
        "",
        "| run | status | loss first → last | grad norm 0 | Δloss vs dp | Δgrad vs dp | build s | step ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run in cert["runs"]:
        losses, norms, par, tm = run["losses"], run["grad_norms"], run["parity"] or {}, run["timing"]
        loss = f"{_num(losses[0])} → {_num(losses[-1])}" if losses else "–"
        status = run["status"] if not run["reason"] else f"{run['status']}: {run['reason']}"
        lines.append(
            f"| {run['id']} | {status} | {loss} | {_num(norms[0] if norms else None)} | "
            f"{_num(par.get('loss_rel'), '.2e')} | {_num(par.get('grad_norm_rel'), '.2e')} | "
            f"{_num(tm.get('build_s'), '.2f')} | {_ms(tm.get('step_median_s'))} |"
        )
    if cert.get("checkpoint"):
        lines += render_checkpoint(cert["checkpoint"])
    if cert.get("attention"):
        lines += attention_table.markdown(cert["attention"])
    failed = [(run["id"], c) for run in cert["runs"] for c in run["checks"] if not c.get("ok")]
    failed += [(f"checkpoint {p['id']}", c) for p in (cert.get("checkpoint") or {}).get("pairs", [])
               for c in p["checks"] if not c.get("ok")]
    if failed:
        lines += ["", "## Failed checks", ""]
        lines += [f"- {rid}: {c['name']} — {c.get('detail', '')}" for rid, c in failed]
    if cert.get("bench"):  # optional section added by `python -m mcore_images.smoke.bench --cert DIR`
        from mcore_images.smoke.bench.gate import render_markdown as render_bench

        lines += ["", render_bench(cert["bench"]).rstrip("\n")]
    if cert.get("bridge"):  # optional section added by `python -m mcore_images.smoke.bridge --certificate FILE`
        from mcore_images.smoke.bridge.spec import markdown as render_bridge

        lines += render_bridge(cert["bridge"])
    if cert.get("verl_step"):  # optional section added by `python -m mcore_images.smoke.verl_step --certificate DIR`
        from mcore_images.smoke.verl_step.spec import markdown as render_verl_step

        lines += render_verl_step(cert["verl_step"])
    return "\n".join(lines) + "\n"


def render_checkpoint(section: dict[str, Any]) -> list[str]:
    """The checkpoint round trips as a Markdown table."""
    lines = ["", f"## Checkpoint round trips: {section['verdict'].upper()}", "",
             f"{section.get('format')} checkpoint saved after {section.get('saved_after_steps')} steps, "
             f"{section.get('resumed_steps')} steps resumed in the second layout and compared with the first "
             f"layout's uninterrupted run (distributed optimizer: {section.get('distributed_optimizer')}).", "",
             "| saved in → loaded in | model/spec | status | size MiB | save s | load s | Δloss | Δgrad norm |",
             "|---|---|---|---|---|---|---|---|"]
    for p in section["pairs"]:
        if p["status"] == "skipped":
            lines.append(f"| {p['saved_in']} → {p['loaded_in']} | {p['model']}/{p['spec']} | skipped: "
                         f"{p['reason']} | – | – | – | – | – |")
            continue
        save = f"{p['save_s']:.2f}" + (f" + {p['finish_s']:.2f} background" if p["async_save"] else "")
        lines.append(f"| {p['saved_in']} → {p['loaded_in']} | {p['model']}/{p['spec']} | {p['status']} | "
                     f"{p['bytes'] / 2**20:.1f} | {save} | {p['load_s']:.2f} | {_num(p['loss_rel'], '.2e')} | "
                     f"{_num(p['grad_norm_rel'], '.2e')} |")
    return lines


def write(cert: dict[str, Any], out_dir: Path) -> tuple[Path, Path]:
    """Write certificate.json and certificate.md atomically (a reader never sees half a file; the temporary files
    beside them have names of their own: create_only.replace_text)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = (out_dir / "certificate.json", out_dir / "certificate.md")
    for path, text in zip(paths, (json.dumps(cert, indent=2, default=str) + "\n", render_markdown(cert)),
                          strict=True):
        create_only.replace_text(path, text)
    return paths


def read(path: Path) -> dict[str, Any]:
    """Load a certificate.json (a regular file within reading's limit); raises ValueError naming the problem when it
    cannot be read or is malformed."""
    try:
        cert = reading.read_json(path, "the certificate", "name a smoke certificate folder")
    except InputError as exc:
        raise ValueError(str(exc)) from None
    problems = validate(cert)
    if problems:
        raise ValueError(f"{path}: " + "; ".join(problems))
    return cert
