"""deploy/ and mk/release.mk, checked without a cluster: bash -n and shellcheck on the scripts, the
scripts run against fake torchrun / srun / enroot / apptainer / docker, and a structural check of the
Kubernetes manifest (the fields batch/v1 Job requires, GPU resources, /dev/shm, NCCL env)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.host import need
from tests.unit.conftest import PYTHONPATH, ROOT

SCRIPTS = [ROOT / "deploy" / "multinode-smoke.sh", ROOT / "deploy" / "slurm" / "smoke.sbatch",
           ROOT / "deploy" / "slurm" / "docker-task.sh"]
MANIFEST = ROOT / "deploy" / "k8s" / "smoke-job.yaml"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")


def fake_bin(tmp_path: Path, *names: str, rc: int = 0) -> tuple[dict[str, str], Path]:
    """Commands on PATH that append their argv (and a few env vars) to a log, one call per line."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    log = tmp_path / "calls.log"
    for name in names:
        tool = bin_dir / name
        tool.write_text(
            "#!/usr/bin/env bash\n"
            f'printf "%s" "$(basename "$0")" >> {log}\n'
            f'for a in "$@"; do printf " %q" "$a" >> {log}; done\n'
            f'printf " ENV NNODES=%s RDZV_ENDPOINT=%s RDZV_ID=%s OUT=%s NCCL_NVLS_ENABLE=%s PYTHONPATH=%s\\n" '
            f'"$NNODES" "$RDZV_ENDPOINT" "$RDZV_ID" "$OUT" "$NCCL_NVLS_ENABLE" "$PYTHONPATH" >> {log}\n'
            f'[[ "$(basename "$0")" == scontrol ]] && printf "gpu-node-07\\ngpu-node-08\\n"\n'
            f"exit {rc}\n"
        )
        tool.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "NNODES", "RDZV_", "OUT"))}
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    return env, log


def calls(log: Path) -> list[list[str]]:
    if not log.exists():
        return []
    return [[*shlex.split(line.split(" ENV ")[0]), line.split(" ENV ")[1]] for line in log.read_text().splitlines()]


# ---------------------------------------------------------------------------------------------
# Scripts


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_bash_n(script: Path) -> None:
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_shellcheck() -> None:
    need("shellcheck")
    result = subprocess.run(["shellcheck", "--shell=bash", "--severity=style", *map(str, SCRIPTS)],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout


def run_multinode(env: dict[str, str], tmp_path: Path, *args: str, **extra: str) -> subprocess.CompletedProcess:
    env = {**env, "PYTHONPATH": PYTHONPATH, "OUT": str(tmp_path / "out"), **extra}
    return subprocess.run(["bash", str(SCRIPTS[0]), *args], capture_output=True, text=True, env=env, check=False)


def test_multinode_smoke_is_plain_torchrun_c10d(tmp_path: Path) -> None:
    env, log = fake_bin(tmp_path, "torchrun")
    result = run_multinode(env, tmp_path, "--layouts", "tp2", NNODES="2", RDZV_ENDPOINT="node0:29500")
    assert result.returncode == 0, result.stderr
    (argv,) = calls(log)
    assert argv[:-1] == ["torchrun", "--nnodes", "2", "--nproc-per-node", "gpu", "--rdzv-backend", "c10d",
                         "--rdzv-endpoint", "node0:29500", "--rdzv-id", "mcore-smoke", "--max-restarts", "0",
                         "-m", "mcore_images.smoke", "--out", str(tmp_path / "out"), "--layouts", "tp2"]
    assert "NCCL_NVLS_ENABLE=0" in argv[-1] and f"PYTHONPATH={PYTHONPATH}" in argv[-1]
    assert (tmp_path / "out").is_dir()


@pytest.mark.parametrize(("extra", "message"), [
    ({"RDZV_ENDPOINT": "node0:29500"}, "set NNODES to the number of nodes"),
    ({"NNODES": "two", "RDZV_ENDPOINT": "node0:29500"}, "set NNODES to the number of nodes"),
    ({"NNODES": "2"}, "set RDZV_ENDPOINT=HOST:PORT"),
    ({"NNODES": "2", "RDZV_ENDPOINT": "node0"}, "set RDZV_ENDPOINT=HOST:PORT"),
    ({"NNODES": "2", "RDZV_ENDPOINT": "node0:29500", "NPROC_PER_NODE": "0"}, "NPROC_PER_NODE must be"),
    ({"NNODES": "2", "RDZV_ENDPOINT": "node0:29500", "NO_SMOKE": "1"}, "python cannot import the smoke programs"),
])
def test_multinode_bad_inputs_stop_before_torchrun(extra: dict[str, str], message: str, tmp_path: Path) -> None:
    env, log = fake_bin(tmp_path, "torchrun")
    if extra.pop("NO_SMOKE", None):  # a Python without the smoke programs: one that cannot import anything
        python = tmp_path / "bin" / "python"
        python.write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'smoke'\" >&2\nexit 1\n")
        python.chmod(0o755)
    result = run_multinode(env, tmp_path, **extra)
    assert result.returncode == 2 and message in result.stderr
    assert result.stderr.count("\n") == 1 and calls(log) == []


def run_sbatch(tmp_path: Path, image: str, args: tuple[str, ...] = ("--steps", "5"),
               **extra: str) -> tuple[subprocess.CompletedProcess, list[list[str]]]:
    env, log = fake_bin(tmp_path, "srun", "scontrol")
    env |= {"IMAGE": image, "SLURM_SUBMIT_DIR": str(ROOT), "SLURM_JOB_ID": "4242", "SLURM_JOB_NUM_NODES": "2",
            "SLURM_NTASKS": "2", "SLURM_JOB_NODELIST": "gpu-node-[07-08]", "OUT": str(tmp_path / "cert")}
    env |= extra
    result = subprocess.run(["bash", str(SCRIPTS[1]), *args], capture_output=True, text=True, env=env, check=False)
    return result, calls(log)


@pytest.mark.parametrize(("image", "container_image"), [
    ("ghcr.io/acme/mcore-images:runtime-ngc", "ghcr.io#acme/mcore-images:runtime-ngc"),
    ("registry.local:5000/mcore-images:runtime-cuda", "registry.local:5000#mcore-images:runtime-cuda"),
    ("nvcr.io#nvidia/pytorch:26.06-py3", "nvcr.io#nvidia/pytorch:26.06-py3"),
    ("acme/mcore-images:runtime-ngc", "acme/mcore-images:runtime-ngc"),
    ("/shared/images/runtime-ngc.sqsh", "/shared/images/runtime-ngc.sqsh"),
])
def test_sbatch_runs_one_pyxis_task_per_node(image: str, container_image: str, tmp_path: Path) -> None:
    result, log = run_sbatch(tmp_path, image)
    assert result.returncode == 0, result.stderr
    scontrol, srun = log
    assert scontrol[:3] == ["scontrol", "show", "hostnames"]
    assert srun[:-1] == ["srun", "--kill-on-bad-exit=1", f"--container-image={container_image}",
                         f"--container-mounts={ROOT / 'deploy'}:/opt/deploy:ro,{tmp_path / 'cert'}:/cert",
                         "--container-workdir=/workspace", "bash", "/opt/deploy/multinode-smoke.sh", "--steps", "5"]
    assert "NNODES=2 RDZV_ENDPOINT=gpu-node-07:29500 RDZV_ID=4242 OUT=/cert" in srun[-1]


def test_sbatch_directives_and_missing_image(tmp_path: Path) -> None:
    text = SCRIPTS[1].read_text()
    for directive in ("--nodes=", "--ntasks-per-node=1", "--gpus-per-node=", "--time="):
        assert f"#SBATCH {directive}" in text
    result, log = run_sbatch(tmp_path, "")
    assert result.returncode == 2 and "set IMAGE" in result.stderr and log == []
    result, log = run_sbatch(tmp_path, "x", LAUNCH="enroot")
    assert result.returncode == 2 and "LAUNCH must be pyxis, docker or host" in result.stderr and log == []


def test_sbatch_docker_mode_runs_the_task_script_on_each_node(tmp_path: Path) -> None:
    result, log = run_sbatch(tmp_path, "mcore-images:runtime-debian", LAUNCH="docker", args=("--cpu",))
    assert result.returncode == 0, result.stderr
    srun = log[1]
    assert srun[:-1] == ["srun", "--kill-on-bad-exit=1", "bash", str(ROOT / "deploy" / "slurm" / "docker-task.sh"),
                         "mcore-smoke", "--pid=host", "-e", "NNODES", "-e", "RDZV_ENDPOINT", "-e", "RDZV_ID", "-e",
                         "NPROC_PER_NODE", "-e", "OUT=/cert", "-v", f"{ROOT / 'deploy'}:/opt/deploy:ro", "-v",
                         f"{tmp_path / 'cert'}:/cert", "-w", "/workspace", "--", "bash",
                         "/opt/deploy/multinode-smoke.sh", "--cpu"]
    assert "NNODES=2 RDZV_ENDPOINT=gpu-node-07:29500 RDZV_ID=4242" in srun[-1]


def test_the_docker_task_removes_its_container_when_slurm_stops_it(tmp_path: Path) -> None:
    """The task runs `docker run` in the background and traps SIGTERM: the container goes with the task."""
    env, _ = fake_bin(tmp_path, "docker")
    (tmp_path / "bin" / "docker").write_text(
        "#!/usr/bin/env bash\n"
        f'echo "$*" >> {tmp_path / "docker.log"}\n'
        '[[ "$1" == run ]] && exec sleep 30\n'
        "exit 0\n")
    env |= {"IMAGE": "img", "GPUS": "0", "DOCKER_MEMLOCK": "", "SLURM_JOB_ID": "7", "SLURM_PROCID": "1"}
    task = subprocess.Popen(["bash", str(ROOT / "deploy" / "slurm" / "docker-task.sh"), "mcore-smoke", "--pid=host",
                             "--", "bash", "/opt/deploy/multinode-smoke.sh", "--cpu"], env=env, start_new_session=True)
    deadline = time.monotonic() + 10
    while not (tmp_path / "docker.log").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    task.terminate()
    assert task.wait(timeout=10) != 0
    calls = (tmp_path / "docker.log").read_text().splitlines()
    assert calls[0].startswith("run --rm --name mcore-smoke-7-1 --network host --ipc=host")
    assert calls[0].endswith("--pid=host img bash /opt/deploy/multinode-smoke.sh --cpu")
    assert "--gpus" not in calls[0]
    assert "memlock" not in calls[0] and calls[-1] == "rm -f mcore-smoke-7-1"
    os.killpg(task.pid, 9)


@pytest.mark.parametrize(("args", "extra", "said"), [
    ([], {}, "give NAME"),
    (["x", "-e", "A"], {}, "no command after --"),
    (["x", "--", "true"], {"IMAGE": ""}, "set IMAGE"),
    (["x", "--", "true"], {"GPUS": "8"}, "GPUS must be 1"),
])
def test_the_docker_task_refuses_bad_input_before_docker(args: list[str], extra: dict[str, str], said: str,
                                                         tmp_path: Path) -> None:
    env, log = fake_bin(tmp_path, "docker")
    env |= {"IMAGE": "img", **extra}
    done = subprocess.run(["bash", str(ROOT / "deploy" / "slurm" / "docker-task.sh"), *args], env=env,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 2 and said in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert calls(log) == []


# ---------------------------------------------------------------------------------------------
# make enroot / make sif: the local image only


def make(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "-s", "-C", str(ROOT), *args], capture_output=True, text=True, env=env,
                          check=False)


@pytest.mark.parametrize(("target", "tool", "expected"), [
    ("enroot", "enroot", ["enroot", "import", "-o", "out.sqsh", "dockerd://mcore-images:runtime-debian"]),
    ("sif", "apptainer", ["apptainer", "build", "out.sqsh", "docker-daemon://mcore-images:runtime-debian"]),
])
def test_conversions_read_the_local_image(target: str, tool: str, expected: list[str], tmp_path: Path) -> None:
    env, log = fake_bin(tmp_path, "docker", tool)
    out = {"enroot": "ENROOT_OUT=out.sqsh", "sif": "SIF_OUT=out.sqsh"}[target]
    result = make(env, target, "IMAGE=mcore-images:runtime-debian", out)
    assert result.returncode == 0, result.stderr
    docker, converted = calls(log)
    assert docker[:3] == ["docker", "image", "inspect"]
    assert converted[:-1] == expected


@pytest.mark.parametrize("target", ["enroot", "sif"])
def test_conversions_refuse_an_image_that_is_not_local(target: str, tmp_path: Path) -> None:
    env, log = fake_bin(tmp_path, "enroot", "apptainer")
    (tmp_path / "bin" / "docker").write_text("#!/bin/sh\nexit 1\n")
    (tmp_path / "bin" / "docker").chmod(0o755)
    result = make(env, target, "IMAGE=nope:x")
    assert result.returncode != 0
    assert "image nope:x is not in the local Docker" in result.stderr and calls(log) == []


def test_release_targets_exist() -> None:
    for target in ("tags", "matrix", "promote", "enroot", "sif", "slurm-smoke", "kube-smoke", "actionlint"):
        result = make(dict(os.environ), "-n", target, "STACK=ngc", "CERT=c.json", "IMAGE=x@sha256:" + "0" * 64)
        assert result.returncode == 0, f"{target}: {result.stderr}"


# ---------------------------------------------------------------------------------------------
# The Kubernetes manifest


@pytest.fixture(scope="module")
def docs() -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in yaml.safe_load_all(MANIFEST.read_text())}


def container_of(job: dict[str, Any]) -> dict[str, Any]:
    (container,) = job["spec"]["template"]["spec"]["containers"]
    return container


def flags(command: list[str]) -> dict[str, str]:
    return dict(arg[2:].split("=", 1) for arg in command if arg.startswith("--") and "=" in arg)


def test_job_has_the_fields_batch_v1_requires(docs: dict[str, dict[str, Any]]) -> None:
    job = docs["Job"]
    assert job["apiVersion"] == "batch/v1" and DNS_LABEL.match(job["metadata"]["name"])
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] in ("Never", "OnFailure")  # a Job's pods may not use Always
    assert job["spec"]["backoffLimit"] == 0  # a failed smoke is a verdict, not something to retry
    for container in pod["containers"]:
        assert DNS_LABEL.match(container["name"]) and isinstance(container["image"], str) and container["image"]
        assert all(isinstance(e["name"], str) and isinstance(e["value"], str) for e in container["env"]), \
            "env values must be strings"
        for port in container.get("ports", []):
            assert isinstance(port["containerPort"], int) and 0 < port["containerPort"] < 65536
        mounts = {m["name"] for m in container["volumeMounts"]}
        assert mounts <= {v["name"] for v in pod["volumes"]}, "every volumeMount names a volume"
        for section in ("requests", "limits"):
            for key, value in container["resources"][section].items():
                assert QUANTITY.match(str(value)), f"{section}.{key}={value!r} is not a quantity"


def test_gpus_shared_memory_and_nccl(docs: dict[str, dict[str, Any]]) -> None:
    job = docs["Job"]
    container, pod = container_of(job), job["spec"]["template"]["spec"]
    resources = container["resources"]
    gpus = resources["limits"]["nvidia.com/gpu"]
    assert isinstance(gpus, int) and gpus == resources["requests"]["nvidia.com/gpu"]  # extended: requests == limits
    assert flags(container["command"])["nproc-per-node"] == str(gpus)
    dshm = next(v for v in pod["volumes"] if v["name"] == "dshm")
    assert dshm["emptyDir"]["medium"] == "Memory"
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    env = {e["name"]: e["value"] for e in container["env"]}
    exported = re.search(r"^export (NCCL_NVLS_ENABLE=.*)$", SCRIPTS[0].read_text(), re.M).group(1).split()
    for pair in exported:  # the same NVLink-multicast switches as deploy/multinode-smoke.sh
        key, value = pair.split("=")
        assert env[key] == value
    assert env["NCCL_NVLS_ENABLE"] == "0"


def test_rendezvous_matches_the_script_and_the_service(docs: dict[str, dict[str, Any]]) -> None:
    job, service = docs["Job"], docs["Service"]
    container, pod = container_of(job), job["spec"]["template"]["spec"]
    command = container["command"]
    assert command[0] == "torchrun" and command[-3:] == ["-m", "mcore_images.smoke", "--out=/cert"]
    opts = flags(command)
    assert opts["rdzv-backend"] == "c10d" and opts["max-restarts"] == "0"
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == int(opts["nnodes"])
    host, port = opts["rdzv-endpoint"].split(":")
    assert host == f"{job['metadata']['name']}-0.{pod['subdomain']}"  # pod 0 of the Indexed Job
    assert service["spec"]["clusterIP"] == "None" and service["metadata"]["name"] == pod["subdomain"]
    assert service["spec"]["selector"] == {"job-name": job["metadata"]["name"]}
    assert int(port) == service["spec"]["ports"][0]["port"] == container["ports"][0]["containerPort"]
    script = SCRIPTS[0].read_text()
    for flag in ("--rdzv-backend c10d", "--max-restarts 0", "-m mcore_images.smoke"):
        assert flag in script


def test_pods_run_as_non_root(docs: dict[str, dict[str, Any]]) -> None:
    pod = docs["Job"]["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] > 0
    assert container_of(docs["Job"])["securityContext"]["allowPrivilegeEscalation"] is False


def test_kube_smoke_applies_the_manifest_with_the_image_given() -> None:
    result = make(dict(os.environ), "-s", "kube-manifest", "IMAGE=registry.local:5000/mcore-images@sha256:" + "1" * 64)
    assert result.returncode == 0, result.stderr
    job = next(d for d in yaml.safe_load_all(result.stdout) if d["kind"] == "Job")
    assert container_of(job)["image"] == "registry.local:5000/mcore-images@sha256:" + "1" * 64


GRPO_SBATCH = ROOT / "examples" / "verl-grpo" / "grpo.sbatch"


@pytest.mark.parametrize("submitted_from", ["root", "example"])
def test_the_grpo_sbatch_finds_its_folder_from_where_it_was_submitted(submitted_from: str, tmp_path: Path) -> None:
    """Slurm runs a copy of the batch script from its spool folder ($0 is that copy): the example's folder is
    found from $SLURM_SUBMIT_DIR (before: $0's folder, the spool, was mounted as the example)."""
    env, log = fake_bin(tmp_path, "srun", "scontrol")
    spool = tmp_path / "spool" / "job4242"
    spool.mkdir(parents=True)
    shutil.copy(GRPO_SBATCH, spool / "slurm_script")
    folder = ROOT if submitted_from == "root" else GRPO_SBATCH.parent
    env |= {"IMAGE": "registry/mcore-images:app-debian-verl", "MODEL": "/models/m", "DATA": "/data/d",
            "SLURM_SUBMIT_DIR": str(folder), "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "gpu-node-[07-08]"}
    result = subprocess.run(["bash", str(spool / "slurm_script")], capture_output=True, text=True, env=env,
                            check=False, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    srun = next(argv for argv in calls(log) if argv[0] == "srun")
    assert f"{GRPO_SBATCH.parent}:/workspace/verl-grpo:ro" in srun, srun


def test_the_grpo_sbatch_names_the_fix_when_it_cannot_find_its_folder(tmp_path: Path) -> None:
    env, log = fake_bin(tmp_path, "srun", "scontrol")
    env |= {"IMAGE": "x", "MODEL": "/m", "DATA": "/d", "SLURM_SUBMIT_DIR": str(tmp_path), "SLURM_JOB_NUM_NODES": "1",
            "SLURM_JOB_NODELIST": "n1"}
    result = subprocess.run(["bash", str(GRPO_SBATCH)], capture_output=True, text=True, env=env, check=False)
    assert result.returncode == 2 and "set EXAMPLE_DIR" in result.stderr and result.stderr.count("\n") == 1
    assert not [argv for argv in calls(log) if argv[0] == "srun"]


def test_the_train_gpt_slurm_line_reads_the_head_node_on_the_host_and_names_an_image_pyxis_can_pull(
        tmp_path: Path) -> None:
    """Before: `$(scontrol …)` sat inside a single-quoted `bash -c` and ran in the container (no Slurm there), and
    `--container-image train-gpt` named a local Docker tag, which pyxis cannot use."""
    text = (ROOT / "examples" / "train-gpt" / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", text[text.index("<!-- slurm-line:"):], re.S)
    assert block, "examples/train-gpt/README.md lost its Slurm block"
    env, log = fake_bin(tmp_path, "srun", "scontrol")
    env |= {"SLURM_JOB_NODELIST": "gpu-node-[07-08]", "SLURM_NNODES": "2", "SLURM_JOB_ID": "4242"}
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", block.group(1)], capture_output=True, text=True, env=env,
                          check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    by_tool = {argv[0]: argv for argv in calls(log)}
    assert by_tool["scontrol"][1:3] == ["show", "hostnames"]  # on the host, before srun
    srun = by_tool["srun"]
    image = srun[srun.index("--container-image") + 1]
    assert image.endswith(".sqsh") or "#" in image, image  # a squashfs file or registry#repo:tag
    torchrun = srun[srun.index("torchrun"):]
    assert torchrun[torchrun.index("--rdzv-endpoint") + 1] == "gpu-node-07:29500", torchrun
    assert torchrun[torchrun.index("--nnodes") + 1] == "2" and "bash" not in srun
