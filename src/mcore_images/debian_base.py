"""The mirror-only flavor's base image: debootstrap from a Debian mirror, then `docker import`.

Needs no registry at all. The image is reused when it exists and was made by this recipe (the build
cache keys on its ID); `--force` rebuilds it from the mirror. debootstrap copies the build host's
/etc/resolv.conf and /etc/hostname into the tree; both are emptied before import (the container runtime
mounts its own at start), so the base layer tells nothing of the host that made it.
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
RECIPE_LABEL = "io.mcore-images.base-recipe"
RECIPE = "2"
"""Bumped when the tree this makes changes (2: the host's resolv.conf and hostname emptied): an image made
by another recipe is rebuilt."""
HOST_FILES = ("etc/resolv.conf", "etc/hostname")


def recipe_of(ref: str) -> str | None:
    """The recipe label of the local image ``ref`` ("" when it has none), or None when there is no such image."""
    result = subprocess.run(["docker", "image", "inspect", "--format", f'{{{{index .Config.Labels "{RECIPE_LABEL}"}}}}',
                             ref], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        return None
    value = result.stdout.strip()
    return "" if value == "<no value>" else value


def neutralize(root: str) -> None:
    """Empty the files that carry the build host's identity (its resolvers, its name)."""
    for name in HOST_FILES:
        path = os.path.join(root, name)
        if os.path.islink(path):
            os.unlink(path)
        with open(path, "w", encoding="utf-8"):
            pass


def ensure(stack: Stack, force: bool = False, mirror: str | None = None) -> str:
    """Make the debian stack's base image exist locally; returns a one-line account of what happened."""
    if stack.flavor != "debian":
        raise InputError(f"stack '{stack.name}' is {stack.flavor}: only debian stacks build their base locally")
    recipe = recipe_of(stack.base_image)
    if not force and recipe == RECIPE:
        return f"base {stack.base_image} exists (use --force to rebuild it from the mirror)"
    why = f" (the local one was made by recipe {recipe or 1}, not {RECIPE})" if recipe is not None and not force else ""
    if not shutil.which("debootstrap"):
        raise InputError("debootstrap is not installed; `apt-get install debootstrap` (or run .ci/docker-engine.sh)")
    if os.geteuid() != 0:
        raise InputError("debootstrap needs root; run the build as root (or with sudo)")
    mirror = mirror or os.environ.get("DEBIAN_MIRROR", DEFAULT_MIRROR)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mcore-debian-") as root:
        subprocess.run(["debootstrap", "--variant=minbase", stack.debian_suite, root, mirror],
                       check=True, stdout=subprocess.DEVNULL)
        neutralize(root)
        tar = subprocess.Popen(["tar", "-C", root, "-c", "."], stdout=subprocess.PIPE)
        subprocess.run(["docker", "import", "--change", "ENV LANG=C.UTF-8", "--change", 'CMD ["/bin/bash"]',
                        "--change", f"LABEL {RECIPE_LABEL}={RECIPE}",
                        "--message", f"debootstrap --variant=minbase {stack.debian_suite} {mirror}",
                        "-", stack.base_image], stdin=tar.stdout, check=True, stdout=subprocess.DEVNULL)
        tar.stdout.close()
        if tar.wait() != 0:
            raise InputError(f"tar of the debootstrap tree failed; check free space in {tempfile.gettempdir()}")
    return f"base {stack.base_image} built from {mirror} in {time.monotonic() - start:.0f} s{why}"


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--stack", default="debian", help="a debian-flavor stack (default: debian)")
    p.add_argument("--force", action="store_true", help="rebuild it from the mirror even when it exists")
    p.add_argument("--mirror", default=None, help=f"Debian mirror URL (default: $DEBIAN_MIRROR or {DEFAULT_MIRROR})")


def _run(args: argparse.Namespace) -> int:
    print(ensure(get_stack(args.stack), force=args.force, mirror=args.mirror))
    return 0


COMMANDS = (Command("base", "build a debian stack's base image from a Debian mirror (debootstrap)", _arguments, _run),)
