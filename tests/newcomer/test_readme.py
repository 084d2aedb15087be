"""What a newcomer meets: the wheel built from this checkout, installed with its declared dependencies alone in a
fresh venv, runs each README command that needs no build from an empty folder, as a user would copy it (the block
README.md marks with `<!-- newcomer: … -->`). Needs the package index (pip installs the wheel's dependencies)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MARK = "<!-- newcomer:"


def readme_commands() -> list[str]:
    """Each line of the bash block after README's newcomer mark."""
    text = (ROOT / "README.md").read_text()
    assert MARK in text, "README.md lost its newcomer block"
    block = re.search(r"```bash\n(.*?)```", text[text.index(MARK):], re.S)
    assert block, "no bash block after README's newcomer mark"
    return [line for line in block.group(1).splitlines() if line.strip() and not line.startswith("#")]


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding the wheel of this checkout and what the wheel declares, nothing else."""
    wheels, where = tmp_path_factory.mktemp("wheel"), tmp_path_factory.mktemp("venv") / "v"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(ROOT)],
                   check=True, capture_output=True, timeout=600)
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, timeout=300)
    wheel = next(wheels.glob("mcore_images-*.whl"))
    done = subprocess.run([str(where / "bin" / "pip"), "install", "-q", str(wheel)], capture_output=True, text=True,
                          timeout=900, env={k: v for k, v in os.environ.items() if not k.startswith("PIP_CONSTRAINT")})
    assert done.returncode == 0, done.stderr[-2000:]
    return where


@pytest.mark.parametrize("command", readme_commands())
def test_a_readme_command_runs_from_an_empty_folder(command: str, venv: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MCORE_IMAGES_ROOT", "VIRTUAL_ENV")}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", HOME=str(tmp_path))
    done = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    said = done.stdout + done.stderr
    assert done.returncode == 0 and "Traceback" not in said, f"`{command}` exited {done.returncode}:\n{said[-3000:]}"
    if "smoke" in command and "--dry-run" in command:
        assert "projected wall time on 8 ×" in said, said[-2000:]  # the estimate, from the timings the wheel ships
        assert not list(tmp_path.iterdir()), "a dry run wrote into the folder it ran in"
    if "run " in command and "--print" in command:
        assert "--gpus '\"device=0,1\"'" in said, said  # docker's own CSV parse needs the device list quoted
