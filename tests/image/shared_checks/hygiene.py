"""What a published image must not keep: build caches, source and build trees, secrets and credentials, the
builder-only packages, a PATH entry others can write; and its size budget. The run-time toolchain (a compiler,
make, the Python headers, ninja) is not on the list: Triton, torch.compile and torch.utils.cpp_extension compile
at run time."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from mcore_images.catalogue.components import LAYERS
from mcore_images.catalogue.stacks import Stack
from tests.image.shared_checks import installed
from tests.image.utils.credentials import CREDENTIAL_FILES, PRIVATE_KEY
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
    from mcore_images.resolve import lock_files

    locks = lock_files.lock_dir(stack, repo, machine)

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
    containerd's image store) is within io.mcore-images.size-budget-gb (docs/tags.md)."""
    budget = image.label("size-budget-gb")
    if budget is None:
        return ["label io.mcore-images.size-budget-gb is missing"]
    if image.content_size > float(budget) * GB:
        return [
            f"image content is {image.content_size / GB:.3f} GB (compressed; {image.size / GB:.2f} GB unpacked), "
            f"over its budget of {budget} GB (io.mcore-images.size-budget-gb; 1 GB = 1e9 bytes)"
        ]
    return []


FIND_CREDENTIALS = (
    "find / -xdev -type f \\( \\( "
    + " -o ".join(f"-path '*/{name}'" for name in CREDENTIAL_FILES)
    + f" \\) -print , -exec grep -IlF -e '{PRIVATE_KEY}' {{}} + \\) 2>/dev/null"
)
"""One walk of the whole file system (GNU find's `,` runs both tests on every file): a tool's credential file
wherever it lies, and every text file holding a PEM private key."""


def credential_kind(path: str) -> str:
    return "credential file" if any(path.endswith(f"/{name}") for name in CREDENTIAL_FILES) else "PEM private key"


def credential_findings(run: Any, ignore: set[str] | frozenset[str] = frozenset()) -> dict[str, str | None]:
    """Every credential file and PEM private key in the image, with who ships it unchanged ("pip <distribution>",
    "dpkg") or None; less the paths in ``ignore`` (what the tests wrote in their container)."""
    found = installed.owners(run, FIND_CREDENTIALS)
    return {path: owner for path, owner in found.items() if path not in ignore}


def credential_problems(run: Any, ignore: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """Credentials a published image must not carry, anywhere in its file system: a tool's credential file
    (CREDENTIAL_FILES) or a file holding a PEM private key.

    Exempt is what a package ships byte for byte: a file an OS package's list (/var/lib/dpkg/info/*.list) names
    with the md5 dpkg recorded, or one a pip distribution's RECORD lists with its hash. Those bytes are public,
    the same for everyone who installs that package from Debian's archive or the index, so they cannot be a
    secret of this build; a library's test key is such a file. In the debian-verl app image the exempt files
    are four sources of google-auth and cryptography that name the PEM markers in code (`_PKCS1_MARKER =
    ("-----BEGIN RSA PRIVATE KEY-----", …)`), none a key; the runtime image has no finding at all. Not exempt: a
    package's file edited after install (its hash no longer the record's), or any file beside them that no record
    names, wherever it lies. (Compilers are run-time tools of this stack, not on this list: Triton and
    torch.compile build code at run time.)"""
    return unshipped_credentials(credential_findings(run, ignore))


def unshipped_credentials(findings: Mapping[str, str | None]) -> list[str]:
    """The findings no package ships unchanged: the problems."""
    return [f"{credential_kind(path)} in the image: {path}" for path, owner in findings.items() if owner is None]


PATH_SHELLS = {
    "docker exec": "printf 'PATH=%s\\n' \"$PATH\"",
    "bash -i": "command -v bash >/dev/null && bash -ic 'printf \"PATH=%s\\n\" \"$PATH\"' 2>/dev/null",
    "bash -l": "command -v bash >/dev/null && bash -lc 'printf \"PATH=%s\\n\" \"$PATH\"' 2>/dev/null",
}
"""How processes in the container get their PATH: as docker starts them (the config's Env), and as the shells a
user opens set it (the image's default command is bash; a login shell reads /etc/profile and profile.d)."""


def path_sources(env: Mapping[str, str], run: Any) -> dict[str, str]:
    """The PATH of the image config (`docker image inspect` Env) and of each of PATH_SHELLS in the container."""
    sources = {"image config": env["PATH"]} if "PATH" in env else {}
    for name, command in PATH_SHELLS.items():
        lines = [line for line in iter_lines(run(command).stdout) if line.startswith("PATH=")]
        if lines:
            sources[name] = lines[-1].removeprefix("PATH=")
    return sources


PATH_MODES = (
    'for e in "$@"; do p="$e"; while [ ! -e "$p" ]; do p="$(dirname "$p")"; done; '
    'printf \'%s\\t%s\\t%s\\n\' "$e" "$p" "$(stat -L -c %a "$p")"; done'
)
"""Each entry, the nearest path of it that exists (itself, or the ancestor it would be made in), and that
path's mode (symlinks followed: /bin -> usr/bin is /usr/bin's)."""


def path_problems(sources: Mapping[str, str], run: Any) -> list[str]:
    """No PATH entry that anyone but its owner can write into, sticky or not (a sticky /tmp still lets anyone add
    a `python` that shadows the venv's), no entry that does not exist where anyone but the owner could make it,
    and no relative or empty entry (the working directory, whatever it is)."""
    where: dict[str, list[str]] = {}
    for source, value in sources.items():
        for entry in value.split(":"):
            where.setdefault(entry, []).append(source)
    problems = [
        f"PATH entry '{entry}' ({', '.join(seen)}) is relative: it names whatever folder a process runs in"
        for entry, seen in where.items()
        if not entry.startswith("/")
    ]
    absolute = [entry for entry in where if entry.startswith("/")]
    if not absolute:
        return problems
    out = run("sh -c %s sh" + " %s" * len(absolute), PATH_MODES, *absolute).stdout
    modes = {entry: (existing, mode) for entry, existing, mode in (line.split("\t") for line in iter_lines(out))}
    for entry in absolute:
        seen = ", ".join(where[entry])
        if entry not in modes or not modes[entry][1].isdigit():
            problems.append(f"PATH entry {entry} ({seen}): its mode could not be read")
            continue
        existing, mode = modes[entry]
        if not int(mode, 8) & 0o022:
            continue
        if existing == entry:
            problems.append(f"PATH entry {entry} ({seen}) is writable by group or others (mode {mode}): "
                            "a program put there shadows the image's own")
        else:
            problems.append(f"PATH entry {entry} ({seen}) does not exist, and {existing}, where it would be made, "
                            f"is writable by group or others (mode {mode})")
    return problems


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
