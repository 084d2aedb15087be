"""Where verl's Megatron path imports FlashAttention, read from verl's installed source (ast, nothing imported).

verl 0.8 imports FlashAttention 2's ``flash_attn.bert_padding`` on its Megatron path without a fallback
(utils/attention_utils.py, used by the engine's padding helpers; utils/megatron/pipeline_parallel.py, "flash 2 is
a must for Megatron"). verl 0.9 falls back to torch implementations in attention_utils.py and keeps the other
imports inside functions its Megatron engine does not call. An image without FlashAttention 2 runs verl's Megatron
path only where each such import is guarded or unreached: the program lists every one with how it is written,
and the engine part reports what attention_utils resolved to at run time. Standard library only.
"""

from __future__ import annotations

import ast
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

MEGATRON_PATH = (
    "workers/engine/megatron",
    "workers/engine_workers.py",
    "workers/utils",
    "utils/megatron",
    "utils/megatron_utils.py",
    "utils/attention_utils.py",
    "utils/torch_functional.py",
    "models/mcore",
)
"""The parts of verl (relative to its package folder) its Megatron engine, worker and padding helpers live in."""


@dataclass(frozen=True)
class FlashImport:
    """One import of a ``flash_attn`` module in verl's source."""

    file: str
    line: int
    module: str
    where: str
    """``module level`` or ``in <function>``."""
    how: str
    """``unguarded``, or ``guarded (except ImportError)`` where a handler catches its failure."""
    used_at: tuple[str, ...] = ()
    """For an import inside a function: where verl's package names that function (file:line), other than its
    definition. Empty: nothing in verl calls it, so its import never runs on verl's own paths."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(n, ast.Name) and n.id in ("ImportError", "ModuleNotFoundError", "Exception")
               for n in names)


def _visit(node: ast.AST, path: str, function: str | None, guarded: bool, found: list[FlashImport]) -> None:
    for child in ast.iter_child_nodes(node):
        inner_function, inner_guard = function, guarded
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            inner_function = child.name if function is None else f"{function}.{child.name}"
        if isinstance(child, ast.Try) and any(_catches_import_error(h) for h in child.handlers):
            for stmt in child.body:
                _visit_statement(stmt, path, function, True, found)
            for part in (*child.handlers, *child.orelse, *child.finalbody):
                _visit_statement(part, path, function, guarded, found)
            continue
        if isinstance(child, ast.Import | ast.ImportFrom):
            modules = ([a.name for a in child.names] if isinstance(child, ast.Import)
                       else [child.module or ""] if not child.level else [])
            for module in modules:
                if module == "flash_attn" or module.startswith("flash_attn."):
                    found.append(FlashImport(path, child.lineno, module,
                                             f"in {function}" if function else "module level",
                                             "guarded (except ImportError)" if guarded else "unguarded"))
        _visit(child, path, inner_function, inner_guard, found)


def _visit_statement(stmt: ast.AST, path: str, function: str | None, guarded: bool, found: list[FlashImport]) -> None:
    """Visit one statement itself (an import directly in a try body) and everything below it."""
    holder = ast.Module(body=[stmt], type_ignores=[]) if isinstance(stmt, ast.stmt) else stmt
    _visit(holder, path, function, guarded, found)


def _parse(path: Path) -> ast.AST | None:
    try:
        return ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None


def _names_used(trees: dict[str, ast.AST]) -> dict[str, list[str]]:
    """Every name the package loads or reads as an attribute (``f`` in ``f(x)`` and ``mod.f(x)``), with where."""
    used: dict[str, list[str]] = {}
    for file, tree in trees.items():
        for node in ast.walk(tree):
            name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
            if name is not None:
                used.setdefault(name, []).append(f"{file}:{node.lineno}")
            elif isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    used.setdefault(alias.name, []).append(f"{file}:{node.lineno}")
    return used


def scan(package: Path, parts: tuple[str, ...] = MEGATRON_PATH) -> list[FlashImport]:
    """Every ``flash_attn`` import under ``parts`` of the verl package folder ``package``, in file order, each
    inside a function with the places the package uses that function."""
    files: list[Path] = []
    for part in parts:
        target = package / part
        files += sorted(target.rglob("*.py")) if target.is_dir() else ([target] if target.is_file() else [])
    found: list[FlashImport] = []
    for path in files:
        if (tree := _parse(path)) is not None:
            _visit(tree, path.relative_to(package).as_posix(), None, False, found)
    trees = {p.relative_to(package).as_posix(): t for p in sorted(package.rglob("*.py")) if (t := _parse(p))}
    used = _names_used(trees)
    placed = []
    for item in found:
        if item.where.startswith("in "):
            outer = item.where.removeprefix("in ").split(".")[0]
            item = FlashImport(item.file, item.line, item.module, item.where, item.how, tuple(used.get(outer, ())))
        placed.append(item)
    return sorted(placed, key=lambda f: (f.file, f.line))
