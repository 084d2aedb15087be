"""Which megatron-core a Megatron-Bridge release can import.

Megatron-Bridge declares ``megatron-core[dev,mlm]`` with no version (its real pin is a git submodule), so
the metadata cannot say which megatron-core release goes with it. Its code can: every ``from
megatron.core.X import Y`` that runs when a bridge module is imported (module level, outside ``try``)
must find X and Y in the megatron-core release, or ``import megatron.bridge`` fails. This reads both
wheels (nothing installed or run) and lists what the bridge imports that megatron-core lacks; `lock`
records the list in env/engines.json and the rule ``bridge-mcore`` refuses a pair whose list is not empty.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from mcore_images.errors import InputError
from mcore_images.resolve.pypi import PLATFORMS, resolver_environment

CORE = "megatron.core"


def _modules(wheel: Path, package: str) -> dict[str, str]:
    """Module name -> source of every module of ``package`` in the wheel."""
    prefix = package.replace(".", "/") + "/"
    out = {}
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if name.startswith(prefix) and name.endswith(".py"):
                module = name[:-3].replace("/", ".").removesuffix(".__init__")
                out[module] = z.read(name).decode("utf-8", errors="replace")
    return out


def _parse(source: str) -> ast.Module | None:
    try:
        return ast.parse(source)
    except SyntaxError:
        return None


def _defined(tree: ast.Module) -> set[str]:
    """Names a module binds at any depth of its top-level statements (defs, classes, assignments, imports)."""
    names: set[str] = set()
    for node in tree.body:
        for sub in ast.walk(node):
            if isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(sub.name)
            elif isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                names.add(sub.id)
            elif isinstance(sub, ast.alias) and sub.name != "*":
                names.add((sub.asname or sub.name).split(".")[0])
    return names


def _absolute(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join([*base, *([node.module] if node.module else [])])


class Core:
    """The modules of a megatron-core wheel and the names each offers (star re-exports followed)."""

    def __init__(self, sources: dict[str, str]):
        self.sources = sources
        self.trees = {m: t for m, s in sources.items() if (t := _parse(s)) is not None}
        self._names: dict[str, set[str]] = {}

    def is_package(self, module: str) -> bool:
        return any(m.startswith(module + ".") for m in self.sources)

    def names(self, module: str, seen: frozenset[str] = frozenset()) -> set[str]:
        if module in self._names:
            return self._names[module]
        tree = self.trees.get(module)
        if tree is None or module in seen:
            return set()
        names = _defined(tree)
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
                names |= self.names(_absolute(module, node, self.is_package(module)), seen | {module})
        self._names[module] = names
        return names

    def lacks(self, module: str, name: str | None) -> bool:
        if module not in self.sources:
            return True
        return name is not None and name not in self.names(module) and f"{module}.{name}" not in self.sources


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_time_nodes(tree: ast.Module) -> list[ast.stmt]:
    """Import statements that run when the module is imported: top level, and inside if/with at top level;
    not inside a function, a class body's methods, a ``try`` (a guarded, optional import) or
    ``if TYPE_CHECKING:``."""
    out: list[ast.stmt] = []
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop(0)
        if isinstance(node, ast.Import | ast.ImportFrom):
            out.append(node)
        elif isinstance(node, ast.If) and _type_checking(node.test):
            pending += node.orelse  # the body is for type checkers only
        elif isinstance(node, ast.If | ast.With):
            pending += [*node.body, *getattr(node, "orelse", [])]
        elif isinstance(node, ast.ClassDef):
            pending += [n for n in node.body if isinstance(n, ast.Import | ast.ImportFrom | ast.If)]
    return out


def missing(bridge_wheel: Path, core_wheel: Path) -> list[str]:
    """What the bridge imports from megatron-core at import time that the megatron-core wheel lacks, as
    ``module.name`` (or ``module`` for a whole module), each once, sorted."""
    core = Core(_modules(core_wheel, CORE))
    found: set[str] = set()
    for source in _modules(bridge_wheel, "megatron.bridge").values():
        tree = _parse(source)
        if tree is None:
            continue
        for node in _import_time_nodes(tree):
            if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith(CORE):
                target = node.module or ""
                if target not in core.sources:
                    found.add(target)
                    continue
                found |= {f"{target}.{a.name}" for a in node.names if a.name != "*" and core.lacks(target, a.name)}
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name.startswith(CORE + ".") and core.lacks(a.name, None)}
    return sorted(found)


def download(distribution: str, version: str, python: str, into: Path) -> Path:
    """One release's wheel for the locks' platform (pip downloads it, installs nothing)."""

    done = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:",
         "--ignore-requires-python", "--python-version", python, *PLATFORMS, "-d", str(into),
         f"{distribution}=={version}"], capture_output=True, text=True, check=False, env=resolver_environment())
    wheels = sorted(into.glob(f"{distribution.replace('-', '_')}-{version}-*.whl"))
    if done.returncode or not wheels:
        why = (done.stderr.strip().splitlines() or ["no wheel"])[-1]
        raise InputError(f"cannot download {distribution} {version} for Python {python}: {why}")
    return wheels[0]


def read(bridge: str, mcore: str, python: str) -> list[str]:
    """``missing`` for two releases, read from the index."""
    with tempfile.TemporaryDirectory(prefix="mcore-bridge-") as tmp:
        return missing(download("megatron-bridge", bridge, python, Path(tmp)),
                       download("megatron-core", mcore, python, Path(tmp)))
