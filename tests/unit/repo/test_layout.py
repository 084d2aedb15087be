"""The package layout holds: the packages depend on each other in the pipeline's direction, no module imports
itself back through others (an import circle), and no import inside a function hides one.

The direction, from the bottom: the shared modules (errors, command, jsonfiles, schemas, create_only, options) ←
catalogue ← resolve ← build and release, with launch beside resolve (containers and programs, on the catalogue
alone); doctor, report and the smoke on top; cli imports them all. Read from the source with ast, nothing
imported.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.unit.conftest import ROOT

SRC = ROOT / "src"
SHARED = {"errors", "command", "jsonfiles", "schemas", "create_only", "options", "__init__"}
ALLOWED: dict[str, set[str]] = {
    "shared": {"shared"},
    "catalogue": {"shared", "catalogue"},
    "resolve": {"shared", "catalogue", "resolve"},
    "launch": {"shared", "catalogue", "launch"},
    "build": {"shared", "catalogue", "resolve", "launch", "build"},
    "release": {"shared", "catalogue", "resolve", "launch", "release"},
    "doctor": {"shared", "catalogue", "build", "doctor"},
    "report": {"shared", "catalogue", "resolve", "release", "report"},
    "smoke": {"shared", "catalogue", "smoke"},
    "cli": {"shared", "catalogue", "resolve", "launch", "build", "release", "doctor", "report", "cli"},
}
"""Which packages each package may import."""


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int
    in_function: bool


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted((SRC / "mcore_images").rglob("*.py")) if "__pycache__" not in p.parts}


def package_of(module: str) -> str:
    """The layout's package a module belongs to (``shared`` for the top-level helpers, ``cli`` for the entry)."""
    parts = module.split(".")
    if len(parts) == 1:
        return "shared"
    if parts[1] in ("cli", "__main__"):
        return "cli"
    return "shared" if len(parts) == 2 and parts[1] in SHARED else parts[1]


def targets(node: ast.Import | ast.ImportFrom, known: dict[str, Path]) -> Iterator[str]:
    """The project modules an import statement runs: each named module and the packages above it."""
    if isinstance(node, ast.ImportFrom):
        if node.level or not (node.module or "").startswith("mcore_images"):
            return
        named = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module
                 for a in node.names]
    else:
        named = [a.name for a in node.names if a.name.startswith("mcore_images")]
    for name in named:
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            if ".".join(parts[:i]) in known:
                yield ".".join(parts[:i])


def edges() -> list[Edge]:
    known = modules()
    found = []
    for name, path in known.items():
        tree = ast.parse(path.read_text())
        inner: set[int] = set()
        for function in ast.walk(tree):
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inner |= {id(n) for n in ast.walk(function) if isinstance(n, (ast.Import, ast.ImportFrom))}
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found += [Edge(name, t, node.lineno, id(node) in inner) for t in targets(node, known) if t != name]
    return found


def reaches(graph: dict[str, set[str]], start: str, goal: str) -> list[str] | None:
    """A path start → … → goal along the graph, or None."""
    stack, seen = [(start, [start])], {start}
    while stack:
        node, path = stack.pop()
        for nxt in sorted(graph.get(node, ())):
            if nxt == goal:
                return [*path, nxt]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, [*path, nxt]))
    return None


def top_level_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for edge in edges():
        if not edge.in_function:
            graph.setdefault(edge.source, set()).add(edge.target)
    return graph


def test_packages_import_in_the_pipelines_direction() -> None:
    wrong = [f"{e.source} (line {e.line}) imports {e.target}: {package_of(e.source)} may import only "
             f"{', '.join(sorted(ALLOWED[package_of(e.source)]))}"
             for e in edges() if package_of(e.target) not in ALLOWED[package_of(e.source)]]
    assert not wrong, "\n".join(wrong)


def test_no_module_imports_itself_back() -> None:
    graph = top_level_graph()
    circles = {" → ".join(path) for module in graph if (path := reaches(graph, module, module))}
    assert not circles, "import circles:\n" + "\n".join(sorted(circles))


def test_no_import_inside_a_function_hides_a_circle() -> None:
    """An import moved into a function to dodge a circle is one still: the module it names imports this one."""
    graph = top_level_graph()
    hidden = [f"{e.source} (line {e.line}) imports {e.target} inside a function, and {e.target} imports it back: "
              f"{' → '.join(path)}"
              for e in edges() if e.in_function and (path := reaches(graph, e.target, e.source))]
    assert not hidden, "\n".join(hidden)


def test_the_checks_see_an_edge_they_must_refuse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each check fails on a tree that breaks it: catalogue importing resolve, d ↔ e, and b hiding b → c → b."""
    package = tmp_path / "src" / "mcore_images"
    for sub in ("catalogue", "resolve"):
        (package / sub).mkdir(parents=True)
        (package / sub / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "catalogue" / "a.py").write_text("from mcore_images.resolve import b\n")
    (package / "resolve" / "b.py").write_text("def f():\n    from mcore_images.resolve import c\n")
    (package / "resolve" / "c.py").write_text("from mcore_images.resolve import b\n")
    (package / "resolve" / "d.py").write_text("from mcore_images.resolve import e\n")
    (package / "resolve" / "e.py").write_text("from mcore_images.resolve import d\n")
    monkeypatch.setattr(sys.modules[__name__], "SRC", tmp_path / "src")
    for check in (test_packages_import_in_the_pipelines_direction, test_no_module_imports_itself_back,
                  test_no_import_inside_a_function_hides_a_circle):
        try:
            check()
        except AssertionError:
            continue
        raise AssertionError(f"{check.__name__} passed on a tree that breaks it")
