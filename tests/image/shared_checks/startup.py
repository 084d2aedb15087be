"""What runs before a user's code, and where a user's installs come from: the promises no version check sees.

- Startup hooks: every ``.pth`` file and every ``sitecustomize`` / ``usercustomize`` on an interpreter's path runs at
  its start. Each must be what a package shipped: listed with its hash in a pip RECORD, or in an OS package's file
  list with the md5 dpkg recorded. A hook nobody owns (``zz_tune.pth`` setting variables) changes every run unseen.
- Package indexes: pip's effective configuration (its files and PIP_* variables) and uv's variables name no index,
  extra index or find-links beyond PyPI, and trust no host: a user's `pip install` in the image would otherwise take
  packages from elsewhere, over plain HTTP.
- APT sources: only the mirror the base was made from (a debian stack's base records its debootstrap line in the
  image history), with none of APT's options that switch signature checks off.
- No preload: /etc/ld.so.preload lists no library and the image sets no LD_PRELOAD; either puts a library into every
  process.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from typing import Any

from mcore_images.resolve.pypi import PYPI_SIMPLE
from tests.image.shared_checks import installed

INTERPRETERS = ("python", "/usr/bin/python3")
"""The image's Python (the venv's, first on PATH) and the OS's own, which apt's helpers run: each reads its own path."""

HOOK_LISTER = r"""
import json, os, sys
found = []
for folder in dict.fromkeys(os.path.realpath(p) for p in sys.path if p):
    if not os.path.isdir(folder):
        continue
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if name.endswith(".pth") and os.path.isfile(path):
            found.append(path)
        elif name in ("sitecustomize.py", "usercustomize.py"):
            found.append(path)
        elif name in ("sitecustomize", "usercustomize") and os.path.isdir(path):
            found += [os.path.join(path, f) for f in sorted(os.listdir(path)) if f.endswith(".py")]
print(json.dumps(found))
"""
"""Runs in the image: every startup hook on the interpreter's path (site runs .pth files of site folders and imports
sitecustomize and usercustomize from anywhere on the path)."""

INDEX_KEYS = ("index-url", "extra-index-url", "find-links")
"""pip's settings that name where packages come from."""
UV_INDEX_VARIABLES = ("UV_INDEX_URL", "UV_EXTRA_INDEX_URL", "UV_INDEX", "UV_DEFAULT_INDEX", "UV_FIND_LINKS")
ALLOWED_INDEXES = frozenset({PYPI_SIMPLE, PYPI_SIMPLE + "/"})
"""The indexes an image's pip and uv may name: PyPI's, which every lock is resolved against."""

INSECURE_APT_OPTIONS = ("trusted", "allow-insecure", "allow-weak", "allow-downgrade-to-insecure", "signed-by=/dev")
"""Source options (one-line ``[…]`` or deb822 fields) that let APT take unsigned or weakly signed packages."""
UPSTREAM_APT_HOSTS = ("archive.ubuntu.com", "security.ubuntu.com", "ports.ubuntu.com", "developer.download.nvidia.com")
"""The sources NVIDIA's CUDA and NGC bases ship (Ubuntu's archive and NVIDIA's CUDA repository): the ngc and cuda
stacks' images may name these and nothing else."""


def _json(run: Any, command: str, what: str) -> Any:
    result = run(command)
    if result.rc != 0:
        raise AssertionError(f"{what} failed in the image (exit {result.rc}): {result.stderr.strip()[-1500:]}")
    return json.loads(result.stdout)


def startup_hooks(run: Any) -> dict[str, dict[str, str | None]]:
    """For each interpreter the image has: its startup hooks (and, for a link, the file it points to) and who ships
    each unchanged ("pip <distribution>", "dpkg", or None)."""
    seen: dict[str, dict[str, str | None]] = {}
    for python in INTERPRETERS:
        if run(f"command -v {shlex.quote(python)}").rc != 0:
            continue
        hooks = _json(run, f"{shlex.quote(python)} -c {shlex.quote(HOOK_LISTER)}", f"listing {python}'s startup hooks")
        if not hooks:
            seen[python] = {}
            continue
        # Each hook and, for a link, the file it points to (the owner lookup formats its command with %).
        quoted = " ".join(shlex.quote(h).replace("%", "%%") for h in hooks)
        paths = f'{{ for p in {quoted}; do echo "$p"; realpath -e "$p"; done; }} | sort -u'
        seen[python] = installed.owners(run, paths, python=python)
    return seen


def startup_hook_problems(hooks: Mapping[str, Mapping[str, str | None]]) -> list[str]:
    """Each hook (or the file a linked hook points to) that no package ships as it is now."""
    return [f"{path}: a startup hook of {python} that no pip RECORD or OS package ships as it is (it runs at every "
            "start of that interpreter)"
            for python, owners in hooks.items() for path, owner in sorted(owners.items()) if owner is None]


_PIP_LINE = re.compile(r"^(?P<section>[^.]*)\.(?P<key>[a-z-]+)='(?P<value>.*)'$")


def pip_settings(run: Any) -> list[tuple[str, str, str]]:
    """(where, key, value) of every setting pip's effective configuration holds (files and PIP_* variables)."""
    result = run("python -m pip config list")
    if result.rc != 0:
        raise AssertionError(f"pip config list failed in the image (exit {result.rc}): {result.stderr.strip()[-800:]}")
    found = []
    for line in result.stdout.splitlines():
        if match := _PIP_LINE.match(line.strip()):
            found.append((match["section"] or "global", match["key"], match["value"]))
    return found


def index_problems(settings: list[tuple[str, str, str]], environ: Mapping[str, str]) -> list[str]:
    """Each index, extra index or find-links place other than PyPI, and every trusted host, that pip or uv would
    use in the image."""
    problems = []
    for where, key, value in settings:
        if key == "trusted-host":
            problems.append(f"pip ({where}) trusts host(s) {value!r}: packages from there skip HTTPS checks")
        elif key in INDEX_KEYS:
            problems += [f"pip ({where}) {key} names {url!r}: only {PYPI_SIMPLE} is allowed"
                         for url in value.split() if url not in ALLOWED_INDEXES]
    for name in UV_INDEX_VARIABLES:
        problems += [f"{name} names {url!r}: only {PYPI_SIMPLE} is allowed"
                     for url in environ.get(name, "").split() if url not in ALLOWED_INDEXES]
    if environ.get("UV_INSECURE_HOST"):
        problems.append(f"UV_INSECURE_HOST={environ['UV_INSECURE_HOST']!r}: uv skips HTTPS checks for it")
    return problems


SOURCES_LISTER = r"""
import glob, json
found = {}
for path in ["/etc/apt/sources.list", *sorted(glob.glob("/etc/apt/sources.list.d/*"))]:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            found[path] = handle.read()
    except (IsADirectoryError, FileNotFoundError):
        pass
print(json.dumps(found))
"""


def apt_sources(run: Any) -> dict[str, str]:
    """Every APT source file of the image and its text."""
    return _json(run, f"/usr/bin/python3 -c {shlex.quote(SOURCES_LISTER)}", "reading the APT sources")


def source_entries(files: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """(file, URI, options) of every active entry: one-line ``deb [opts] URI suite …`` and deb822 stanzas
    (``URIs:`` with the stanza's other fields as its options)."""
    entries = []
    for path, text in files.items():
        if path.endswith(".sources"):
            for stanza in re.split(r"\n\s*\n", text):
                fields = dict(re.findall(r"^([A-Za-z-]+):\s*(.*)$", stanza, re.M))
                if fields.get("Enabled", "yes").lower() == "no":
                    continue
                options = " ".join(f"{k.lower()}={v}" for k, v in fields.items() if k not in ("URIs", "Types"))
                entries += [(path, uri, options) for uri in fields.get("URIs", "").split()]
        elif path.endswith(".list") or path == "/etc/apt/sources.list":
            for line in text.splitlines():
                match = re.match(r"^\s*deb(?:-src)?\s+(?:\[(?P<opts>[^\]]*)\]\s+)?(?P<uri>\S+)", line)
                if match:
                    entries.append((path, match["uri"], match["opts"] or ""))
    return entries


def base_mirror(history_comments: list[str]) -> str | None:
    """The mirror a debian stack's base was bootstrapped from, read from its `docker import` message in the image
    history ("debootstrap --variant=minbase [--arch=…] SUITE MIRROR")."""
    for comment in history_comments:
        words = comment.split()
        if words[:1] == ["debootstrap"] and len(words) >= 3:
            return words[-1]
    return None


def apt_source_problems(files: Mapping[str, str], flavor: str, mirror: str | None) -> list[str]:
    """Each source that names anything but the stack's mirror (debian) or its base's upstream hosts (cuda, ngc),
    and each with an option that turns signature checks off."""
    problems = []
    for path, uri, options in source_entries(files):
        lowered = options.lower().replace(" ", "")
        weak = [o for o in INSECURE_APT_OPTIONS if f"{o}=yes" in lowered or (o.endswith("/dev") and o in lowered)]
        if weak:
            problems.append(f"{path}: {uri} with {', '.join(weak)}: APT takes its packages unchecked")
        if flavor == "debian":
            if mirror is None:
                problems.append(f"{path}: {uri}: the image history names no debootstrap mirror to compare with")
            elif uri.rstrip("/") != mirror.rstrip("/"):
                problems.append(f"{path}: {uri} is not the mirror the base was made from ({mirror})")
        elif not re.match(r"^https?://(?:[^/]*\.)?(?:" + "|".join(map(re.escape, UPSTREAM_APT_HOSTS)) + r")(?:/|$)",
                          uri):
            hosts = ", ".join(UPSTREAM_APT_HOSTS)
            problems.append(f"{path}: {uri} is none of the hosts the {flavor} base ships ({hosts})")
    return problems


def preload_problems(preload_text: str | None, environ: Mapping[str, str]) -> list[str]:
    """A library /etc/ld.so.preload lists, and an LD_PRELOAD the image sets."""
    problems = []
    listed = [line.strip() for line in (preload_text or "").splitlines() if line.strip() and
              not line.lstrip().startswith("#")]
    if listed:
        problems.append(f"/etc/ld.so.preload loads {', '.join(listed)} into every process")
    if environ.get("LD_PRELOAD"):
        problems.append(f"LD_PRELOAD={environ['LD_PRELOAD']!r} loads a library into every process")
    return problems
