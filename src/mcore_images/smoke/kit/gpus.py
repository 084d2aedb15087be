"""How many GPUs this machine shows the programs: the smoke plans its layouts from it, the verl step refuses to start
without one. Imports no torch itself (it asks nvidia-smi, or torch in a child process)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys


def count_gpus() -> int:
    """Visible GPUs: CUDA_VISIBLE_DEVICES when set, else nvidia-smi (fast), else torch; 0 when none."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
            if out.returncode == 0:
                return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
        except (OSError, subprocess.SubprocessError):
            pass
    if importlib.util.find_spec("torch") is not None:
        code = "import torch; print(torch.cuda.device_count())"
        try:
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
            if out.returncode == 0 and out.stdout.strip().isdigit():
                return int(out.stdout.strip())
        except subprocess.TimeoutExpired:
            pass
    return 0
