"""Every external program through one door (tools.py): a missing one is one line naming its install, exit 2, never a
FileNotFoundError traceback; and no module but tools.py looks a program up or starts one by its name."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mcore_images import tools
from mcore_images.errors import InputError
from tests.unit.conftest import PYTHONPATH, ROOT

SRC = ROOT / "src" / "mcore_images"


def test_a_missing_program_is_one_line_naming_its_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tools.shutil, "which", lambda name, *a, **k: None)
    for name, how in tools.INSTALL.items():
        with pytest.raises(InputError) as missing:
            tools.run([name, "--version"], check=False)
        assert str(missing.value) == f"{name} is not installed or not on PATH: {how}"
    with pytest.raises(KeyError, match=r"add it to tools\.INSTALL"):
        tools.require("made-up-tool")
    assert tools.require(sys.executable) == sys.executable  # a program named by its path is taken as it is


def without_docker(tmp_path: Path) -> dict[str, str]:
    """This machine's environment with a PATH that has no docker (nor anything else: python runs by its path)."""
    empty = tmp_path / "empty-bin"
    empty.mkdir(exist_ok=True)
    return {**os.environ, "PATH": str(empty), "PYTHONPATH": PYTHONPATH}


@pytest.mark.parametrize("argv", [
    ["run", "mcore-images:runtime-debian", "--cpu"],
    ["base", "--stack", "debian"],
    ["reproduce", "mcore-images:runtime-debian"],
    ["smoke", "--image", "mcore-images:runtime-debian", "--out", "{tmp}/out"],
    ["certify", "mcore-images:runtime-debian", "--out", "{tmp}/cert"],
    ["build", "--stack", "debian"],
])
def test_docker_missing_is_one_line_and_exit_2(tmp_path: Path, argv: list[str]) -> None:
    """Before: `run`, `base` and `reproduce` without docker on PATH ended in a FileNotFoundError traceback."""
    done = subprocess.run([sys.executable, "-m", "mcore_images", *(a.format(tmp=tmp_path) for a in argv)],
                          env=without_docker(tmp_path), cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [f"error: docker is not installed or not on PATH: "
                                                f"{tools.INSTALL['docker']}"], done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty-bin"]  # nothing made


def started_by_name(path: Path) -> list[str]:
    """Where ``path`` starts one of tools.INSTALL's programs, or looks one up, other than through tools.py."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = ast.unparse(node.func)
        first = node.args[0]
        named = (first.elts[0] if isinstance(first, ast.List | ast.Tuple) and first.elts else first)
        program = named.value if isinstance(named, ast.Constant) and isinstance(named.value, str) else None
        if program in tools.INSTALL and (func.startswith("subprocess.") or func in ("shutil.which", "which")):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {func}({program!r} …)")
    return found


def test_no_module_but_tools_starts_a_program_by_its_name() -> None:
    offenders = [hit for path in sorted(SRC.rglob("*.py")) if path.name != "tools.py" for hit in started_by_name(path)]
    assert not offenders, "start them through mcore_images.tools.run / popen: " + "; ".join(offenders)
