"""This CPU machine dressed as the lent GPU machine the scripts in .ci/gpu/ are written for, in a sandbox folder:
its ``python3.12`` (this machine's Python with a stub ``torch`` whose site holds ``nvidia/cudnn``, as the host's
does, and without this checkout's package installed), ``nvidia-smi``, and stand-ins (tests/support/stand_in.py) for
every command that needs what is not here: a GPU program, a CUDA compile, a download, an image.

A step runs as the GPU machine runs it, from the root of a copy of the repository (links to the checkout's tracked
files; the folders the scripts write, .whl/ and build/, are the sandbox's own), with no network (its own network
namespace), and with every file system but the sandbox read-only (its own mount namespace): a step that writes
anywhere else fails there, and says so ("Read-only file system"), instead of writing.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STAND_IN = Path(__file__).with_name("stand_in.py")
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

GPU_PYTHON = [
    [["-m", "mcore_images.smoke.attention.merge"], None],  # joins measured sections: pure Python, runs here
    [["-m", "mcore_images.smoke*"], "gpu"],  # the smoke's programs: a GPU and the stack's own packages
    [["-m", "pip", "wheel"], "build"],  # compiles with the host's CUDA toolchain, torch and build backends
    [["-"], "gpu"],  # a program on stdin: apex's extension, compiled and run
    [["-m", "torch.distributed.run"], "gpu"],  # torchrun: Megatron-LM's pretrain_gpt.py on the GPUs
]
"""What the GPU machine's python stands in for; the rest (pip install, -c, the scripts' own programs) runs."""
CPU_PYTHON = [
    [["-m", "pip", "download"], "network"],
    [["-m", "uv", "pip"], "network"],
]
"""What this machine's python stands in for where a step runs here: its first reach for PyPI."""
COMMANDS = {"nvidia-smi": [[[], "gpu"]], "docker": [[[], "image"]]}
"""Commands that stand in whole: the GPU's driver tool; docker, whose images are not on a fresh CI machine."""

CONFINE = r"""
set -euo pipefail
sandbox=$1 checkout=$2; shift 2
mount --bind "$sandbox" "$sandbox"
mapfile -t mounts </proc/self/mountinfo
for line in "${mounts[@]}"; do
  read -r _ _ _ _ target options _ <<<"$line"
  target=$(printf '%b' "$target")
  case "$target" in /proc|/proc/*|/sys|/sys/*|/dev|/dev/*|"$sandbox") continue ;; esac
  keep=
  for flag in nosuid nodev noexec noatime nodiratime relatime; do
    [[ ",$options," != *",$flag,"* ]] || keep+=",$flag"
  done
  mount -o "remount,bind,ro$keep" "$target" 2>/dev/null || true
done
if [[ -w / || -w /tmp || -w "$checkout" || ! -w "$sandbox" ]]; then
  echo "confine: could not make all but $sandbox read-only" >&2; exit 97
fi
cd "$sandbox/repo"
unset OLDPWD
exec "$@"
"""
"""Run as root of a private mount and network namespace: the sandbox stays writable, every other mount becomes
read-only (keeping the flags a user namespace locks), then the step runs from the sandbox's repository root."""


@dataclass
class Result:
    """How a step ended, and the command lines it reached that stood in (stand_in.py's records), in order."""

    rc: int
    stdout: str
    stderr: str
    records: list[dict[str, Any]]

    @property
    def text(self) -> str:
        return self.stdout + self.stderr


@dataclass
class Sandbox:
    """The sandbox folder, the checkout its repository root links to, and the environment every step starts with
    (HOME and TMPDIR inside it; no variable of the machine running the tests)."""

    root: Path
    checkout: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def repo(self) -> Path:
        return self.root / "repo"

    @property
    def records(self) -> Path:
        return self.root / "records.jsonl"

    def host(self, role: str) -> Path:
        """The interpreter folder of a role: ``gpu`` (the lent machine's python, torch stub) or ``cpu`` (this
        machine's python where a step runs here, its downloads standing in)."""
        return self.root / f"host-{role}"

    def run(self, script: str, args: list[str], role: str, env: dict[str, str] | None = None,
            timeout: float = 120) -> Result:
        """``bash SCRIPT ARGS`` as the machine of ``role`` runs it, confined; the commands it reached that stood in."""
        self.records.unlink(missing_ok=True)
        argv = ["unshare", "--user", "--map-root-user", "--mount", "--net", "--propagation", "private", "--",
                "bash", "-c", CONFINE, "confine", str(self.root), str(self.checkout), "bash", script, *args]
        path = f"{self.root / 'bin'}:{self.host(role) / 'bin'}:{SYSTEM_PATH}"
        done = subprocess.run(argv, env={**self.env, "PATH": path, **(env or {})}, capture_output=True, text=True,
                              timeout=timeout, check=False)
        lines = self.records.read_text().splitlines() if self.records.exists() else []
        return Result(done.returncode, done.stdout, done.stderr, [json.loads(line) for line in lines])


def make_sandbox(root: Path, checkout: Path, python: str, torch: str) -> Sandbox:
    """A sandbox under ``root`` whose GPU machine has Python ``python`` (its ``pythonX.Y`` and ``python3``) and
    torch ``torch``."""
    box = Sandbox(root, checkout)
    for name in ("bin", "home", "tmp", "repo"):
        (root / name).mkdir(parents=True)
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=checkout, capture_output=True, text=True, check=True)
    for top in sorted({name.split("/", 1)[0] for name in tracked.stdout.split("\0") if name}):
        (box.repo / top).symlink_to(checkout / top)
    for name, rules in COMMANDS.items():
        _stand_in(root / "bin" / name, root / f"{name}.rules.json", rules, box.records)
    _interpreter(box.host("gpu"), [f"python{python}", "python3"], GPU_PYTHON, box.records, torch)
    _interpreter(box.host("cpu"), ["python3"], CPU_PYTHON, box.records, None)
    box.env = {"HOME": str(root / "home"), "TMPDIR": str(root / "tmp"), "LANG": "C.UTF-8",
               "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    return box


def _stand_in(path: Path, rules_file: Path, rules: list, records: Path) -> None:
    rules_file.write_text(json.dumps(rules))
    call = " ".join(shlex.quote(str(p)) for p in (_real_python(), "-I", "-S", STAND_IN, rules_file, records))
    path.write_text(f'#!/bin/sh\nexec {call} "$0" "$@"\n')
    path.chmod(0o755)


def _interpreter(folder: Path, names: list[str], rules: list, records: Path, torch: str | None) -> None:
    """A virtual environment over this machine's Python whose interpreter is a wrapper: the stand-in decides,
    else the real interpreter runs as this folder's (``exec -a``: its pyvenv.cfg, sys.executable the wrapper, so a
    program's own ``sys.executable -m pip …`` passes the stand-in too)."""
    real = _real_python()
    site = folder / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    site.mkdir(parents=True)
    (folder / "bin").mkdir()
    (folder / "pyvenv.cfg").write_text(f"home = {Path(real).parent}\ninclude-system-site-packages = false\n"
                                       f"version = {platform.python_version()}\n")
    # This machine's packages (pip, uv, packaging, …), without their .pth files: no editable install of this
    # checkout's package leaks in (the GPU machine has none; a script must put src/ on PYTHONPATH itself).
    outer = [p for p in dict.fromkeys(sys.path) if p.endswith(("site-packages", "dist-packages")) and Path(p).is_dir()]
    (site / "this-machine.pth").write_text("".join(f"{p}\n" for p in outer))
    rules_file = folder / "rules.json"
    rules_file.write_text(json.dumps(rules))
    quoted = {k: shlex.quote(str(v)) for k, v in
              {"real": real, "stand_in": STAND_IN, "rules": rules_file, "records": records}.items()}
    wrapper = folder / "bin" / names[0]
    wrapper.write_text(
        "#!/usr/bin/env bash\n"
        f'{quoted["real"]} -I -S {quoted["stand_in"]} {quoted["rules"]} {quoted["records"]} "$0" "$@"\n'
        'rc=$?\n[[ $rc -eq 3 ]] || exit "$rc"\n'
        f'exec -a "$0" {quoted["real"]} "$@"\n')
    wrapper.chmod(0o755)
    for name in names[1:]:
        (folder / "bin" / name).symlink_to(names[0])
    if torch:
        _torch_stub(site, torch)


def _torch_stub(site: Path, version: str) -> None:
    """What the scripts ask of the host's torch: its version and where it is (``nvidia/cudnn`` beside it)."""
    (site / "torch").mkdir()
    (site / "torch" / "__init__.py").write_text(
        '"""A stand-in for the GPU machine\'s torch: the scripts ask where it is installed; what would run on the GPU '
        f'stands in before it gets here."""\n__version__ = "{version}"\n')
    info = site / f"torch-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")
    (info / "INSTALLER").write_text("pip\n")
    (info / "RECORD").write_text("")
    for folder, name in (("include", "cudnn_version.h"), ("lib", "libcudnn.so.9")):
        (site / "nvidia" / "cudnn" / folder).mkdir(parents=True)
        (site / "nvidia" / "cudnn" / folder / name).write_text("")


def _real_python() -> str:
    return os.path.realpath(getattr(sys, "_base_executable", sys.executable))
