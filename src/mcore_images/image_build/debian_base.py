"""The mirror-only flavor's base image: debootstrap from a Debian mirror, then `docker import`.

Needs no registry at all. The image is reused when it exists and was made by this recipe (the build
cache keys on its ID); `--force` rebuilds it from the mirror. debootstrap copies the build host's
/etc/resolv.conf and /etc/hostname into the tree; both are emptied before import (the container runtime
mounts its own at start), so the base layer tells nothing of the host that made it.

One local image per platform: the default platform's is the stack's base_image itself (made with plain
``debootstrap``, no --arch), another's is that tag with its architecture after it (``…:trixie-arm64``, made with
``debootstrap --arch arm64``, under QEMU on an x86_64 machine: `make emulation`), which bake hands to BuildKit as
the base of that platform (docker-bake.hcl's platform contexts).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
import urllib.parse
from pathlib import Path

from mcore_images import docker_cli, tools
from mcore_images.catalogue import platforms
from mcore_images.catalogue.platforms import Platform
from mcore_images.catalogue.stacks import Stack, get_stack
from mcore_images.command import Command, print_json
from mcore_images.errors import InputError, StepFailed
from mcore_images.launch import emulation

DEFAULT_MIRROR = "http://deb.debian.org/debian"
RECIPE_LABEL = "io.mcore-images.base-recipe"
RECIPE = "2"
"""Bumped when the tree this makes changes (2: the host's resolv.conf and hostname emptied): an image made
by another recipe is rebuilt."""
HOST_FILES = ("etc/resolv.conf", "etc/hostname")


def recipe_of(ref: str) -> str | None:
    """The recipe label of the local image ``ref`` ("" when it has none), or None when there is no such image."""
    result = docker_cli.run("image", "inspect", "--format", f'{{{{index .Config.Labels "{RECIPE_LABEL}"}}}}', ref,
                            capture_output=True, text=True, check=False)
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


def local_tag(stack: Stack, platform: Platform | None = None) -> str:
    """The local image of the stack's base for ``platform``: base_image for the default platform, base_image-<arch>
    for another (docker-bake.hcl names the same for BuildKit)."""
    if platform is None or platform == platforms.DEFAULT:
        return stack.base_image
    return f"{stack.base_image}-{platform.arch}"


def commands(stack: Stack, root: str, mirror: str, platform: Platform | None = None,
             machine: str | None = None) -> tuple[list[str], list[str]]:
    """(debootstrap, docker import) as ``ensure`` runs them for ``platform`` on ``machine`` (default: this one): the
    default platform's on a machine of that platform with neither --arch nor --platform (so its image, and every
    cache key above it, does not depend on platforms being named); any other with debootstrap's --arch and docker
    import's --platform."""
    platform = platform or platforms.DEFAULT
    foreign = platform != platforms.DEFAULT or not emulation.native(platform, machine)
    arch = [f"--arch={platform.arch}"] if foreign else []
    debootstrap = ["debootstrap", "--variant=minbase", *arch, stack.debian_suite, root, mirror]
    message = " ".join(["debootstrap", "--variant=minbase", *arch, stack.debian_suite, mirror])
    docker_import = docker_cli.argv("import", *(["--platform", platform.name] if foreign else []),
                                    "--change", "ENV LANG=C.UTF-8", "--change", 'CMD ["/bin/bash"]',
                                    "--change", f"LABEL {RECIPE_LABEL}={RECIPE}", "--message", message, "-",
                                    local_tag(stack, platform))
    return debootstrap, docker_import


MIRROR_SCHEMES = ("http", "https", "file")
"""The mirror addresses debootstrap fetches from that this tool passes it."""


def mirror_problem(mirror: str, option: str = "--mirror") -> str | None:
    """Why ``mirror`` is not a Debian mirror address debootstrap can use (None when it is one)."""
    parsed = urllib.parse.urlsplit(mirror)
    if parsed.scheme not in MIRROR_SCHEMES or not (parsed.netloc or parsed.scheme == "file") or any(
            ch.isspace() or not ch.isprintable() for ch in mirror):
        return (f"{option} {mirror!r} is not a mirror address: give an http://, https:// or file:// URL of a Debian "
                f"mirror, e.g. {DEFAULT_MIRROR}")
    if parsed.scheme == "file" and not Path(parsed.path).is_dir():
        return f"{option} {mirror!r}: {parsed.path} is not a folder; give the path of a local Debian mirror"
    return None


def ensure(stack: Stack, force: bool = False, mirror: str | None = None, platform: Platform | None = None) -> str:
    """Make the debian stack's base image for ``platform`` (default: the default platform's) exist locally; returns
    a one-line account of what happened."""
    if stack.flavor != "debian":
        raise InputError(f"stack '{stack.name}' is {stack.flavor}: only debian stacks build their base locally")
    tag = local_tag(stack, platform)
    recipe = recipe_of(tag)
    if not force and recipe == RECIPE:
        return f"base {tag} exists (use --force to rebuild it from the mirror)"
    why = f" (the local one was made by recipe {recipe or 1}, not {RECIPE})" if recipe is not None and not force else ""
    for program in ("debootstrap", "tar", docker_cli.PROGRAM):
        tools.require(program)
    if os.geteuid() != 0:
        raise InputError("debootstrap needs root; run the build as root (or with sudo)")
    if platform is not None and (problem := emulation.problem(platform)):
        raise InputError(f"debootstrap of the {platform.name} base: {problem}")
    mirror = mirror or os.environ.get("DEBIAN_MIRROR", DEFAULT_MIRROR)
    if problem := mirror_problem(mirror, "--mirror" if mirror != os.environ.get("DEBIAN_MIRROR") else "DEBIAN_MIRROR"):
        raise InputError(problem)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mcore-debian-") as root:
        debootstrap, docker_import = commands(stack, root, mirror, platform)
        if tools.run(debootstrap, check=False, stdout=subprocess.DEVNULL).returncode != 0:
            raise StepFailed(f"debootstrap of {stack.debian_suite} from {mirror} failed (its messages are above): "
                              "check the mirror and this machine's network")
        neutralize(root)
        tar = tools.popen(["tar", "-C", root, "-c", "."], stdout=subprocess.PIPE)
        tools.run(docker_import, stdin=tar.stdout, check=True, stdout=subprocess.DEVNULL)
        tar.stdout.close()
        if tar.wait() != 0:
            raise InputError(f"tar of the debootstrap tree failed; check free space in {tempfile.gettempdir()}")
    return f"base {tag} built from {mirror} in {time.monotonic() - start:.0f} s{why}"


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--stack", default="debian", help="a debian-flavor stack (default: debian)")
    p.add_argument("--force", action="store_true", help="rebuild it from the mirror even when it exists")
    p.add_argument("--mirror", default=None, help=f"Debian mirror URL (default: $DEBIAN_MIRROR or {DEFAULT_MIRROR})")
    p.add_argument("--platform", metavar="OS/ARCH", default=None,
                   help=f"the platform's base, one of the stack's (default {platforms.DEFAULT.name}; linux/arm64 runs "
                   "debootstrap --arch arm64, under QEMU on an x86_64 machine: `make emulation` first)")
    p.add_argument("--dry-run", action="store_true", help="print the debootstrap and docker import it would run")


def _run(args: argparse.Namespace) -> int:
    stack = get_stack(args.stack)
    platform = None
    if args.platform:
        if problem := platforms.problem(args.platform, "--platform"):
            raise InputError(problem)
        if args.platform not in stack.platforms:
            raise InputError(f"stack '{stack.name}' is not built for {args.platform} (its platforms: "
                             f"{', '.join(stack.platforms)}); give one of them")
        platform = platforms.BY_NAME[args.platform]
    if args.mirror and (problem := mirror_problem(args.mirror)):
        raise InputError(problem)
    if args.dry_run:
        if stack.flavor != "debian":
            raise InputError(f"stack '{stack.name}' is {stack.flavor}: only debian stacks build their base locally")
        mirror = args.mirror or os.environ.get("DEBIAN_MIRROR", DEFAULT_MIRROR)
        debootstrap, docker_import = commands(stack, "<tree>", mirror, platform)
        needs = emulation.problem(platform) if platform is not None else None
        if args.json:
            print_json({"tag": local_tag(stack, platform), "debootstrap": debootstrap, "import": docker_import,
                        "emulation": needs})
        else:
            print(f"{' '.join(debootstrap)}\ntar -C <tree> -c . | {' '.join(docker_import)}")
            if needs:
                print(f"note: {needs}")
        return 0
    print(ensure(stack, force=args.force, mirror=args.mirror, platform=platform))
    return 0


COMMANDS = (Command("base", "Build a Debian stack's base image from a Debian mirror (debootstrap).",
                    _arguments, _run, prints_data=True),)
