"""Each upstream floor is written once, in catalogue/upstream.py: the compatibility rules and the doctor's checks
read it there and write none of its numbers themselves (before: megatron-core's Python and torch floors and verl's
megatron-core floor were written in resolve/rules.py and again in the doctor's checks)."""

from __future__ import annotations

import ast
import re

from mcore_images.catalogue import upstream
from mcore_images.catalogue.versions import major_minor
from tests.unit.conftest import ROOT

READERS = ("src/mcore_images/resolve/rules.py", "src/mcore_images/doctor/checks_stack.py",
           "src/mcore_images/doctor/checks_megatron.py", "src/mcore_images/doctor/checks_bridge.py")
FLOORS = {"MCORE_NEW_FLOOR", "MCORE_PYTHON", "MCORE_TORCH", "VERL_MCORE", "VERL_ENGINE_BRIDGE", "MBRIDGE_OLD_NAMES",
          "TE_FIRST_CU13", "VERL_PYTHON_BELOW"}
"""The floors, looked for as written (and verl's as the rule names it, 0.13)."""


def written(values: set[str], text: str) -> list[str]:
    """The values that stand in ``text`` as whole version tokens."""
    return [v for v in sorted(values) if re.search(rf"(?<![\w.]){re.escape(v)}(?![\w.])", text)]


def strings(path: str) -> list[tuple[int, str]]:
    """Every string literal of a module (f-strings' literal parts too), with its line."""
    tree = ast.parse((ROOT / path).read_text())
    return [(n.lineno, n.value) for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def test_the_rules_and_the_doctor_write_no_upstream_floor_of_their_own() -> None:
    values = {getattr(upstream, name) for name in FLOORS}
    values.add(major_minor(upstream.VERL_MCORE))
    offenders = [f"{path}:{line}: {found}" for path in READERS for line, text in strings(path)
                 for found in written(values, text)]
    assert not offenders, offenders


def test_only_the_catalogue_defines_an_upstream_fact() -> None:
    """TORCH_PYPI_CUDA, TE_MIN_CUDNN, TE_MIN_TORCH and the floors are assigned in catalogue/upstream.py alone."""
    names = {name for name in vars(upstream) if name.isupper()}
    offenders = [f"{path.relative_to(ROOT)}: {target.id}" for path in sorted((ROOT / "src").rglob("*.py"))
                 if path.name != "upstream.py" for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, ast.Assign | ast.AnnAssign)
                 for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
                 if isinstance(target, ast.Name) and target.id in names]
    assert names >= {"TORCH_PYPI_CUDA", "TE_MIN_CUDNN", "TE_MIN_TORCH"} and not offenders, offenders


def test_the_check_sees_a_floor_written_again() -> None:
    assert written({"0.17", "3.12"}, "megatron-core >= 0.17 needs Python 3.12") == ["0.17", "3.12"]
    assert written({"0.17"}, "megatron-core 0.17.1 or 10.17") == []
