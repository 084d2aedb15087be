"""`mcore-images run IMAGE` on an image that must be pulled, from the real local registry: the pull's progress is a
line per step on stderr (what a CI log and a terminal without docker's bars show).

The image is made for the test with oras (three layers of fresh random bytes, an OCI image config naming their
diff_ids), so no copy of its layers is in this Docker Engine's content store and every layer is downloaded. It has
no program to run: the container that `run` starts afterwards exits 127, which is not what this test is about."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.registry.conftest import HOST
from tests.unit.conftest import PYTHONPATH, ROOT

LAYER_MEDIA = "application/vnd.oci.image.layer.v1.tar+gzip"
CONFIG_MEDIA = "application/vnd.oci.image.config.v1+json"


def layer(folder: Path, name: str) -> tuple[Path, str]:
    """A gzipped tar holding one file of random bytes, and its diff_id (the uncompressed tar's digest)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        body = os.urandom(2_000_000)
        info = tarfile.TarInfo(f"{name}/blob")
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
    path = folder / f"{name}.tar.gz"
    path.write_bytes(gzip.compress(raw.getvalue(), mtime=0))
    return path, f"sha256:{hashlib.sha256(raw.getvalue()).hexdigest()}"


@pytest.fixture
def remote_only(tmp_path: Path) -> Iterator[str]:
    ref = f"{HOST}/test-{uuid.uuid4().hex[:10]}/mcore-images:pull-progress"
    made = [layer(tmp_path, f"l{i}") for i in range(3)]
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"architecture": "amd64", "os": "linux", "config": {"Cmd": ["true"]},
                                  "rootfs": {"type": "layers", "diff_ids": [diff for _, diff in made]}}))
    subprocess.run(["oras", "push", "--plain-http", "--config", f"{config.name}:{CONFIG_MEDIA}", ref,
                    *(f"{path.name}:{LAYER_MEDIA}" for path, _ in made)], cwd=tmp_path, check=True,
                   capture_output=True)
    assert subprocess.run(["docker", "image", "inspect", ref], capture_output=True).returncode != 0
    yield ref
    subprocess.run(["docker", "image", "rm", "-f", ref], capture_output=True, check=False)


def test_run_says_each_step_of_the_pull(remote_only: str, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "mcore_images", "run", remote_only, "--cpu", "--out",
                           str(tmp_path / "out"), "--", "true"], capture_output=True, text=True, check=False,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": PYTHONPATH}, timeout=300)
    told = [re.sub(r"^\[run\] \d+:\d\d ", "", line) for line in done.stderr.splitlines()
            if re.match(r"^\[run\] \d+:\d\d ", line)]
    assert told[0] == f"pulling {remote_only}: not in the local Docker", done.stderr
    assert f"pulling {remote_only}: 3/3 layers downloaded" in told and told[-1] == f"pulled {remote_only}", told
    counts = [int(m[1]) for line in told if (m := re.search(r": (\d)/3 layers downloaded", line))]
    assert counts == sorted(counts) and len(set(counts)) >= 2, told  # the count moved, a line each time
    assert subprocess.run(["docker", "image", "inspect", remote_only], capture_output=True).returncode == 0
    assert "[run] docker run --rm" in done.stderr  # then the container was started
