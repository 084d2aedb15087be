"""examples/verl-grpo/grpo.sbatch under stand-ins for Slurm and Docker on one host: what a submission reaches (the
containers' environment and command, and through ray-node.sh and grpo-megatron.sh the trainer's Hydra overrides),
and that a cancelled job leaves no container behind.

The stand-ins behave as the real tools do where it matters here: `srun` starts the command once per node with
SLURM_NODEID and SLURM_PROCID set; `docker run` records what it was given, then runs the container's command (paths
of its -v mounts mapped to the host's, its environment only what -e gives) in a session of its own, as the daemon
owns a container, and waits for it: a client killed by a signal leaves its container running, and only
`docker rm -f NAME` stops it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.unit.conftest import ROOT

SBATCH = ROOT / "examples" / "verl-grpo" / "grpo.sbatch"
VALUED = {"--name", "-e", "--env", "-v", "--volume", "--ulimit", "--gpus", "--network", "--device", "--cap-add", "-w",
          "--workdir", "--pid", "--ipc", "--shm-size", "--entrypoint", "-u", "--user", "--platform"}
"""docker run's options that take the next word as their value."""

DOCKER = '''#!{python}
import json, os, signal, subprocess, sys, uuid
from pathlib import Path

STATE = Path({state!r})
VALUED = {valued!r}


def run(args):
    options, i = [], 0
    while args[i].startswith("-"):
        if args[i] in VALUED:
            options.append([args[i], args[i + 1]])
            i += 2
        else:
            options.append([args[i], None])
            i += 1
    image, command = args[i], args[i + 1:]
    name = next((v for k, v in options if k == "--name"), None) or uuid.uuid4().hex[:12]
    env = {{"PATH": {path!r}}}
    for key, value in options:
        if key in ("-e", "--env"):
            var, eq, given = value.partition("=")
            if eq:
                env[var] = given
            elif var in os.environ:
                env[var] = os.environ[var]
    mounts = [value.split(":")[:2] for key, value in options if key in ("-v", "--volume")]

    def on_host(word):
        for host, inside in mounts:
            word = word.replace(inside, host)
        return word

    (STATE / "runs" / (name + ".json")).write_text(json.dumps(
        {{"name": name, "image": image, "options": options, "env": env, "command": command}}))
    container = subprocess.Popen([on_host(w) for w in command], env=env, start_new_session=True)
    (STATE / "containers" / name).write_text(str(container.pid))
    code = container.wait()
    (STATE / "containers" / name).unlink(missing_ok=True)
    return code if code >= 0 else 128 - code


def rm(args):
    for name in [a for a in args if not a.startswith("-")]:
        held = STATE / "containers" / name
        if not held.exists():
            print("Error response from daemon: No such container: " + name, file=sys.stderr)
            return 1
        try:
            os.killpg(int(held.read_text()), signal.SIGKILL)
        except ProcessLookupError:
            pass
        held.unlink(missing_ok=True)
    return 0


sys.exit({{"run": run, "rm": rm}}[sys.argv[1]](sys.argv[2:]))
'''

SRUN = '''#!/usr/bin/env bash
while [[ "$1" == -* ]]; do shift; done
pids=()
for ((node = 0; node < SLURM_JOB_NUM_NODES; node++)); do
  SLURM_NODEID=$node SLURM_PROCID=$node "$@" &
  pids+=($!)
done
rc=0
for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
exit $rc
'''

SCONTROL = '#!/bin/sh\nprintf "gpu-node-07\\ngpu-node-08\\n"\n'

RAY = '''#!/usr/bin/env bash
echo "$*" >> {log}/ray-$SLURM_NODEID.log
[[ " $* " == *" --block "* && -n "{hold}" ]] && exec sleep 300
exit 0
'''

DOCTOR = '''#!/usr/bin/env bash
# The image's doctor, as today's images answer: no FlashAttention for flash; fused attention and the fusion run.
[[ " $* " == *" --attention-backend flash "* ]] && exit 1
exit 0
'''

TRAINER = '''#!/usr/bin/env bash
printf '%s\\n' "$@" > {log}/trainer-$SLURM_NODEID.args
[[ -n "{hold}" ]] && exec sleep 300
exit 0
'''


@dataclass
class Host:
    env: dict[str, str]
    state: Path
    log: Path

    def runs(self) -> dict[str, dict]:
        return {p.stem: json.loads(p.read_text()) for p in (self.state / "runs").glob("*.json")}

    def containers(self) -> list[str]:
        return sorted(p.name for p in (self.state / "containers").iterdir())


def executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


def host(tmp_path: Path, hold: bool) -> Iterator[Host]:
    """Stand-ins on PATH for the batch script (srun, scontrol, docker) and inside the containers (ray, and python3 as
    verl's trainer); ``hold``: the Ray workers and the trainer run until stopped, as a real job's do."""
    state, log, outside, inside = (tmp_path / name for name in ("state", "log", "bin", "container-bin"))
    for folder in (state / "runs", state / "containers", log, outside, inside):
        folder.mkdir(parents=True)
    executable(outside / "docker", DOCKER.format(python=sys.executable, state=str(state), valued=VALUED,
                                                 path=f"{inside}:/usr/bin:/bin"))
    executable(outside / "srun", SRUN)
    executable(outside / "scontrol", SCONTROL)
    executable(inside / "ray", RAY.format(log=log, hold="hold" if hold else ""))
    executable(inside / "python3", TRAINER.format(log=log, hold="hold" if hold else ""))
    executable(inside / "mcore-images", DOCTOR)
    given = ("SLURM_", "TP", "PP", "EP", "ROLLOUT_TP", "GPUS_PER_NODE", "NNODES", "HEAD", "ATTENTION_BACKEND",
             "WGRAD_FUSION")
    env = {k: v for k, v in os.environ.items() if not k.startswith(given)}
    env |= {"PATH": f"{outside}:{env['PATH']}", "IMAGE": "registry/mcore-images:app-debian-verl",
            "MODEL": "/models/Qwen2.5-7B-Instruct", "DATA": "/data/gsm8k", "SLURM_SUBMIT_DIR": str(ROOT),
            "SLURM_JOB_ID": "4242", "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "gpu-node-[07-08]",
            "JOIN_WAIT_S": "0"}
    found = Host(env, state, log)
    yield found
    for held in (state / "containers").iterdir():  # whatever a failed test left running
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.killpg(int(held.read_text()), signal.SIGKILL)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Host]:
    yield from host(tmp_path, hold=False)


@pytest.fixture
def busy_cluster(tmp_path: Path) -> Iterator[Host]:
    yield from host(tmp_path, hold=True)


def test_the_layout_and_the_overrides_reach_the_trainer(cluster: Host) -> None:
    """Before: only HEAD, MODEL, DATA and NNODES reached the containers, and nothing given to sbatch reached the
    trainer: the job ran TP=2, PP=1 on 8 GPUs a node whatever was asked."""
    env = cluster.env | {"TP": "4", "PP": "2", "EP": "2", "ROLLOUT_TP": "4", "SLURM_GPUS_PER_NODE": "h100:4"}
    done = subprocess.run(["bash", str(SBATCH), "data.train_batch_size=32", "trainer.total_epochs=2"], env=env,
                          capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    runs = cluster.runs()
    assert sorted(runs) == ["verl-grpo-4242-0", "verl-grpo-4242-1"], sorted(runs)
    for node, run in enumerate(runs[f"verl-grpo-4242-{i}"] for i in range(2)):
        assert run["env"] | {"PATH": "-"} == {
            "PATH": "-", "SLURM_NODEID": str(node), "HEAD": "gpu-node-07", "NNODES": "2",
            "MODEL": "/models/Qwen2.5-7B-Instruct", "DATA": "/data/gsm8k", "GPUS_PER_NODE": "4", "TP": "4",
            "PP": "2", "EP": "2", "ROLLOUT_TP": "4", "JOIN_WAIT_S": "0", "NCCL_NVLS_ENABLE": "0",
            "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}, run["env"]
        assert run["command"] == ["bash", "/workspace/verl-grpo/ray-node.sh", "job", "data.train_batch_size=32",
                                  "trainer.total_epochs=2"]
        options = [tuple(o) for o in run["options"]]
        for option in (("--init", None), ("--gpus", "all"), ("--network", "host"), ("--ipc=host", None),
                       ("--device", "/dev/infiniband"), ("-v", f"{SBATCH.parent}:/workspace/verl-grpo:ro")):
            assert option in options, (option, options)
    head, worker = ((cluster.log / f"ray-{node}.log").read_text().splitlines() for node in range(2))
    assert head == ["start --head --port 6379 --include-dashboard false --disable-usage-stats"]
    assert worker == ["start --address gpu-node-07:6379 --disable-usage-stats --block"]
    assert not (cluster.log / "trainer-1.args").exists(), "a worker node ran the trainer"
    args = (cluster.log / "trainer-0.args").read_text().splitlines()
    for override in ("actor_rollout_ref.actor.megatron.tensor_model_parallel_size=4",
                     "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=2",
                     "actor_rollout_ref.actor.megatron.expert_model_parallel_size=2",
                     "actor_rollout_ref.rollout.tensor_model_parallel_size=4", "trainer.nnodes=2",
                     "trainer.n_gpus_per_node=4", "actor_rollout_ref.model.path='/models/Qwen2.5-7B-Instruct'",
                     "actor_rollout_ref.actor.megatron.override_transformer_config.attention_backend=fused"):
        assert override in args, (override, args)
    assert not [a for a in args if "gradient_accumulation_fusion" in a], args  # verl's default stands
    assert args[-2:] == ["data.train_batch_size=32", "trainer.total_epochs=2"], args  # last: they win


def test_a_cancelled_job_leaves_no_container(busy_cluster: Host) -> None:
    """scancel sends SIGTERM to the job's processes. Before: each node's `docker run` client died with it and its
    container, which the daemon owns, went on holding the GPUs (the workers slept forever)."""
    job = subprocess.Popen(["bash", str(SBATCH)], env=busy_cluster.env, start_new_session=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while len(busy_cluster.containers()) < 2:
            assert job.poll() is None, f"the job ended before its containers ran: {job.stderr.read()[-2000:]}"
            assert time.monotonic() < deadline, f"not two containers within 30 s: {busy_cluster.containers()}"
            time.sleep(0.05)
        time.sleep(1)  # the containers' commands under way (the trainer on node 0, a Ray worker on node 1)
        assert job.poll() is None, job.stderr.read()[-2000:]
        os.killpg(job.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        while busy_cluster.containers() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert busy_cluster.containers() == [], "containers left running after the job was cancelled"
        job.wait(timeout=15)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)


@pytest.mark.parametrize(("unset", "said"), [("IMAGE", "give IMAGE="), ("MODEL", "give MODEL=")])
def test_a_missing_setting_is_one_line_before_srun(cluster: Host, unset: str, said: str) -> None:
    env = {k: v for k, v in cluster.env.items() if k != unset}
    done = subprocess.run(["bash", str(SBATCH)], env=env, capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 2 and said in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert cluster.runs() == {}
