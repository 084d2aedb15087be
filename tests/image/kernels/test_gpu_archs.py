"""The GPU architectures the image declares are carried by its kernel binaries (shared_checks/archs.py says which
rule applies to which binary, and why)."""

from __future__ import annotations

from typing import Any

from tests.image.shared_checks import archs
from tests.image.utils import docker

from mcore_images.catalogue.stacks import Stack


def test_kernels_carry_the_declared_archs(image: docker.ImageInfo, stack: Stack, host: Any) -> None:
    declared, where = archs.declared(image, stack)
    binaries = archs.scan(host.run)
    problems = archs.problems(binaries, declared, archs.compiled_here(stack))
    assert not problems, f"declared {';'.join(declared)} ({where}):\n" + "\n".join(problems)

