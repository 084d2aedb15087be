"""`mcore-images run`: the flags NVIDIA's containers ask for, and the README line is what --print prints."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest

from mcore_images import cli
from mcore_images.launch import run
from tests.unit.conftest import ROOT


def readme_run() -> tuple[list[str], str]:
    """README's "Run" sample (the `mcore-images run` line, its comment dropped) and the `docker run` line it shows."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("\n## Run\n"):]
    sample = re.search(r"```bash\n(mcore-images run [^\n]*)\n```", section)
    printed = re.search(r"```bash\n(docker run [^\n]*)\n```", section[section.index("<!-- run-print:"):])
    assert sample and printed, "README.md's Run section lost its sample or its printed line"
    return shlex.split(sample.group(1), comments=True), printed.group(1)


def test_readmes_run_sample_prints_the_line_readme_shows(capsys: pytest.CaptureFixture) -> None:
    """Before: the sample ran runtime-ngc on GPUs 0,1 and the line shown was of another image with all GPUs."""
    sample, shown = readme_run()
    at = sample.index("--") if "--" in sample else len(sample)
    assert cli.main([*sample[1:at], "--print", *sample[at:]]) == 0
    line = capsys.readouterr().out.strip()
    assert line == shown
    words = shlex.split(line.replace('"$PWD/out"', "PWD/out"))
    for flag in ("--gpus", "--ipc=host", "memlock=-1", "stack=67108864", "NCCL_NVLS_ENABLE=0"):
        assert flag in words
    assert re.search(r'-v "\$PWD/out":/out', line)


@pytest.mark.parametrize(("command", "added"), [
    (["python", "-m", "mcore_images.smoke"], ["--out", "/out/smoke"]),
    (["python3", "-m", "mcore_images.smoke.bench", "--configs", "dense-1b"], ["--out", "/out/bench"]),
    (["python", "-m", "mcore_images.smoke.bridge", "--cpu"], ["--out", "/out/bridge"]),
    (["python", "-m", "smoke.bridge", "--cpu"], []),  # a name no program has
    (["python", "-m", "mcore_images.smoke", "--out", "/data/cert"], []),
    (["python", "-m", "mcore_images.smoke", "--out=/data/cert"], []),
    (["python", "-m", "mcore_images.smoke", "--dry-run"], []),
    (["torchrun", "--nproc-per-node", "8", "train.py"], []),
])
def test_the_programs_report_lands_in_the_host_folder(command: list[str], added: list[str]) -> None:
    """Before: without an --out the smoke wrote its certificate to a temporary folder of the --rm container."""
    assert run.with_program_out(command) == [*command, *added]


@pytest.mark.parametrize(("given", "docker_gets"), [("1", "1"), ("3", "3"), ("all", "all"), ("0,1", '"device=0,1"'),
                                                     ("device=1", '"device=1"')])
def test_a_number_is_a_count_of_gpus(given: str, docker_gets: str, capsys: pytest.CaptureFixture) -> None:
    """Before: `--gpus 1` was one GPU (a count) while `--gpus 0` was GPU 0 (a device)."""
    assert cli.main(["run", "img", "--gpus", given, "--print", "--", "true"]) == 0
    words = shlex.split(capsys.readouterr().out.replace('"$PWD/out"', "PWD/out"))
    assert words[words.index("--gpus") + 1] == docker_gets


def test_gpus_zero_is_refused_in_one_line(capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["run", "img", "--gpus", "0", "--print", "--", "true"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "asks for no GPU: pass --cpu" in err[0] and "device=0" in err[0], err


NO_RUNTIME = ('docker: Error response from daemon: could not select device driver "" with capabilities: [[gpu]]\n'
              "\nRun 'docker run --help' for more information\n")
"""What Docker Engine 26 answered here, on a host without the NVIDIA Container Toolkit, to `docker run --gpus all`."""


@pytest.fixture
def docker_without_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A docker that has the image and runs containers, but refuses --gpus as an engine without the NVIDIA runtime
    does; each call is logged."""
    log = tmp_path / "docker.log"
    (tmp_path / "no-runtime.txt").write_text(NO_RUNTIME)
    docker = tmp_path / "docker"
    docker.write_text(f'#!/bin/sh\necho "$@" >> {log}\n'
                      f'case " $* " in *" --gpus "*) cat {tmp_path / "no-runtime.txt"} >&2; exit 125;; esac\nexit 0\n')
    docker.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    return log


def test_no_gpu_runtime_is_one_line_before_anything_is_made(docker_without_gpus: Path, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture) -> None:
    """Before: Docker's own error and exit 125, after ./out was made."""
    out = tmp_path / "out"
    assert cli.main(["run", "img", "--out", str(out), "--", "python", "-m", "mcore_images.smoke"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith('error: this Docker Engine has no GPU runtime (Error response from daemon: could not '
                             'select device driver "" with capabilities: [[gpu]]): install the NVIDIA Container '
                             "Toolkit and restart Docker"), err[0]
    assert err[0].endswith("or pass --cpu to run without GPUs"), err[0]
    assert not out.exists()
    started = [c for c in docker_without_gpus.read_text().splitlines() if c.startswith("run ")]
    assert started == ["run --rm --gpus all --entrypoint true img"], started  # the probe alone


def test_cpu_needs_no_gpu_runtime(docker_without_gpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert cli.main(["run", "img", "--cpu", "--out", str(out), "--", "python", "-m", "mcore_images.smoke"]) == 0
    assert out.is_dir()
    ran = docker_without_gpus.read_text().splitlines()[-1]
    assert "--gpus" not in ran and ran.endswith("img python -m mcore_images.smoke --out /out/smoke"), ran


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
    assert log.read_text().splitlines() == ["image inspect no/such:image", "pull no/such:image"]
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
