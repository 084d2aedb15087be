"""`mcore-images run IMAGE` on an image that must be pulled tells the pull's progress, a line per step, with a fake
`docker` at the process boundary that prints what docker 26 prints without a terminal (the transcripts below were
read from `docker pull` against the local registry; tests/registry/test_run_pull.py pulls from the real one)."""

from __future__ import annotations

import io
import os
import re
import sys
from pathlib import Path

import pytest

from mcore_images import cli, progress
from mcore_images.launch import container, pull

IMAGE = "registry.example:5000/team/mcore-images:app-debian-verl"
CONTAINERD = """app-debian-verl: Pulling from team/mcore-images
ec10eb8c7972: Pulling fs layer
d9a758d82e9b: Pulling fs layer
86c0027f1a8e: Pulling fs layer
ec10eb8c7972: Download complete
SLEEP
d9a758d82e9b: Download complete
86c0027f1a8e: Download complete
Digest: sha256:4ea83c24a6d94a150bd7b190417116926a527b023869490a85f0ea631abf1160
Status: Downloaded newer image for registry.example:5000/team/mcore-images:app-debian-verl
registry.example:5000/team/mcore-images:app-debian-verl
"""
"""With the containerd image store (this project's Docker Engine): a layer's last state is "Download complete"."""
CLASSIC = """app-debian-verl: Pulling from team/mcore-images
0417c38214a5: Already exists
4a9f082c8a2e: Pulling fs layer
4a9f082c8a2e: Verifying Checksum
4a9f082c8a2e: Download complete
4a9f082c8a2e: Pull complete
Digest: sha256:ef7206d0b8169efc3604c55237c2f4f0f68fa227d35871dc99d8c2694b740a18
Status: Downloaded newer image for registry.example:5000/team/mcore-images:app-debian-verl
"""
"""The classic store extracts each layer after its download: "Pull complete"."""


def fake_docker(folder: Path, transcript: str, pull_code: int = 0) -> Path:
    """A `docker` that has no image until it is pulled, pulls by printing ``transcript`` (SLEEP: a quiet stretch of
    0.6 s) and runs containers that exit 0; every call is logged."""
    log = folder / "docker.log"
    body = "".join("sleep 0.6\n" if line == "SLEEP" else f"echo '{line}'\n" for line in transcript.splitlines())
    script = folder / "docker"
    script.write_text(f"""#!/bin/sh
echo "$*" >> {log}
case "$1 $2" in
  "image inspect") [ -e {folder}/pulled ] || exit 1; exit 0 ;;
  "pull "*) {body.strip()}
     touch {folder}/pulled; exit {pull_code} ;;
esac
exit 0
""")
    script.chmod(0o755)
    return log


@pytest.fixture
def on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(progress, "QUIET_S", 0.25)
    return tmp_path


def steps(err: str) -> list[str]:
    """The run's progress lines, the time since its start taken out."""
    return [re.sub(r"^\[run\] \d+:\d\d ", "", line) for line in err.splitlines() if line.startswith("[run] ")
            and not line.startswith("[run] docker ")]


def test_run_tells_each_step_of_the_pull_before_it_starts_the_container(on_path: Path,
                                                                        capsys: pytest.CaptureFixture) -> None:
    """Before: `docker pull -q`, silent for the minutes a 6 GB image takes."""
    log = fake_docker(on_path, CONTAINERD)
    assert cli.main(["run", IMAGE, "--cpu", "--out", str(on_path / "out"), "--", "true"]) == 0
    told = steps(capsys.readouterr().err)
    assert told[:2] == [f"pulling {IMAGE}: not in the local Docker", f"pulling {IMAGE}: 1/3 layers downloaded"]
    quiet = [line for line in told if line.endswith("(still pulling)")]
    assert quiet and quiet[0] == f"pulling {IMAGE}: 1/3 layers downloaded (still pulling)"
    after = told[max(i for i, line in enumerate(told) if line in quiet) + 1:]
    assert after == [f"pulling {IMAGE}: 2/3 layers downloaded", f"pulling {IMAGE}: 3/3 layers downloaded",
                     f"pulled {IMAGE}"]
    calls = log.read_text().splitlines()
    assert calls[:2] == [f"image inspect {IMAGE}", f"pull {IMAGE}"] and calls[-1].endswith(f"{IMAGE} true")


def test_the_classic_store_counts_extracted_layers(on_path: Path, capsys: pytest.CaptureFixture) -> None:
    fake_docker(on_path, CLASSIC)
    assert container_pulled(capsys) == [
        f"pulling {IMAGE}: not in the local Docker", f"pulling {IMAGE}: 1/1 layers downloaded",
        f"pulling {IMAGE}: 2/2 layers downloaded",
        f"pulling {IMAGE}: 2/2 layers downloaded, 1 extracted", f"pulled {IMAGE}"]


def container_pulled(capsys: pytest.CaptureFixture) -> list[str]:
    assert container.ensure_local(IMAGE, progress=progress.Progress("run")) is None
    return steps(capsys.readouterr().err)


def test_on_a_terminal_docker_draws_its_own_bars_on_stderr() -> None:
    calls: list[tuple[list[str], dict]] = []

    def docker(argv: list[str], **kwargs: object) -> object:
        calls.append((argv, kwargs))
        return type("Done", (), {"returncode": 0, "stderr": ""})()

    out = io.StringIO()
    assert pull.pull(IMAGE, progress.Progress("run", out), terminal=True, docker=docker) is None
    (argv, kwargs), = calls
    assert argv == ["docker", "pull", IMAGE] and kwargs["stdout"] is sys.stderr
    assert re.fullmatch(rf"\[run\] \d:\d\d pulled {re.escape(IMAGE)}\n", out.getvalue())
