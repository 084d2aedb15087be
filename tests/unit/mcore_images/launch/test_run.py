"""`mcore-images run`: the flags NVIDIA's containers ask for, and the README line is what --print prints."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from mcore_images import cli
from mcore_images.launch import run
from tests.unit.conftest import ROOT


def test_print_gives_the_readme_line(capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["run", "mcore-images:runtime-debian", "--print", "--", "python", "-m", "mcore_images.smoke",
                     "--out",
                     "/out/smoke"]) == 0
    line = capsys.readouterr().out.strip()
    assert line in (ROOT / "README.md").read_text(), line
    words = shlex.split(line.replace('"$PWD/out"', "PWD/out"))
    for flag in ("--gpus", "--ipc=host", "memlock=-1", "stack=67108864", "NCCL_NVLS_ENABLE=0"):
        assert flag in words
    assert re.search(r'-v "\$PWD/out":/out', line)


def test_cpu_drops_gpus_and_no_command_is_an_interactive_shell(tmp_path: Path) -> None:
    argv = run.command_for("img", [], cpu=True, out=tmp_path, memlock=False, tty=True)
    assert "--gpus" not in argv and "memlock=-1" not in argv and "--ipc=host" in argv
    assert argv[-2:] == ["img", "bash"] and "-it" in argv and f"{tmp_path.resolve()}:/out" in argv
    scripted = run.command_for("img", ["python", "-V"], cpu=False, out=tmp_path, memlock=True, tty=True)
    assert "-it" not in scripted and scripted[-3:] == ["img", "python", "-V"] and "--gpus" in scripted


def test_an_image_that_is_not_there_is_one_line_after_one_pull(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture) -> None:
    """Before: `run no/such:image` went on to the memlock probe and docker run, and ended in docker's own error
    after two pull attempts."""
    log = tmp_path / "docker.log"
    docker = tmp_path / "docker"
    docker.write_text(f"#!/bin/sh\necho \"$@\" >> {log}\n"
                      "case \"$1\" in image) exit 1;; pull) echo 'pull access denied for no/such' >&2; exit 1;; "
                      "esac\nexit 0\n")
    docker.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{__import__('os').environ['PATH']}")
    assert cli.main(["run", "no/such:image", "--out", str(tmp_path / "out"), "--", "true"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no/such:image is not in the local Docker and could not be pulled" in err[0]
    assert "pull access denied" in err[0]
    assert log.read_text().splitlines() == ["image inspect no/such:image", "pull -q no/such:image"]
    assert not (tmp_path / "out").exists()


def test_docker_args_reach_docker_unchanged_after_the_defaults(tmp_path: Path) -> None:
    extra = tuple(run.docker_args("-v /data:/data -e 'HF_HOME=/data/hf cache' --shm-size 16g"))
    argv = run.command_for("img", ["python", "-V"], cpu=False, out=tmp_path, memlock=True, tty=False, extra=extra)
    at = argv.index("img")
    assert argv[at - len(extra):at] == list(extra) and "HF_HOME=/data/hf cache" in argv
    assert argv.index("--ipc=host") < argv.index("--shm-size"), "the user's options come after ours"


def test_gpus_are_chosen_by_flag_or_by_the_users_own_docker_option(tmp_path: Path) -> None:
    some = run.command_for("img", ["true"], cpu=False, out=tmp_path, memlock=True, tty=False, gpus="device=0,1")
    assert some[some.index("--gpus") + 1] == "device=0,1" and some.count("--gpus") == 1
    theirs = run.command_for("img", ["true"], cpu=False, out=tmp_path, memlock=True, tty=False,
                             extra=("--gpus", "device=3"))
    assert theirs.count("--gpus") == 1 and theirs[theirs.index("--gpus") + 1] == "device=3"


def test_multinode_gives_host_network_rdma_and_the_sites_interfaces(capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["run", "img", "--print", "--multinode", "--", "ray", "start", "--head"]) == 0
    words = shlex.split(capsys.readouterr().out.replace('"$PWD/out"', "PWD/out"))
    for pair in (("--network", "host"), ("--device", "/dev/infiniband"), ("--cap-add", "IPC_LOCK"),
                 ("-e", "NCCL_SOCKET_IFNAME"), ("-e", "GLOO_SOCKET_IFNAME")):
        assert any(words[i:i + 2] == list(pair) for i in range(len(words))), pair
    assert words[-4:] == ["img", "ray", "start", "--head"]


@pytest.mark.parametrize(("given", "said"), [("'open", "cannot be split"), ("image:tag", "not 'image:tag'")])
def test_bad_docker_args_are_one_line(given: str, said: str, capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["run", "img", "--print", f"--docker-args={given}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0]
