"""What a newcomer meets: the wheel built from this checkout, installed with its declared dependencies alone in a
fresh venv, runs each README command that needs no build from an empty folder, as a user would copy it (the block
README.md marks with `<!-- newcomer: … -->`). Needs the package index (pip installs the wheel's dependencies)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
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


def fresh_clone(dest: Path) -> Path:
    """This checkout's files as a fresh clone holds them (tracked, and new ones not ignored; links kept as links):
    nothing an earlier build left, such as setuptools' build/lib, which `pip wheel .` would pack again."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            check=True, capture_output=True, text=True).stdout.split("\0")
    for name in filter(None, listed):
        source, copy = ROOT / name, dest / name
        if not source.is_symlink() and not source.exists():  # deleted in the work tree, not yet in git
            continue
        copy.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            copy.symlink_to(os.readlink(source))
        else:
            shutil.copy2(source, copy)
    return dest


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of this checkout, as `pip wheel .` builds it in a fresh clone."""
    wheels, tree = tmp_path_factory.mktemp("wheel"), fresh_clone(tmp_path_factory.mktemp("clone"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(tree)],
                   check=True, capture_output=True, timeout=600)
    return next(wheels.glob("mcore_images-*.whl"))


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding the wheel of this checkout and what the wheel declares, nothing else."""
    where = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, timeout=300)
    done = subprocess.run([str(where / "bin" / "pip"), "install", "-q", str(wheel)], capture_output=True, text=True,
                          timeout=900, env={k: v for k, v in os.environ.items() if not k.startswith("PIP_CONSTRAINT")})
    assert done.returncode == 0, done.stderr[-2000:]
    return where


def test_the_wheel_installs_our_namespace_alone(wheel: Path) -> None:
    """Before: a top-level `smoke` folder (the old entry points) went into every environment the wheel was
    installed in, beside the user's own packages."""
    with zipfile.ZipFile(wheel) as archive:
        tops = {name.split("/")[0] for name in archive.namelist()}
    assert {top for top in tops if not top.endswith(".dist-info")} == {"mcore_images"}, sorted(tops)


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
    if "kube-manifest" in command:  # the Job the wheel ships, with the image given (before: FileNotFoundError)
        assert re.search(rf"^\s+image: {re.escape(command.split()[-1])}$", done.stdout, re.M), said[-2000:]
