"""The package layout holds: the packages depend on each other in the pipeline's direction, no module imports
itself back through others (an import circle), no import inside a function hides one, no relative import leaves
its package, and the smoke takes from the tooling only what runs in images (``SMOKE_MAY_IMPORT``).

The direction, from the bottom: the shared modules (errors, command, jsonfiles, schemas, create_only, options,
reading, tools) ← catalogue ← resolve ← image_build and release, with launch beside resolve (containers and
programs, on the catalogue alone); doctor, report and the smoke on top; cli imports them all. Read from the source
with ast, nothing imported: an import is ``import``, ``from … import`` (relative ones resolved against the importing
module's package) and ``importlib.import_module`` or ``__import__`` of a module named by a string literal.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.unit.conftest import ROOT

SRC = ROOT / "src"
SHARED = {"errors", "command", "jsonfiles", "schemas", "create_only", "options", "reading", "tools", "progress",
          "docker_cli", "__init__"}
ALLOWED: dict[str, set[str]] = {
    "shared": {"shared"},
    "catalogue": {"shared", "catalogue"},
    "resolve": {"shared", "catalogue", "resolve"},
    "launch": {"shared", "catalogue", "launch"},
    "image_build": {"shared", "catalogue", "resolve", "launch", "image_build"},
    "release": {"shared", "catalogue", "resolve", "launch", "release"},
    "doctor": {"shared", "catalogue", "image_build", "doctor"},
    "report": {"shared", "catalogue", "resolve", "release", "report"},
    "smoke": {"shared", "catalogue", "smoke"},
    "cli": {"shared", "catalogue", "resolve", "launch", "image_build", "release", "doctor", "report", "cli"},
}
"""Which packages each package may import."""

SMOKE_MAY_IMPORT = {"mcore_images", "mcore_images.catalogue", "mcore_images.catalogue.components",
                    "mcore_images.schemas", "mcore_images.catalogue.gpu_archs", "mcore_images.catalogue.platforms",
                    "mcore_images.catalogue.flash_attention", "mcore_images.catalogue.versions",
                    "mcore_images.catalogue.wgrad_fusion",
                    "mcore_images.errors", "mcore_images.create_only", "mcore_images.options", "mcore_images.reading"}
"""The one list of the tooling's modules the smoke may import (it runs in images beside torch): its data
(flash_attention: the NVTE variables megatron-core sets per attention_backend; wgrad_fusion: who provides
megatron-core's gradient accumulation fusion), and the standard-library rules it
shares with the tool (an output folder is created, never clobbered; a number on a command line is finite and in
range). The packages' faces (``mcore_images``, ``mcore_images.catalogue``) run on the way to them. Its docstring
(src/mcore_images/smoke/__init__.py) and docs/contributing.md name the same modules (a test below holds them), and
tests/unit/repo/test_recipes.py holds these modules to the standard library."""


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int
    in_function: bool
    relative: bool = False


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


def absolute(node: ast.ImportFrom, package: str) -> str:
    """The module a ``from`` import names, a relative one resolved against ``package`` (the importing module's)."""
    if not node.level:
        return node.module or ""
    base = package.split(".")
    base = base[:len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


IMPORTERS = ("import_module", "__import__")
"""importlib.import_module and the builtin __import__: a module named by a string literal is imported as surely as
by an import statement."""


def dynamic(node: ast.Call) -> str | None:
    """The module an ``importlib.import_module("…")`` or ``__import__("…")`` call names by a string literal."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    first = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "name"), None)
    if name in IMPORTERS and isinstance(first, ast.Constant) and isinstance(first.value, str):
        return first.value
    return None


def targets(node: ast.Import | ast.ImportFrom | ast.Call, known: dict[str, Path], package: str) -> Iterator[str]:
    """The project modules an import runs: each named module and the packages above it."""
    if isinstance(node, ast.Call):
        named = [name] if (name := dynamic(node)) and name.startswith("mcore_images") else []
    elif isinstance(node, ast.ImportFrom):
        module = absolute(node, package)
        if not module.startswith("mcore_images"):
            return
        named = [f"{module}.{a.name}" if f"{module}.{a.name}" in known else module for a in node.names]
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
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        kinds = (ast.Import, ast.ImportFrom, ast.Call)
        inner: set[int] = set()
        for function in ast.walk(tree):
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inner |= {id(n) for n in ast.walk(function) if isinstance(n, kinds)}
        for node in ast.walk(tree):
            if isinstance(node, kinds):
                relative = isinstance(node, ast.ImportFrom) and node.level > 0
                found += [Edge(name, t, node.lineno, id(node) in inner, relative)
                          for t in targets(node, known, package) if t != name]
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


def test_no_relative_import_leaves_its_package() -> None:
    """``from ..resolve import rules`` reads as a neighbour: an import across packages names the package."""
    across = [e for e in edges() if e.relative and package_of(e.target) != package_of(e.source)]
    # the module named, not the packages above it that the import runs too
    named = [e for e in across if not any(o.target.startswith(e.target + ".") for o in across
                                          if (o.source, o.line) == (e.source, e.line))]
    wrong = [f"{e.source} (line {e.line}) imports {e.target} relatively: write `from {e.target.rpartition('.')[0]} "
             f"import {e.target.rpartition('.')[2]}`" for e in named]
    assert not wrong, "\n".join(wrong)


def test_the_smoke_imports_of_the_tooling_only_what_runs_in_images() -> None:
    """The smoke package (in images beside torch) takes from the rest of the tooling only SMOKE_MAY_IMPORT."""
    wrong = [f"{e.source} (line {e.line}) imports {e.target}: the smoke may import of the tooling only "
             f"{', '.join(sorted(SMOKE_MAY_IMPORT))}"
             for e in edges() if package_of(e.source) == "smoke" and package_of(e.target) != "smoke"
             and e.target not in SMOKE_MAY_IMPORT]
    assert not wrong, "\n".join(wrong)


def room(module: str, package: str) -> str | None:
    """The room of ``package`` a module stands in, as a reader of that package sees it: a module directly in it is
    its own room, a sub-package is one room (``mcore_images.smoke.bench/``); None outside ``package``."""
    if not module.startswith(package + "."):
        return None
    rest = module.removeprefix(package + ".").split(".")
    return f"{package}.{rest[0]}" + ("/" if len(rest) > 1 or (SRC / package.replace(".", "/") / rest[0]).is_dir()
                                     else "")


def back_arrows(package: str) -> list[str]:
    """Each import, top-level or inside a function, that closes a circle between ``package``'s rooms: an arrow that
    runs back up however the rooms are stacked."""
    arrows: dict[tuple[str, str], Edge] = {}
    for e in edges():
        ends = room(e.source, package), room(e.target, package)
        if ends[0] and ends[1] and ends[0] != ends[1]:
            arrows.setdefault((ends[0], ends[1]), e)
    graph: dict[str, set[str]] = {}
    for source, target in arrows:
        graph.setdefault(source, set()).add(target)
    return [f"{e.source} (line {e.line}) imports {e.target}, and {target} reaches {source} back: "
            f"{' → '.join(path)}" for (source, target), e in sorted(arrows.items())
            if (path := reaches(graph, target, source))]


def test_no_back_arrow_between_the_smokes_rooms() -> None:
    """Inside the smoke, each program's folder is one room (its readers see it so) and each top-level module
    another: no room reaches itself back through others, by imports at the top or inside functions. Before: the
    certificate imported each program's spec and gate inside its functions while the programs imported the
    certificate, and the verl step imported the launcher (for count_gpus, now the kit's)."""
    wrong = back_arrows("mcore_images.smoke")
    assert not wrong, "\n".join(wrong)


def test_the_certificates_plug_ins_never_reach_the_certificate() -> None:
    """The sections the certificate finds at run time (smoke/kit/sections.py imports each program's ``section``
    module, by name, where no test sees an arrow) import neither the certificate nor anything that does: a circle
    the layout could not show."""
    graph: dict[str, set[str]] = {}
    for e in edges():
        graph.setdefault(e.source, set()).add(e.target)
    plugins = [m for m in modules() if m.startswith("mcore_images.smoke.") and m.endswith(".section")]
    wrong = [f"{m} reaches the certificate: {' → '.join(path)}" for m in plugins
             if (path := reaches(graph, m, "mcore_images.smoke.certificate"))]
    assert plugins and not wrong, "\n".join(wrong)


def named_modules(text: str) -> set[str]:
    return set(re.findall(r"mcore_images(?:\.[a-z_]+)+", text))


def test_the_smoke_docstring_and_the_guide_name_the_smoke_wall() -> None:
    """The smoke's docstring and docs/contributing.md's walls name the modules of SMOKE_MAY_IMPORT, no more, no
    less (the packages' faces aside). Before: the docstring named five of the nine, the guide all nine."""
    wall = {name for name in SMOKE_MAY_IMPORT if not (SRC / name.replace(".", "/") / "__init__.py").is_file()}
    docstring = ast.get_docstring(ast.parse((SRC / "mcore_images" / "smoke" / "__init__.py").read_text())) or ""
    paragraph = next((p for p in docstring.split("\n\n") if "from the tooling" in " ".join(p.split())), "")
    assert named_modules(paragraph) == wall, paragraph
    guide = (ROOT / "docs" / "contributing.md").read_text()
    bullet = re.search(r"^- `src/mcore_images/smoke/` runs inside images.*?(?=^- )", guide, re.M | re.S)
    assert bullet and named_modules(bullet.group(0)) == wall, bullet and bullet.group(0)


PLANTED = {
    "catalogue/a.py": "from mcore_images.resolve import b\n",
    "resolve/b.py": "def f():\n    from mcore_images.resolve import c\n",
    "resolve/c.py": "from mcore_images.resolve import b\n",
    "resolve/d.py": "from mcore_images.resolve import e\n",
    "resolve/e.py": "from mcore_images.resolve import d\n",
    "catalogue/f.py": "from ..resolve import rules\n",
    "catalogue/g.py": "import importlib\nimportlib.import_module('mcore_images.resolve.rules')\n",
    "resolve/rules.py": "",
    "smoke/h.py": "from mcore_images.catalogue import stacks\n",
    "smoke/i.py": "from ..catalogue import stacks\n",
    "smoke/j.py": "__import__('mcore_images.catalogue.stacks')\n",
    "catalogue/stacks.py": "",
    "smoke/k.py": "from mcore_images.smoke.p import x\n",
    "smoke/p/x.py": "",
    "smoke/p/y.py": "def f():\n    from mcore_images.smoke import k\n",
}
"""A tree that breaks each check: catalogue importing resolve; d ↔ e; b hiding b → c → b; catalogue importing
resolve relatively (f) and through importlib (g); the smoke importing catalogue.stacks, plainly, relatively and
through __import__; the smoke's k importing its folder p, whose y imports k back inside a function (no file circle:
a back arrow between rooms)."""
REFUSED = {
    test_packages_import_in_the_pipelines_direction: ["mcore_images.catalogue.a (line 1) imports mcore_images.resolve",
                                                      "mcore_images.catalogue.f (line 1) imports mcore_images.resolve",
                                                      "mcore_images.catalogue.g (line 2) imports mcore_images.resolve"],
    test_no_module_imports_itself_back: ["mcore_images.resolve.d → mcore_images.resolve.e → mcore_images.resolve.d"],
    test_no_import_inside_a_function_hides_a_circle: ["mcore_images.resolve.b (line 2) imports mcore_images.resolve.c "
                                                      "inside a function"],
    test_no_relative_import_leaves_its_package: ["mcore_images.catalogue.f (line 1) imports mcore_images.resolve.rules "
                                                 "relatively", "mcore_images.smoke.i (line 1) imports "
                                                 "mcore_images.catalogue.stacks relatively"],
    test_the_smoke_imports_of_the_tooling_only_what_runs_in_images: [
        f"mcore_images.smoke.{m} (line 1) imports mcore_images.catalogue.stacks: the smoke may" for m in "hij"],
    test_no_back_arrow_between_the_smokes_rooms: ["mcore_images.smoke.p.y (line 2) imports mcore_images.smoke.k, and "
                                                  "mcore_images.smoke.k reaches mcore_images.smoke.p/ back"],
}


def test_the_checks_see_an_edge_they_must_refuse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each check fails on a tree that breaks it, naming each planted import."""
    package = tmp_path / "src" / "mcore_images"
    for sub in ("catalogue", "resolve", "smoke", "smoke/p"):
        (package / sub).mkdir(parents=True)
        (package / sub / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    for name, text in PLANTED.items():
        (package / name).write_text(text)
    monkeypatch.setattr(sys.modules[__name__], "SRC", tmp_path / "src")
    for check, expected in REFUSED.items():
        try:
            check()
        except AssertionError as refused:
            missing = [line for line in expected if line not in str(refused)]
            assert not missing, f"{check.__name__} did not name {missing}: {refused}"
            continue
        raise AssertionError(f"{check.__name__} passed on a tree that breaks it")
