"""`python -m mcore_images.smoke --checkpoint-dir DIR` in the image: each round trip saves into a new folder of its own
inside DIR and removes only that, so someone's checkpoints there survive; a read-only DIR is refused in
one line before torchrun starts; a full one is named in the certificate's one error line.

Each test starts its own container (`docker run`), as they need a bind mount or a small tmpfs at DIR.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path
from typing import Any

from tests.image.utils.docker import container_options, remove_container
from tests.support.sentinels import files_under, plant

SMOKE = ("python", "-m", "mcore_images.smoke", "--cpu", "--nproc", "1", "--layouts", "dp1", "--models", "dense",
         "--spec",
         "local", "--steps", "2", "--no-attention", "--checkpoint-dir", "/ck")
"""The shortest run with a round trip: dp1 → dp1 (dense), saved in the background (the attention check, which the
runtime tests judge, left out)."""
SENTINELS = {"run-42/iter_0000100/__0_0.distcp": b"weights", "run-42/latest": b"iter_0000100", "notes.txt": b"keep"}
"""Someone else's files in the folder the smoke is given."""


def run(image: Any, script: str, *docker: str) -> subprocess.CompletedProcess[str]:
    """``script`` (sh) in a new container of the image; offline, as the image tests run it. A run past its time
    limit has its container removed: killing `docker run` alone leaves the container running (sh, its first
    process, ignores the SIGTERM docker forwards) with the cores and the tmpfs, until the smoke's own watchdog."""
    name, options = container_options(image.ref)
    cmd = ["docker", "run", "--rm", *options, *docker, "--entrypoint", "sh", image.ref, "-c", script]
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=900)
    except subprocess.TimeoutExpired:
        remove_container(name)
        raise


def test_the_round_trips_leave_what_was_in_the_folder_alone(image: Any, tmp_path: Path) -> None:
    ck, out = tmp_path / "ck", tmp_path / "out"
    plant(ck, SENTINELS)
    out.mkdir()
    done = run(image, shlex.join([*SMOKE, "--out", "/out"]), "-v", f"{ck}:/ck", "-v", f"{out}:/out")
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    cert = json.loads((out / "certificate.json").read_text())
    assert cert["checkpoint"]["verdict"] == "passed" and cert["checkpoint"]["folder"] == "/ck"
    assert files_under(ck) == SENTINELS  # every file kept, and nothing of the smoke's left
    assert sorted(p.name for p in ck.iterdir()) == ["notes.txt", "run-42"]


def test_a_read_only_folder_is_refused_before_torchrun_starts(image: Any, tmp_path: Path) -> None:
    plant(tmp_path, SENTINELS)
    done = run(image, shlex.join(SMOKE), "-v", f"{tmp_path}:/ck:ro")
    assert done.returncode == 2, (done.stdout + done.stderr)[-3000:]
    assert done.stderr.strip() == ("smoke: could not run: --checkpoint-dir /ck: cannot write in /ck (Read-only file "
                                   "system): pass a folder this user can write")
    assert done.stdout == ""  # no plan printed: nothing started
    assert files_under(tmp_path) == SENTINELS


def test_a_full_folder_is_named_in_one_line_and_the_round_trips_folder_is_removed(image: Any,
                                                                                  tmp_path: Path) -> None:
    """A 256 KiB tmpfs: the sentinel fits, the dp1 checkpoint (about 1 MB with Adam's moments) does not."""
    script = (f"echo keep > /ck/notes.txt; {shlex.join([*SMOKE, '--out', '/out'])}; rc=$?; "
              "ls -A /ck > /out/ck.txt; exit $rc")
    done = run(image, script, "--tmpfs", "/ck:size=256k", "-v", f"{tmp_path}:/out")
    assert done.returncode == 1, (done.stdout + done.stderr)[-3000:]
    error = json.loads((tmp_path / "certificate.json").read_text())["error"]
    print(f"certificate error: {error}")
    assert error.startswith("rank 0 failed in checkpoint dp1→dp1/dense/local: no space left on /ck: the checkpoint "
                            "of dp1→dp1/dense/local did not fit (")
    assert error.endswith(" MiB free); give --checkpoint-dir a folder with room")
    assert (tmp_path / "ck.txt").read_text().split() == ["notes.txt"]
