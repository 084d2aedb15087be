"""The mirror-only flavor's base image: debootstrap from a Debian mirror, then `docker import`.

Needs no registry at all. The image is reused when it exists (the build cache keys on its ID);
`--force` rebuilds it from the mirror.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time

from mcore_images.command import Command
from mcore_images.errors import InputError
from mcore_images.stacks import Stack, get_stack

DEFAULT_MIRROR = "http://deb.debian.org/debian"


def image_exists(ref: str) -> bool:
    result = subprocess.run(["docker", "image", "inspect", ref], capture_output=True, check=False)
    return result.returncode == 0


def ensure(stack: Stack, force: bool = False, mirror: str | None = None) -> str:
    """Make the debian stack's base image exist locally; returns a one-line account of what happened."""
    if stack.flavor != "debian":
        raise InputError(f"stack '{stack.name}' is {stack.flavor}: only debian stacks build their base locally")
    if not force and image_exists(stack.base_image):
        return f"base {stack.base_image} exists (use --force to rebuild it from the mirror)"
    if not shutil.which("debootstrap"):
        raise InputError("debootstrap is not installed; `apt-get install debootstrap` (or run .ci/docker-engine.sh)")
    if os.geteuid() != 0:
        raise InputError("debootstrap needs root; run the build as root (or with sudo)")
    mirror = mirror or os.environ.get("DEBIAN_MIRROR", DEFAULT_MIRROR)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mcore-debian-") as root:
        subprocess.run(["debootstrap", "--variant=minbase", stack.debian_suite, root, mirror],
                       check=True, stdout=subprocess.DEVNULL)
        tar = subprocess.Popen(["tar", "-C", root, "-c", "."], stdout=subprocess.PIPE)
        subprocess.run(["docker", "import", "--change", "ENV LANG=C.UTF-8", "--change", 'CMD ["/bin/bash"]',
                        "--message", f"debootstrap --variant=minbase {stack.debian_suite} {mirror}",
                        "-", stack.base_image], stdin=tar.stdout, check=True, stdout=subprocess.DEVNULL)
        tar.stdout.close()
        if tar.wait() != 0:
            raise InputError(f"tar of the debootstrap tree failed; check free space in {tempfile.gettempdir()}")
    return f"base {stack.base_image} built from {mirror} in {time.monotonic() - start:.0f} s"


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--stack", default="debian", help="a debian-flavor stack (default: debian)")
    p.add_argument("--force", action="store_true", help="rebuild it from the mirror even when it exists")
    p.add_argument("--mirror", default=None, help=f"Debian mirror URL (default: $DEBIAN_MIRROR or {DEFAULT_MIRROR})")


def _run(args: argparse.Namespace) -> int:
    print(ensure(get_stack(args.stack), force=args.force, mirror=args.mirror))
    return 0


COMMANDS = (Command("base", "build a debian stack's base image from a Debian mirror (debootstrap)", _arguments, _run),)
