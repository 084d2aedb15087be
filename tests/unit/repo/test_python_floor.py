"""The tooling (doctor, smoke, bridge, bench) runs under every stack's Python: the oldest a stack pins is
the floor pyproject declares, and vermin finds nothing in the package that needs a newer one."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

from packaging.specifiers import SpecifierSet

from mcore_images.catalogue.stacks import load_stacks
from tests.support.host import need

ROOT = Path(__file__).resolve().parents[3]


def floor() -> str:
    return min((s.python for s in load_stacks().values()), key=lambda v: tuple(map(int, v.split("."))))


def test_pyproject_admits_every_stacks_python() -> None:
    declared = SpecifierSet(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"])
    for stack in load_stacks().values():
        assert declared.contains(f"{stack.python}.0"), f"{stack.name}: Python {stack.python} outside {declared}"


def test_nothing_in_the_tooling_needs_a_newer_python_than_the_oldest_stack() -> None:
    need("vermin")
    vermin = shutil.which("vermin") or "vermin"
    done = subprocess.run([vermin, "--no-tips", "--violations", f"-t={floor()}-", "src/mcore_images"],
                          cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_doctors_page_states_the_floor_pyproject_declares() -> None:
    """Before: docs/doctor.md said Python >= 3.11 (and exit 2 below it) while pyproject and the doctor take 3.10."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert declared == f">={floor()}", declared
    page = (ROOT / "docs" / "doctor.md").read_text()
    stated = re.findall(r"Python (?:≥|>=|<) (\d+\.\d+)(?![\d.]| when)", page)
    assert stated and set(stated) == {floor()}, stated
    guard = (ROOT / "src" / "mcore_images" / "doctor" / "__main__.py").read_text()
    assert f"sys.version_info < ({floor().replace('.', ', ')})" in guard
