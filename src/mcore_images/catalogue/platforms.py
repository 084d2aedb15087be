"""The platforms an image can be built for, in the names each consumer uses: OCI's (``linux/arm64``: bake, docker,
manifests), the machine's (``aarch64``: ``platform.machine()`` inside an image, wheel tags, uv's
``--python-platform``) and the architecture's (``arm64``: BuildKit's TARGETARCH, image configs).

GH200, GB200 and GB300 nodes are Grace (Arm) hosts: their images are ``linux/arm64``. Standard library only: the
smoke suite imports it inside images to record the platform a certificate was made on.
"""

from __future__ import annotations

import platform as _platform
from dataclasses import dataclass


@dataclass(frozen=True)
class Platform:
    """One platform: ``name`` as OCI writes it, ``machine`` as Python and wheel tags write it."""

    name: str
    machine: str

    @property
    def os(self) -> str:
        return self.name.split("/")[0]

    @property
    def arch(self) -> str:
        """The architecture as OCI image configs and BuildKit's TARGETARCH write it (``arm64``)."""
        return self.name.split("/")[1]


PLATFORMS = (Platform("linux/amd64", "x86_64"), Platform("linux/arm64", "aarch64"))
"""Every platform a stack may list in env/stacks.json, the first the one every stack had before platforms were a
setting (its locks stay at env/locks/<stack>/)."""
BY_NAME = {p.name: p for p in PLATFORMS}
BY_MACHINE = {p.machine: p for p in PLATFORMS}
BY_ARCH = {p.arch: p for p in PLATFORMS}
DEFAULT = PLATFORMS[0]
MACHINE_ALIASES = {"arm64": "aarch64", "amd64": "x86_64"}
"""What ``platform.machine()`` says on hosts that name a machine by its architecture (macOS: arm64)."""


def problem(name: str, where: str = "platform") -> str | None:
    """Why ``name`` is not a platform this project builds (None when it is), naming the ones it knows."""
    if name in BY_NAME:
        return None
    return f"{where} {name!r} is not one of {', '.join(BY_NAME)}; write one of them"


def of_machine(machine: str) -> Platform | None:
    """The platform of a machine name (``platform.machine()``, ``uname -m``), None for one this project never
    builds for."""
    return BY_MACHINE.get(MACHINE_ALIASES.get(machine, machine))


def of_arch(os: str, arch: str) -> Platform | None:
    """The platform an image config names (``os``/``architecture``), None for another."""
    found = BY_ARCH.get(arch)
    return found if found is not None and found.os == os else None


def here() -> dict[str, str]:
    """This process's platform as a certificate records it: what ``platform.machine()`` says inside the image, and
    the OCI name it is (``linux/arm64``; '' for a machine this project does not build for)."""
    machine = _platform.machine()
    found = of_machine(machine)
    return {"os": _platform.system().lower(), "machine": machine, "platform": found.name if found else ""}


def short(names: list[str] | tuple[str, ...]) -> str:
    """``amd64, arm64``: platforms as the README and report list them."""
    return ", ".join(BY_NAME[n].arch if n in BY_NAME else n for n in names)
