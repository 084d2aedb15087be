"""What mbridge and Megatron-Bridge can convert, read from their own registries.

mbridge keys its registry (`_MODEL_REGISTRY`) by HF `model_type`; when mbridge imports we read that
dict. Megatron-Bridge keys its bridges by the HF architecture class (`register_bridge(source=...)`);
importing it pulls in torch, transformers and megatron-core, so we read its decorators from the
source instead (ast, no import). Each answer says which method produced it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from mcore_images.doctor import probes
from mcore_images.doctor.model import Context


@dataclass
class Registry:
    package: str
    version: str | None
    keys: set[str] = field(default_factory=set)
    key_kind: str = ""  # "model_type" or "architecture"
    method: str = ""


def _decorator_calls(tree: ast.Module, name: str) -> list[ast.Call]:
    calls = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef | ast.FunctionDef):
            for deco in node.decorator_list:
                func = deco.func if isinstance(deco, ast.Call) else None
                called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
                if called == name:
                    calls.append(deco)
    return calls


def _strings(node: ast.AST | None) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.List | ast.Tuple):
        return [s for item in node.elts for s in _strings(item)]
    return []


def _aliases(tree: ast.Module) -> dict[str, str]:
    """Module-level names that stand for an HF class: `from x import A as B` and `B = "A"` fallbacks."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                names[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and _strings(node.value):
            names[node.targets[0].id] = _strings(node.value)[0]
    return names


def _parse(path: Path, marker: str) -> ast.Module | None:
    try:
        text = path.read_text(errors="replace")
        return ast.parse(text) if marker in text else None
    except (OSError, SyntaxError, ValueError):
        return None


def scan_mbridge(root: Path) -> set[str]:
    keys: set[str] = set()
    for path in root.rglob("*.py"):
        if tree := _parse(path, "register_model"):
            for call in _decorator_calls(tree, "register_model"):
                keys.update(_strings(call.args[0]) if call.args else [])
    return keys


def scan_megatron_bridge(root: Path) -> set[str]:
    keys: set[str] = set()
    for path in root.rglob("*.py"):
        if tree := _parse(path, "register_bridge"):
            aliases = _aliases(tree)
            for call in _decorator_calls(tree, "register_bridge"):
                source = next((k.value for k in call.keywords if k.arg == "source"), None)
                source = source or (call.args[0] if call.args else None)
                if isinstance(source, ast.Name):
                    keys.add(aliases.get(source.id, source.id))
                elif isinstance(source, ast.Attribute):
                    keys.add(source.attr)
                else:
                    keys.update(_strings(source))
    return keys


def mbridge_registry(ctx: Context) -> Registry | None:
    root = probes.locate("mbridge")
    if root is None:
        return None
    version = (probes.dist_version("mbridge") or ("", None))[1]
    # Only a complete import fills the registry: after a failed `import mbridge` the submodules that did
    # load stay in sys.modules with a partial registry, so that case reads the source instead.
    if probes.import_error(ctx, "mbridge") is None:
        registry = probes.imported(ctx, "mbridge.core.bridge")._MODEL_REGISTRY
        return Registry(
            "mbridge", version, set(registry), "model_type", "mbridge.core.bridge._MODEL_REGISTRY"
        )
    return Registry(
        "mbridge",
        version,
        scan_mbridge(root),
        "model_type",
        f"@register_model decorators read from {root} (mbridge did not import)",
    )


def megatron_bridge_registry(ctx: Context) -> Registry | None:
    root = probes.locate("megatron.bridge")
    if root is None:
        return None
    version = (probes.dist_version("megatron-bridge", "megatron_bridge") or ("", None))[1]
    return Registry(
        "Megatron-Bridge",
        version,
        scan_megatron_bridge(root),
        "architecture",
        f"@register_bridge(source=...) decorators read from {root}",
    )
