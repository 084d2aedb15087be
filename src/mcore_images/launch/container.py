"""`docker run` the way NVIDIA's containers ask to be run, in one place.

NVIDIA's PyTorch containers ask for ``--ipc=host`` (or a large /dev/shm: NCCL and the DataLoader's
workers share memory through it), ``--ulimit memlock=-1`` (RDMA pins memory) and
``--ulimit stack=67108864``; GPUs come through ``--gpus all`` (the NVIDIA Container Toolkit). NVLink
multicast stays off unless a site turns it on (it can take a shared host's GPUs out of service).
"""

from __future__ import annotations

import functools
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from mcore_images import docker_cli, tools
from mcore_images.catalogue import images
from mcore_images.errors import InputError
from mcore_images.launch import pull
from mcore_images.progress import Progress

NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
"""NVLink multicast off for every program we start."""

RECOMMENDED_FLAGS = ("--ipc=host", "--ulimit", "stack=67108864")
MEMLOCK_FLAGS = ("--ulimit", "memlock=-1")
"""RDMA (InfiniBand, RoCE) pins memory: NCCL's IB transport needs memlock unlimited."""


def ensure_local(image: str, run: Callable[..., subprocess.CompletedProcess] = tools.run,
                 progress: Progress | None = None) -> str | None:
    """Why ``image`` cannot be run (None when it can): a reference docker cannot parse, or an image that is
    neither local nor pullable. It is pulled once here, with progress (pull.py), so the probes and the run that
    follow never pull."""
    if problem := images.reference_problem(image):
        return problem
    if docker_cli.run("image", "inspect", image, runner=run, capture_output=True, text=True,
                      check=False).returncode == 0:
        return None
    said = pull.pull(image, progress or Progress("pull"))
    if said is None:
        return None
    return (f"image {image} is not in the local Docker and could not be pulled ({said[:200]}): build it "
            "(make build), docker login to its registry, or check the name")


@functools.cache
def memlock_unlimited(image: str, run: Callable[..., subprocess.CompletedProcess] = tools.run,
                      platform: str | None = None) -> bool:
    """Whether this Docker Engine can start ``image`` with memlock unlimited. An engine whose own hard limit
    is lower (a sandboxed or rootless daemon) refuses the container; then it runs without the flag, and
    says so once (the doctor's `env.memlock` finding names the fix for multi-node runs)."""
    probe = docker_cli.run("run", "--rm", *(["--platform", platform] if platform else []), *MEMLOCK_FLAGS,
                           "--entrypoint", "true", image, runner=run, capture_output=True, text=True, check=False)
    if probe.returncode != 0 and "rlimit" in (probe.stderr or ""):
        print("[container] this Docker Engine's own memlock limit is lower than unlimited: running without "
              "--ulimit memlock=-1 (RDMA needs it; runs on one host do not)", file=sys.stderr)
        return False
    return True


TOOLKIT_GUIDE = "https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html"
"""Where NVIDIA says how to give Docker its GPU runtime (the NVIDIA Container Toolkit)."""
NO_GPU_RUNTIME = "could not select device driver"
"""How the Docker Engine refuses ``--gpus`` when no GPU runtime is installed: 'could not select device driver ""
with capabilities: [[gpu]]' (exit 125, as the container starts)."""


def _docker_said(stderr: str) -> str:
    """docker's own error line, without its 'docker: ' prefix and the help hint after it."""
    lines = [line.strip() for line in (stderr or "").splitlines() if line.strip()]
    said = next((line for line in lines if "Error response from daemon" in line or "nvidia-container-cli" in line),
                lines[0] if lines else "no output")
    return said.removeprefix("docker: ")[:300]


def gpu_problem(image: str, gpus: str, run: Callable[..., subprocess.CompletedProcess] = tools.run) -> str | None:
    """Why this Docker Engine cannot give a container of ``image`` the GPUs ``gpus`` names (docker's ``--gpus``
    value), None when it can: asked by starting ``true`` in the image with them, before anything else is made or
    run. Only a refusal of the GPUs themselves is a problem here; any other failure is the run's to report."""
    probe = docker_cli.run("run", "--rm", "--gpus", gpus, "--entrypoint", "true", image, runner=run,
                           capture_output=True, text=True, check=False)
    if probe.returncode == 0:
        return None
    stderr = probe.stderr or ""
    if NO_GPU_RUNTIME in stderr:
        return (f"this Docker Engine has no GPU runtime ({_docker_said(stderr)}): install the NVIDIA Container "
                f"Toolkit and restart Docker ({TOOLKIT_GUIDE}), or pass --cpu to run without GPUs")
    if "nvidia-container-cli" in stderr:
        return (f"docker cannot give the container --gpus {gpus} ({_docker_said(stderr)}): name GPUs that "
                "`nvidia-smi -L` lists, or pass --cpu to run without GPUs")
    return None


def mount_problem(host: Path, option: str) -> str | None:
    """Why docker's ``-v HOST:PATH`` cannot mount ``host`` (None when it can): docker splits the value at colons, so
    a folder whose path holds one would mount another path, or none."""
    resolved = str(Path(host).resolve())
    if ":" in resolved:
        return (f"{option} {host} is {resolved}, whose ':' docker's -v reads as a separator: give a folder whose path "
                "holds no ':'")
    return None


def preflight(image: str, gpus: str | None, run: Callable[..., subprocess.CompletedProcess] = tools.run,
              progress: Progress | None = None) -> None:
    """Every start of a container asks this first (`run`, and `smoke`, `bridge` and `bench --image`): docker is
    there, the image is local or pulled, and, where ``gpus`` (docker's ``--gpus`` value) names any, this engine can
    give them. InputError, one line naming the fix, before anything is made or run; a pull tells its progress."""
    if problem := ensure_local(image, run, progress):
        raise InputError(problem)
    if gpus and (problem := gpu_problem(image, gpus, run)):
        raise InputError(problem)


def run_command(image: str, command: Sequence[str], *, gpus: bool | str = True,
                mounts: Mapping[Path, str] | None = None, env: Mapping[str, str] | None = None,
                read_only: Sequence[Path] = (), extra: Sequence[str] = (), memlock: bool = True,
                platform: str | None = None) -> list[str]:
    """``docker run --rm`` of ``command`` in ``image`` with the recommended flags; ``mounts`` maps host
    folders (or files) to container paths, ``read_only`` names the host paths mounted read-only, and
    ``memlock`` adds memlock unlimited (callers pass ``memlock_unlimited(image)``). ``gpus`` is docker's
    ``--gpus`` value (True: all; False: none); ``platform`` runs an image of another platform than this machine's
    (``linux/arm64`` under QEMU)."""
    devices = "all" if gpus is True else gpus
    argv = docker_cli.argv("run", "--rm", *(["--platform", platform] if platform else []),
                           *(["--gpus", devices] if devices else []), *RECOMMENDED_FLAGS,
                           *(MEMLOCK_FLAGS if memlock else ()))
    for key, value in {**NO_MULTICAST, **(env or {})}.items():
        argv += ["-e", f"{key}={value}"]
    for host, inside in (mounts or {}).items():
        if problem := mount_problem(host, "a mounted folder"):
            raise InputError(problem)
        argv += ["-v", f"{host.resolve()}:{inside}{':ro' if host in read_only else ''}"]
    return [*argv, *extra, image, *command]
