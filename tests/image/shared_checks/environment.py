"""The environment a runtime image sets: each requirement with the reason for its value."""

from __future__ import annotations

from collections.abc import Mapping

# Requirements, not versions: each line says why the variable must be set this way in a runtime image.
REQUIRED_ENV: dict[str, str] = {
    "CUDA_DEVICE_MAX_CONNECTIONS": "1",  # Megatron's TP/CP comm-compute overlap relies on one work queue
    "NCCL_NVLS_ENABLE": "0",  # NVLink multicast off unless a site opts in
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",  # the same for torch's symmetric memory
    "NVSHMEM_DISABLE_NVLS": "1",  # and for NVSHMEM (TE / DeepEP paths)
    "MCORE_IMAGES_ROOT": "/opt/mcore-images",  # where the tooling reads the image's pins and bench baselines
    # a job's `pip install` cannot move a certified component (the file holds their pins)
    "PIP_CONSTRAINT": "/opt/mcore-images/constraints.txt",
}
TOOLING_DATA = "/opt/mcore-images"


def env_problems(env: Mapping[str, str], stack_label: str | None, where: str) -> list[str]:
    problems = [
        f"{where}: {k}={env.get(k, '<unset>')}, required {v}" for k, v in REQUIRED_ENV.items() if env.get(k) != v
    ]
    if TOOLING_DATA in (env.get("PYTHONPATH") or "").split(":"):
        problems.append(
            f"{where}: PYTHONPATH={env['PYTHONPATH']} names {TOOLING_DATA}: the tooling lives in the image's "
            "venv; a global path would show its packages to every Python of a user's job"
        )
    if env.get("MCORE_IMAGES_STACK") != stack_label:
        problems.append(
            f"{where}: MCORE_IMAGES_STACK={env.get('MCORE_IMAGES_STACK', '<unset>')}, "
            f"the stack label says {stack_label}"
        )
    return problems
