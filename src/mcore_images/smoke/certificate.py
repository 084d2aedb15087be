"""The smoke certificate: a JSON document and the Markdown table rendered from it.

Pure Python. The ranks fill ``environment``/``settings``/``runs``; the launcher adds the outcome and
wall time; the smoke's programs add their sections (smoke/kit/sections.py: each program's ``section`` module says
its key and its Markdown); ``mcore-images certify`` adds the image reference and digest. One schema
(data/certificate.schema.json: the document is its ``$defs/smoke``, each section its ``$defs/<key>``), one renderer.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path
from typing import Any

from mcore_images import create_only, reading, schemas
from mcore_images.catalogue import components, gpu_archs
from mcore_images.errors import InputError
from mcore_images.smoke.kit import sections

SCHEMA = schemas.CERTIFICATE
DEFINITION = "#/$defs/smoke"
"""The part of the certificate's schema the smoke's document is held to (certify's fields come later)."""


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


@functools.cache
def _validator(definition: str = DEFINITION) -> Any:
    """A definition of the certificate's schema (the smoke's document, or one section's ``#/$defs/<key>``), as a
    jsonschema validator (jsonschema: every runtime lock has it)."""
    import jsonschema

    document = json.loads(schemas.CERTIFICATE_SCHEMA.read_text(encoding="utf-8"))
    return jsonschema.Draft202012Validator({"$defs": document["$defs"], "$ref": definition})


def _held(data: Any, definition: str, where: list[Any]) -> list[str]:
    """Where ``data`` breaks ``definition``, one phrase each, its fields named from ``where`` on."""
    try:
        validator = _validator(definition)
    except ImportError:
        return ["the jsonschema package is needed to check a certificate: pip install jsonschema"]
    return [schemas.phrase(e, where=[*where, *e.absolute_path])
            for e in sorted(validator.iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))]


def _identifier(key: str, section: Any) -> list[str]:
    """A registered section's ``schema`` identifier that is not the one its program writes."""
    registered = sections.registered()[key]
    if isinstance(section, dict) and registered.schema and section.get("schema") != registered.schema:
        return [f"{key} section schema {section.get('schema')!r} is not {registered.schema!r}"]
    return []


def validate(cert: dict[str, Any]) -> list[str]:
    """Problems with a certificate's shape, one phrase each (empty list when it is well-formed): where it breaks
    the schema's smoke document, and a ``schema`` identifier, its own or a section's, that is not the one its writer
    writes."""
    problems = _held(cert, DEFINITION, [])
    if isinstance(cert, dict) and cert.get("schema") != SCHEMA:
        problems.append(f"schema {cert.get('schema')!r} is not {SCHEMA!r}")
    for key in sections.registered():
        if isinstance(cert, dict) and key in cert:
            problems += _identifier(key, cert[key])
    return problems


def section_problems(key: str, section: Any) -> list[str]:
    """Problems with one program's section on its own (a file its program wrote with --out, before it joins a
    certificate): where it breaks ``$defs/<key>``, and its identifier. ValueError when no program registers ``key``."""
    if key not in sections.registered():
        raise ValueError(f"no program of the smoke registers a certificate section {key!r}")
    return _held(section, f"#/$defs/{key}", [key]) + _identifier(key, section)


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
    failed = [(run["id"], c) for run in cert["runs"] for c in run["checks"] if not c.get("ok")]
    failed += [(f"checkpoint {p['id']}", c) for p in (cert.get("checkpoint") or {}).get("pairs", [])
               for c in p["checks"] if not c.get("ok")]
    if failed:
        lines += ["", "## Failed checks", ""]
        lines += [f"- {rid}: {c['name']} — {c.get('detail', '')}" for rid, c in failed]
    added = sections.registered()
    for key, value in cert.items():  # the programs' sections, in the order they were added
        if key in added and value:
            lines += added[key].markdown(value)
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


def attach(folder: Path, key: str, section: dict[str, Any]) -> dict[str, Any]:
    """Add a program's section under ``key`` to the certificate in ``folder`` and write both files again; the
    certificate as written. ValueError when the certificate there is malformed or no program registers ``key``."""
    if key not in sections.registered():
        raise ValueError(f"no program of the smoke registers a certificate section {key!r}")
    cert = read(folder / "certificate.json")
    cert[key] = section
    write(cert, folder)
    return cert
