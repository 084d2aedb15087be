"""Every seed comes from the base seed through seed_for: tensors by name, data by a named purpose."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from mcore_images.smoke.kit import seeds
from tests.unit.conftest import ROOT

SMOKE = ROOT / "src" / "mcore_images" / "smoke"

SEEDED = ("manual_seed", "model_parallel_cuda_manual_seed")
"""Calls whose first argument is a seed."""
SEED_KEYWORDS = ("seed", "base_seed")


def test_each_kind_of_data_has_its_own_seeds_per_stream() -> None:
    drawn = {(p, s): seeds.data_seed(p, 1234, stream=s) for p in seeds.DATA for s in range(4)}
    assert len(set(drawn.values())) == len(drawn)
    assert seeds.data_seed("bench-tokens", 1234, 2) == seeds.seed_for("data/bench-tokens/2", 1234)
    assert seeds.data_seed("smoke-batch", 1234) != seeds.data_seed("smoke-batch", 1235)
    assert all(0 <= s < 2**63 for s in drawn.values())


def test_an_unnamed_purpose_is_refused() -> None:
    with pytest.raises(KeyError, match=r"add it to smoke\.kit\.seeds\.DATA"):
        seeds.data_seed("batch", 1234)


@pytest.mark.parametrize(("seed", "problem"), [
    (0, None), (seeds.SEEDS - 1, None), (-1, "--seed -1 is out of range: give 0 … 4294967295"),
    (seeds.SEEDS, "--seed 4294967296 is out of range: give 0 … 4294967295"),
])
def test_base_seed_range(seed: int, problem: str | None) -> None:
    assert seeds.seed_problem(seed) == problem


def _seed_arguments(path: Path) -> list[tuple[int, ast.expr]]:
    """(line, expression) of every seed handed to a generator or to megatron in ``path``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if name in SEEDED and node.args:
            out.append((node.lineno, node.args[0]))
        out += [(node.lineno, k.value) for k in node.keywords if k.arg in SEED_KEYWORDS]
    return out


def test_no_seed_is_a_literal_or_arithmetic() -> None:
    """A seed is the base seed, a seed given as an argument, or seed_for/data_seed of a name: never ``1234``,
    ``seed + 1`` or ``7 + rank``. Before: the test read the repository's top-level smoke/ (three entry points) and
    passed on nothing."""
    offenders, seen = [], 0
    for path in sorted(SMOKE.rglob("*.py")):
        for line, expr in _seed_arguments(path):
            seen += 1
            if any(isinstance(n, ast.BinOp | ast.Constant) for n in ast.walk(expr)) and not (
                    isinstance(expr, ast.Call) and getattr(expr.func, "attr", getattr(expr.func, "id", ""))
                    in ("seed_for", "data_seed")):
                offenders.append(f"{path.relative_to(ROOT)}:{line}: {ast.unparse(expr)}")
    assert seen and not offenders, offenders


def test_every_command_line_defaults_to_the_one_base_seed() -> None:
    for program in ("src/mcore_images/smoke/args.py", "src/mcore_images/smoke/bench/cli.py",
                    "src/mcore_images/smoke/bridge/cli.py"):
        calls = [n for n in ast.walk(ast.parse((ROOT / program).read_text())) if isinstance(n, ast.Call)
                 and n.args and isinstance(n.args[0], ast.Constant) and n.args[0].value == "--seed"]
        assert [ast.unparse(k.value) for c in calls for k in c.keywords if k.arg == "default"] == [
            "seeds.DEFAULT_SEED"], program
