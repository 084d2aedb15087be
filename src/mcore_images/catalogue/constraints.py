"""The pip constraints a runtime image ships (``PIP_CONSTRAINT``): a job's ``pip install`` on the image may
add packages but cannot move what was certified together.

Kept: every installed distribution of the catalogue's components (torch, Transformer Engine, apex,
megatron-core, mbridge, Megatron-Bridge; in an app image verl and its rollout engine, which is built against
torch too: the app layer writes the file again), and the libraries torch and TE are built against
(the ``nvidia-*`` CUDA wheels and triton): a different cuDNN or NCCL under the same torch is the ABI break
this project exists to prevent. Everything else stays free for the job to choose.
"""

from __future__ import annotations

import sys
from importlib import metadata

from packaging.utils import canonicalize_name

from mcore_images.catalogue import components

BOUND_TO_TORCH = ("triton", "pytorch-triton")
"""Built against one torch release, like the nvidia-* wheels."""


def held_names() -> set[str]:
    """Canonical names of the catalogue's distributions."""
    return {canonicalize_name(name) for comp in components.CATALOGUE for name in comp.distributions}


def constraints(installed: dict[str, str]) -> list[str]:
    """``name==version`` lines for the held distributions among ``installed`` (name -> version), sorted."""
    held = held_names()
    keep = {canonicalize_name(n): v for n, v in installed.items()
            if canonicalize_name(n) in held or canonicalize_name(n).startswith("nvidia-")
            or canonicalize_name(n) in BOUND_TO_TORCH}
    return [f"{name}=={version}" for name, version in sorted(keep.items())]


def main() -> int:
    """Print the constraints of this Python's environment (the Dockerfile writes them into the image)."""
    installed = {dist.metadata["Name"]: dist.version for dist in metadata.distributions()}
    print(f"# Certified together with this image; written by `python -m {__spec__.name}`")
    print("\n".join(constraints(installed)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
