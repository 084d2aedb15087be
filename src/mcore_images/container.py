"""`docker run` the way NVIDIA's containers ask to be run, in one place.

NVIDIA's PyTorch containers ask for ``--ipc=host`` (or a large /dev/shm: NCCL and the DataLoader's
workers share memory through it), ``--ulimit memlock=-1`` (RDMA pins memory) and
``--ulimit stack=67108864``; GPUs come through ``--gpus all`` (the NVIDIA Container Toolkit). NVLink
multicast stays off unless a site turns it on (it can take a shared host's GPUs out of service).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
"""NVLink multicast off for every program we start."""

RECOMMENDED_FLAGS = ("--ipc=host", "--ulimit", "memlock=-1", "--ulimit", "stack=67108864")


def run_command(image: str, command: Sequence[str], *, gpus: bool = True,
                mounts: Mapping[Path, str] | None = None, env: Mapping[str, str] | None = None,
                read_only: Sequence[Path] = (), extra: Sequence[str] = ()) -> list[str]:
    """``docker run --rm`` of ``command`` in ``image`` with the recommended flags; ``mounts`` maps host
    folders (or files) to container paths, ``read_only`` names the host paths mounted read-only."""
    argv = ["docker", "run", "--rm", *(["--gpus", "all"] if gpus else []), *RECOMMENDED_FLAGS]
    for key, value in {**NO_MULTICAST, **(env or {})}.items():
        argv += ["-e", f"{key}={value}"]
    for host, inside in (mounts or {}).items():
        argv += ["-v", f"{host.resolve()}:{inside}{':ro' if host in read_only else ''}"]
    return [*argv, *extra, image, *command]
