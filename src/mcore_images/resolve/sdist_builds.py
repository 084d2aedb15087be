"""Locked releases that an image builds from their sdist, and whether that build reaches for the network.

A lock pins a release; where the release has no wheel for the stack's Python and platform, pip builds it from its
sdist when the image (or the GPU host's replica, which has no network) installs the lock. A build script that
downloads something (fast-hadamard-transform 1.1.0's setup.py fetches a prebuilt wheel from GitHub) fails offline,
and installs an artifact no lock hashes where it succeeds. So `lock`, which resolves online, reads each such sdist
(never builds or runs it) and scans the scripts a build runs, refusing a release whose build reaches for the
network, unless the stack leaves it out of its locks (``left_out``).

What is read: setup.py, the modules of an in-tree build backend (pyproject.toml's ``backend-path``), hatch's build
hook (hatch_build.py) and the CMake files a scikit-build or CMake build runs. What counts as reaching: importing
or calling a network client (urllib.request, http.client, requests, httpx, urllib3, socket, …; urlretrieve,
urlopen), a command run through a process call or written as a list (curl, wget, git clone/fetch/pull/submodule,
pip download/install), and CMake's FetchContent, ExternalProject and file(DOWNLOAD). A package's own runtime code
is not read: a download utility (wget 3.2) builds offline.
"""

from __future__ import annotations

import ast
import io
import re
import shlex
import tarfile
import zipfile
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from packaging import tags
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion

from mcore_images.catalogue.stacks import Stack, canonical
from mcore_images.errors import InputError
from mcore_images.resolve import pypi
from mcore_images.resolve.layer_requirements import platform

NETWORK_MODULES = frozenset({"urllib.request", "urllib2", "urllib3", "http.client", "httplib", "requests", "httpx",
                             "aiohttp", "pycurl", "socket", "ftplib", "wget"})
"""Modules whose import in a build script means it talks to the network."""
NETWORK_CALLS = frozenset({"urlretrieve", "urlopen", "clone_from"})
"""Functions a build script calls to download (``clone_from``: GitPython's ``Repo.clone_from``)."""
NETWORK_COMMANDS = (("curl",), ("wget",), ("git", "clone"), ("git", "fetch"), ("git", "pull"), ("git", "submodule"),
                    ("pip", "download"), ("pip", "install"))
"""Commands that download, as a build script runs them (with at least one more argument)."""
PROCESS_CALLS = frozenset({"system", "popen", "run", "call", "check_call", "check_output", "Popen", "getoutput",
                           "getstatusoutput", "spawn", "spawnv", "spawnvp", "execv", "execvp"})
"""Functions that run a command (os, subprocess, distutils' spawn)."""
CMAKE_DOWNLOADS = re.compile(r"\b(FetchContent_Declare|FetchContent_Populate|ExternalProject_Add|"
                             r"file\s*\(\s*DOWNLOAD)\b", re.IGNORECASE)
"""CMake commands that download at configure or build time."""
_TEXT_REACH = re.compile(r"\b(urlretrieve|urlopen|urllib2|urllib\.request|http\.client|import requests|"
                         r"git clone|git submodule|curl -|wget http)\b")
"""The same, for a Python 2 script that does not parse as Python 3 (read as text)."""


@dataclass(frozen=True)
class Reach:
    """One place a build script reaches for the network."""

    file: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line} {self.what}"


def _call_name(node: ast.expr) -> str:
    """``a.b.c`` for a called expression (the last parts that are names)."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.insert(0, node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.insert(0, node.id)
    return ".".join(parts)


def _command_words(node: ast.expr) -> list[str]:
    """The words of a command given as a string, an f-string's leading text or a list of strings (other items
    skipped: ``[sys.executable, "-m", "pip", "install", …]`` reads ``pip install …``)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        text = node.value
    elif isinstance(node, ast.JoinedStr):
        text = "".join(v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else " {} "
                       for v in node.values)  # an interpolated value is a word of the command
    elif isinstance(node, (ast.List, ast.Tuple)):
        words = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        return words[1:] if words[:1] == ["-m"] else words
    else:
        return []
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


def _downloading_command(words: list[str]) -> str | None:
    """The downloading command these words run, if any: a one-word command (curl, wget) followed by an option, a URL
    or an interpolated value (a list of keywords ``['curl', 'git']`` is none), a two-word one by anything."""
    for prefix in NETWORK_COMMANDS:
        if tuple(words[:len(prefix)]) != prefix or len(words) <= len(prefix):
            continue
        argument = words[len(prefix)]
        if len(prefix) > 1 or argument.startswith("-") or "://" in argument or argument == "{}":
            return " ".join(prefix)
    return None


def scan_python(source: str, name: str) -> list[Reach]:
    """Where a build script written in Python reaches for the network."""
    try:
        tree = ast.parse(source, filename=name)
    except SyntaxError:
        return [Reach(name, source.count("\n", 0, m.start()) + 1, f"names {m[1]}")
                for m in _TEXT_REACH.finditer(source)]
    found: dict[int, str] = {}  # line -> what: one reach a line (a process call before the list it runs)
    for node in ast.walk(tree):
        what = None
        if isinstance(node, ast.Import):
            what = next((f"imports {a.name}" for a in node.names if _network_module(a.name)), None)
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            what = next((f"imports {m}" for m in modules if _network_module(m)), None)
        elif isinstance(node, ast.Call):
            called = _call_name(node.func)
            last = called.rsplit(".", 1)[-1]
            if last in NETWORK_CALLS:
                what = f"calls {called}"
            elif last in PROCESS_CALLS and node.args:
                command = _downloading_command(_command_words(node.args[0]))
                what = f"runs {command}" if command else None
        elif isinstance(node, (ast.List, ast.Tuple)) and (command := _downloading_command(_command_words(node))):
            what = f"lists the command {command}"
        if what and node.lineno not in found:
            found[node.lineno] = what
    return [Reach(name, line, what) for line, what in sorted(found.items())]


def _network_module(module: str) -> bool:
    return any(module == m or module.startswith(f"{m}.") for m in NETWORK_MODULES)


def scan_cmake(source: str, name: str) -> list[Reach]:
    """Where a CMake file downloads."""
    return [Reach(name, source.count("\n", 0, m.start()) + 1, f"uses {m[1]}") for m in CMAKE_DOWNLOADS.finditer(source)]


def _members(filename: str, data: bytes) -> dict[str, bytes]:
    """The sdist's regular files by their path under its top folder (``setup.py``, ``cmake/x.cmake``)."""
    out: dict[str, bytes] = {}
    if filename.endswith(".zip"):
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for info in archive.infolist():
                if not info.is_dir():
                    out[_under_top(info.filename)] = archive.read(info)
        return out
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        for member in archive.getmembers():
            handle = archive.extractfile(member) if member.isfile() else None
            if handle is not None:
                out[_under_top(member.name)] = handle.read()
    return out


def _under_top(path: str) -> str:
    parts = PurePosixPath(path).parts
    return "/".join(parts[1:]) if len(parts) > 1 else path


def build_scripts(members: Mapping[str, bytes]) -> dict[str, str]:
    """The files of an sdist that its build runs, by path: setup.py, an in-tree backend's modules, hatch_build.py
    and the CMake files."""
    wanted = {"setup.py", "hatch_build.py"} & set(members)
    pyproject = members.get("pyproject.toml")
    if pyproject is not None:
        try:
            import tomllib  # novermin: `lock` runs in a checkout, on Python 3.11 or newer
        except ModuleNotFoundError as exc:
            raise InputError("lock reads pyproject.toml with tomllib: run it with Python 3.11 or newer") from exc
        try:
            system = tomllib.loads(pyproject.decode("utf-8", "replace")).get("build-system", {})
        except tomllib.TOMLDecodeError:
            system = {}
        for folder in system.get("backend-path", []) or []:
            prefix = str(PurePosixPath(folder))
            wanted |= {p for p in members if p.endswith(".py")
                       and (p.startswith(f"{prefix}/") if prefix != "." else "/" not in p)}
    wanted |= {p for p in members if PurePosixPath(p).name == "CMakeLists.txt" or p.endswith(".cmake")}
    return {p: members[p].decode("utf-8", "replace") for p in sorted(wanted)}


def scan_sdist(filename: str, data: bytes) -> list[Reach]:
    """Where the build of this sdist (its file name and bytes) reaches for the network; [] when it builds offline."""
    found: list[Reach] = []
    for path, source in build_scripts(_members(filename, data)).items():
        found += scan_python(source, path) if path.endswith(".py") else scan_cmake(source, path)
    return found


def supported_tags(python: str, platform_tags: Iterable[str]) -> frozenset[tags.Tag]:
    """Every wheel tag an interpreter of CPython ``python`` on these platforms installs."""
    version = tuple(int(part) for part in python.split("."))
    plats = list(platform_tags)
    interpreter = f"cp{''.join(python.split('.'))}"
    return frozenset({*tags.cpython_tags(version, abis=[interpreter], platforms=plats),
                      *tags.compatible_tags(version, interpreter, plats)})


def has_wheel(files: Iterable[Mapping[str, Any]], supported: frozenset[tags.Tag]) -> bool:
    """Whether any of a release's files (the index's entries) is a wheel with one of the supported tags."""
    for item in files:
        try:
            _, _, _, wheel_tags = parse_wheel_filename(item["filename"])
        except (InvalidWheelFilename, InvalidVersion):
            continue
        if wheel_tags & supported:
            return True
    return False


def stack_tags(stack: Stack, machine: str) -> frozenset[tags.Tag]:
    """The wheel tags the stack's images install on ``machine`` (its Python, its base image's glibc)."""
    glibc = re.fullmatch(r".*-manylinux_2_(\d+)", platform(stack, machine))
    return supported_tags(stack.python, pypi.platform_tags(machine, int(glibc[1]) if glibc else 17))


ReleaseFiles = Callable[[str, str], list[dict[str, Any]]]
Archive = Callable[[str, str], tuple[str, bytes]]


def network_builds(stack: Stack, machine: str, pinned: Mapping[str, str],
                   files_of: ReleaseFiles | None = None, archive: Archive | None = None) -> list[str]:
    """One line for each release of ``pinned`` (name -> version) that has no wheel for the stack on ``machine`` and
    whose sdist's build reaches for the network, naming the fix (leave it out, or pin a release with a wheel)."""
    files_of = files_of or pypi.release_files
    archive = archive or pypi.sdist_archive
    supported = stack_tags(stack, machine)
    left_out = {o.name for o in stack.left_out}
    names = sorted(n for n in pinned if canonical(n) not in left_out)

    def wheeled(name: str) -> bool:
        try:
            return has_wheel(files_of(name, pinned[name]), supported)
        except (OSError, ValueError, KeyError) as exc:
            raise InputError(f"cannot read {name} {pinned[name]}'s files from the index ({exc}); check the network "
                             "and run `mcore-images lock` again") from None

    with ThreadPoolExecutor(max_workers=16) as pool:  # one index read per release
        wheels = dict(zip(names, pool.map(wheeled, names), strict=True))
    out = []
    for name in (n for n in names if not wheels[n]):
        reaches = scan_sdist(*archive(name, pinned[name]))
        if reaches:
            more = f"; {len(reaches) - 3} more" if len(reaches) > 3 else ""
            shown = "; ".join(str(r) for r in reaches[:3]) + more
            out.append(f"stack '{stack.name}': {name} {pinned[name]} has no wheel for Python {stack.python} on "
                       f"{platform(stack, machine)} and its sdist's build reaches for the network ({shown}), so an "
                       "offline build (the image's, the replica's) fails; leave it out (the stack's left_out in "
                       "env/stacks.json, saying who requires and who imports it), or pin a release with a wheel")
    return out


def refuse_network_builds(stack: Stack, machine: str, pinned: Mapping[str, str]) -> None:
    """InputError (one line: the first such release, and how many more) before any lock is written."""
    found = network_builds(stack, machine, pinned)
    if found:
        raise InputError(found[0] + (f" (and {len(found) - 1} more such release(s))" if len(found) > 1 else ""))
