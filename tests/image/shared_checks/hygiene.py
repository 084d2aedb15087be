"""What a published image must not keep: build caches, source and build trees, secrets and credentials, the
builder-only packages; and its size budget. The run-time toolchain (a compiler, make, the Python headers,
ninja) is not on the list: Triton, torch.compile and torch.utils.cpp_extension compile at run time."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from mcore_images.components import LAYERS
from mcore_images.stacks import Stack
from tests.image.utils.credentials import CREDENTIAL_FILES, HOME_ROOTS, PRIVATE_KEY
from tests.image.utils.docker import GB, ImageInfo, iter_lines
from tests.image.utils.probing import normalize

REPO = Path(__file__).resolve().parents[3]


# Folders a build uses and a published image must not keep anything in (a BuildKit mount point
# may stay behind as an empty folder: only files count).
BUILD_LEFTOVERS = (
    "/root/.cache/pip",
    "/root/.cache/uv",
    "/root/.ccache",
    "/root/.cache/ccache",
    "/wheels",
    "/src/apex",
    "/run/secrets",
    "/tmp",
    "/var/tmp",
)


# One walk of the filesystem finds build trees and VCS folders.
FIND_TREES = (
    "find / -xdev \\( -name .git -o -name '*.egg-info' -o -path '*/build/temp.*' "
    "-o -path '*/build/lib.*' -o -name CMakeFiles -o -name CMakeCache.txt "
    "-o -name 'build.ninja' -o -name '.ninja_log' \\) -print -prune 2>/dev/null || true"
)


PACKAGE_DIRS = re.compile(r"/(site|dist)-packages/")


def leftover_problems(run: Any, ignore: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """Files left in a build's cache, wheel or scratch folders."""
    dirs = " ".join(BUILD_LEFTOVERS)
    out = run(
        f'for d in {dirs}; do [ -d "$d" ] && find "$d" -mindepth 1 \\! -type d -print; done '
        "2>/dev/null | head -n 200 || true"
    ).stdout
    return [f"build leftover: {line}" for line in iter_lines(out) if line not in ignore][:50]


def tree_problems(paths: Iterable[str], ignore: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """`.git` folders, *.egg-info and setuptools/CMake/ninja build trees outside installed packages."""
    problems = []
    for path in paths:
        if PACKAGE_DIRS.search(path) or path in ignore:
            continue  # inside installed packages: their metadata (egg-info of a legacy install), not a build
        problems.append(f"build tree or VCS folder: {path}")
    return problems


def builder_only_packages(stack: Stack, repo: Path = REPO, machine: str = "x86_64") -> set[str]:
    """Packages the builder stage's lock adds that no published layer's lock lists (nvcc, cccl, ninja…), on the
    image's machine."""
    from mcore_images import lock

    locks = lock.lock_dir(stack, repo, machine)

    def names(layer: str) -> set[str]:
        path = locks / f"{layer}.txt"
        if not path.is_file():
            return set()
        return {normalize(m.group(1)) for m in re.finditer(r"^([A-Za-z0-9._-]+)==", path.read_text(), re.M)}

    return names("builder") - set().union(*(names(layer) for layer in LAYERS))


def toolchain_problems(facts: Mapping[str, Any], run: Any, builder_only: set[str]) -> list[str]:
    """No compiler toolchain from the builder stage: no pip nvcc, no builder-only distribution."""
    problems = [
        f"builder package installed: {name} {facts['dists'][name]['version']}"
        for name in sorted(builder_only)
        if name in facts["dists"]
    ]
    prefix = facts["python"]["prefix"]
    out = run(
        f"find {prefix} /usr/local/lib /usr/lib -path '*-packages/nvidia/*/bin/nvcc' 2>/dev/null | head -n 5 || true"
    ).stdout
    problems += [f"pip nvcc from the builder: {line}" for line in out.splitlines() if line.strip()]
    return problems


def size_problems(image: ImageInfo) -> list[str]:
    """The content size (compressed layers: what a pull downloads, `docker image inspect` Size with
    containerd's image store) is within io.mcore-images.size-budget-gb (README: Tags)."""
    budget = image.label("size-budget-gb")
    if budget is None:
        return ["label io.mcore-images.size-budget-gb is missing"]
    if image.content_size > float(budget) * GB:
        return [
            f"image content is {image.content_size / GB:.3f} GB (compressed; {image.size / GB:.2f} GB unpacked), "
            f"over its budget of {budget} GB (io.mcore-images.size-budget-gb; 1 GB = 1e9 bytes)"
        ]
    return []


HOMES = " ".join(HOME_ROOTS)


def credential_problems(run: Any) -> list[str]:
    """Credentials a published image must not carry: tools' credential files under the home folders, and
    any file there or in /etc holding a PEM private key. (Compilers are run-time tools of this stack:
    Triton and torch.compile build code at run time, so they are not on this list.)"""
    names = " -o ".join(f"-path '*/{name}'" for name in CREDENTIAL_FILES)
    out = run(
        f"for h in {HOMES}; do [ -d \"$h\" ] && find \"$h\" -xdev \\( {names} \\) -type f -print; done 2>/dev/null; "
        f"grep -rIl --exclude-dir=proc -e '{PRIVATE_KEY}' {HOMES} /etc 2>/dev/null | head -n 20; true"
    ).stdout
    return [f"credential in the image: {line}" for line in dict.fromkeys(iter_lines(out))]


PERMISSIONS = (
    # One walk of the filesystem; GNU find's `,` evaluates every test for every file.
    "find / -xdev \\( -path /proc -o -path /sys -o -path /dev \\) -prune -o \\( "
    "\\( -perm -0002 ! -type l ! \\( -type d -perm -1000 \\) -printf 'world-writable: %p\\n' \\) , "
    "\\( \\( -nouser -o -nogroup \\) -printf 'owned by no user or group of the image (uid %U, gid %G): %p\\n' \\) , "
    "\\( -type f -perm /6000 -printf 'setuid %p\\n' \\) \\) 2>/dev/null "
    "| while IFS= read -r line; do case \"$line\" in "
    # A merged-/usr system (bookworm) lists a package's /bin/mount under that name while find sees /usr/bin/mount:
    # the file is the OS package's when dpkg knows it under either spelling.
    "'setuid '*) f=\"${line#setuid }\"; alt=\"${f#/usr}\"; [ \"$alt\" = \"$f\" ] && alt=\"/usr$f\"; "
    "{ dpkg -S \"$f\" || dpkg -S \"$alt\"; } >/dev/null 2>&1 "
    "|| echo \"setuid/setgid and in no OS package: $f\" ;; "
    "*) echo \"$line\" ;; esac; done | head -n 60; true"
)
"""The file-system checks container benchmarks apply (CIS Docker 4.8, Dockle's CIS-DI-0008): world-writable
files and folders (folders with the sticky bit, such as /tmp, excepted), files of a user or group the image
does not have (an unpacked tarball's builder uid), and setuid/setgid programs that no OS package installed."""


def permission_problems(run: Any, ignore: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """PERMISSIONS' findings, less those about paths in ``ignore`` (what the tests themselves added to the
    container: a Ray session's world-writable sockets under /tmp are the run's, not the image's)."""
    found = dict.fromkeys(iter_lines(run(PERMISSIONS).stdout))
    return [line for line in found if line.split(": ", 1)[-1] not in ignore]
