"""mbridge / Megatron-Bridge: present, compatible with this megatron-core, and able to convert a model."""

from __future__ import annotations

import json
import re
from pathlib import Path

from mcore_images import reading
from mcore_images.catalogue.upstream import MBRIDGE_OLD_NAMES, MCORE_NEW_FLOOR
from mcore_images.doctor import bridges, probes
from mcore_images.doctor.checks_megatron import import_fix
from mcore_images.doctor.model import Context, Outcome, Status, check, ok, skip, trip, warn
from mcore_images.errors import InputError

INSTALL_FIX = "pip install mbridge  (or: pip install megatron-bridge)"
BRIDGES = (
    ("mbridge", "mbridge", ("mbridge",)),
    ("Megatron-Bridge", "megatron.bridge", ("megatron-bridge", "megatron_bridge")),
)


@check("bridge.import", Status.FAIL, INSTALL_FIX, isolated=True)
def bridge_import(ctx: Context) -> Outcome:
    """mbridge or Megatron-Bridge is installed, imports and has a version (needed for HF <-> Megatron conversion)."""
    present = {label: (module, where) for label, module, _ in BRIDGES if (where := probes.locate(module))}
    if not present:
        return warn(
            "Megatron-Bridge package not found (neither mbridge nor megatron.bridge is importable): "
            "HF <-> Megatron conversion is unavailable",
            INSTALL_FIX,
        )
    versions: dict[str, str | None] = {
        label: probes.owned_version(present[label][1], module.replace(".", "/"), *dists)
        for label, module, dists in BRIDGES
        if label in present
    }
    for label, (module, where) in present.items():
        if error := probes.import_error(ctx, module):
            return trip(
                f"{label} {versions[label] or '(no version)'} at {where} does not import: {error}",
                import_fix(error, label.lower()),
                versions=versions,
            )
        versions[label] = versions[label] or probes.module_version(probes.imported(ctx, module))
    if unknown := [label for label in present if versions[label] is None]:
        label = unknown[0]
        dist = next(dists[0] for name, _, dists in BRIDGES if name == label)
        return warn(
            f"{label} at {present[label][1]} imports but has no version (no dist-info for this copy, no "
            "__version__): which release it is, and so what it converts, cannot be told",
            f"reinstall it: pip install --force-reinstall {dist}",
            versions=versions,
        )
    names = ", ".join(f"{label} {versions[label]}" for label in present)
    return ok(f"{names} import", versions=versions)


def references_encoder_and_decoder(root: Path) -> list[str]:
    """Files of a package that use ModelType.encoder_and_decoder (mbridge up to upstream.MBRIDGE_OLD_NAMES does, in
    get_model)."""
    hits = []
    for path in root.rglob("*.py"):
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        if re.search(r"^[^#\n]*ModelType\.encoder_and_decoder", text, re.MULTILINE):
            hits.append(str(path.relative_to(root.parent)))
    return sorted(hits)


def mcore_has_encoder_and_decoder(ctx: Context, core: Path) -> tuple[bool, str]:
    """Ask megatron-core directly (the attribute), else read its enums.py; returns (has_it, method)."""
    try:
        enums = probes.imported(ctx, "megatron.core.enums")
        return hasattr(enums.ModelType, "encoder_and_decoder"), "hasattr(megatron.core.enums.ModelType, ...)"
    except Exception:
        try:
            text = (core / "enums.py").read_text()
        except OSError:
            return True, "unknown (megatron.core.enums neither imports nor reads)"
        return bool(
            re.search(r"^\s*(def\s+encoder_and_decoder\b|encoder_and_decoder\s*=)", text, re.MULTILINE)
        ), f"read {core / 'enums.py'}"


@check(
    "bridge.mcore-compat",
    Status.FAIL,
    f"pin megatron-core < {MCORE_NEW_FLOOR} or upgrade mbridge past {MBRIDGE_OLD_NAMES} (pip install -U mbridge)",
    isolated=True,
)
def bridge_mcore_compat(ctx: Context) -> Outcome:
    """mbridge does not use megatron-core names that this megatron-core removed (verl #6936)."""
    root, core = probes.locate("mbridge"), probes.locate("megatron.core")
    if root is None or core is None:
        return skip("needs both mbridge and megatron.core installed")
    users = references_encoder_and_decoder(root)
    if not users:
        return ok("mbridge does not use ModelType.encoder_and_decoder")
    has_it, method = mcore_has_encoder_and_decoder(ctx, core)
    mbridge = (probes.dist_version("mbridge") or ("", "?"))[1]
    mcore = probes.mcore_version(core)
    details = {"mbridge": mbridge, "megatron_core": mcore, "uses": users, "method": method}
    if not has_it:
        return trip(
            f"mbridge {mbridge} uses ModelType.encoder_and_decoder ({users[0]}), which megatron-core "
            f"{mcore} no longer has: get_model() raises AttributeError",
            **details,
        )
    return ok(
        f"mbridge {mbridge} uses ModelType.encoder_and_decoder and megatron-core {mcore} still has it",
        **details,
    )


def read_hf_config(path: Path) -> dict:
    """config.json (or a directory holding one) → dict; errors are the caller's one-line message."""
    path = path / "config.json" if path.is_dir() else path
    try:
        return json.loads(reading.read_text(path, "", "pass a HF config.json or the directory with one"))
    except InputError as exc:
        raise ValueError(str(exc)) from None


@check(
    "bridge.hf-config",
    Status.FAIL,
    "check model architecture compatibility: use an architecture the "
    "bridge registers, upgrade the bridge (pip install -U mbridge / megatron-bridge), or register a bridge",
    isolated=True,
)
def bridge_hf_config(ctx: Context) -> Outcome:
    """The HF config given with --hf-config has a bridge that can convert it (else conversion fails)."""
    if ctx.hf_config is None:
        return skip("no --hf-config given")
    try:
        config = read_hf_config(ctx.hf_config)
    except (OSError, ValueError) as error:
        return trip(
            f"cannot read {ctx.hf_config}: {error}", "pass a HF config.json or the directory with one"
        )
    archs = [a for a in config.get("architectures") or [] if isinstance(a, str)]
    model_type = config.get("model_type")
    registries = [r for r in (bridges.mbridge_registry(ctx), bridges.megatron_bridge_registry(ctx)) if r]
    if not registries:
        return trip("Megatron-Bridge package not found: nothing can convert this config", INSTALL_FIX)
    wanted = {"model_type": {model_type} - {None}, "architecture": set(archs)}
    details = {
        r.package: {"version": r.version, "method": r.method, "registered": len(r.keys)} for r in registries
    }
    for registry in registries:
        if hits := wanted[registry.key_kind] & registry.keys:
            return ok(
                f"{registry.package} {registry.version} converts {registry.key_kind} {sorted(hits)[0]}",
                architectures=archs,
                model_type=model_type,
                **details,
            )
    tried = "; ".join(
        f"{r.package} {r.version} knows {len(r.keys)} {r.key_kind}s (e.g. {', '.join(sorted(r.keys)[:6])})"
        for r in registries
    )
    return trip(
        f"config conversion will fail: architectures {archs} / model_type {model_type!r} are not "
        f"registered. {tried}",
        architectures=archs,
        model_type=model_type,
        **details,
    )
