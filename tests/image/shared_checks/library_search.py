"""What the dynamic loader puts into every process, as the loader's own tools and the shells read it.

- No preload: /etc/ld.so.preload lists no library, and neither the image's environment nor a shell's start-up files
  (/etc/profile, profile.d, bash.bashrc, root's .bashrc, /etc/environment) set LD_PRELOAD or LD_AUDIT: either loads
  a library into every process.
- No foreign search path: LD_LIBRARY_PATH names only the folders the NVIDIA container toolkit mounts the driver into
  (NVIDIA's bases set those), and every folder the loader's cache is built from (``ldconfig``'s own list of
  ld.so.conf and its includes) is writable by root alone, up to /: a folder anyone can write to lets anyone put a
  library ahead of the real one.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from typing import Any

LOADER_VARIABLES = ("LD_PRELOAD", "LD_AUDIT")
"""Variables that load a library into every process they reach."""
DRIVER_LIBRARY_DIRS = frozenset({"/usr/local/nvidia/lib", "/usr/local/nvidia/lib64"})
"""The folders NVIDIA's CUDA and NGC bases put on LD_LIBRARY_PATH: the container toolkit mounts the driver there."""
SHELLS = ("bash -lic", "bash -ic", "sh -lc")
"""A login and an interactive bash (profile, profile.d, bash.bashrc, root's .bashrc) and a login sh."""

SEARCH_LISTER = r"""
import json, os, re, subprocess, sys
done = subprocess.run(["ldconfig", "-v", "-N", "-X"], capture_output=True, text=True)
dirs = dict(re.findall(r"^(/\S*): \(from (.*?):\d+\)", done.stdout, re.M))
dirs.update({d: "missing" for d in re.findall(r"Can't stat (/\S+): No such file", done.stderr)})
dirs.update({d: "LD_LIBRARY_PATH" for d in sys.argv[1:] if d})
writable = {}
for folder, source in dirs.items():
    path = os.path.abspath(folder)
    while True:
        if os.path.lexists(path):
            st = os.stat(path)
            if st.st_uid != 0 or st.st_mode & 0o022:
                writable.setdefault(folder, []).append([path, st.st_uid, oct(st.st_mode & 0o7777)])
        if path == "/":
            break
        path = os.path.dirname(path)
print(json.dumps({"dirs": dirs, "writable": writable}))
"""
"""Runs in the image (its OS Python): every folder ldconfig reads, where from, and each of it and its parents that
a non-root user can write (owned by another user, or group- or world-writable)."""


def preload_problems(preload_text: str | None, environ: Mapping[str, str]) -> list[str]:
    """A library /etc/ld.so.preload lists, and the loader variables the image's environment sets."""
    listed = [line.strip() for line in (preload_text or "").splitlines() if line.strip() and
              not line.lstrip().startswith("#")]
    problems = [f"/etc/ld.so.preload loads {', '.join(listed)} into every process"] if listed else []
    return problems + variable_problems("the image's environment", environ)


def variable_problems(where: str, environ: Mapping[str, str]) -> list[str]:
    """LD_PRELOAD or LD_AUDIT set at all, and LD_LIBRARY_PATH naming a folder other than the driver's."""
    problems = [f"{where} sets {name}={environ[name]!r}: it loads a library into every process"
                for name in LOADER_VARIABLES if environ.get(name)]
    foreign = [d for d in environ.get("LD_LIBRARY_PATH", "").split(":") if d and d.rstrip("/") not in
               DRIVER_LIBRARY_DIRS]
    if foreign:
        problems.append(f"{where} sets LD_LIBRARY_PATH with {':'.join(foreign)}: the loader searches there before "
                        "the cache")
    return problems


def shell_environments(run: Any) -> dict[str, dict[str, str]]:
    """The loader variables each shell's start-up files set, from an empty environment (``env -i``)."""
    found = {}
    for shell in SHELLS:
        result = run(f"env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin {shell} env </dev/null")
        found[shell] = dict(re.findall(r"^(LD_[A-Z_]+)=(.*)$", result.stdout, re.M))
    environment = run("cat /etc/environment")
    found["/etc/environment"] = dict(re.findall(r"^\s*(?:export\s+)?(LD_[A-Z_]+)=[\"']?([^\"'\n]*)",
                                                environment.stdout if environment.rc == 0 else "", re.M))
    return found


def shell_problems(shells: Mapping[str, Mapping[str, str]]) -> list[str]:
    return [p for shell, environ in shells.items() for p in variable_problems(f"{shell} (start-up files)", environ)]


def search_path(run: Any, environ: Mapping[str, str]) -> dict[str, Any]:
    """ldconfig's folders and the image's LD_LIBRARY_PATH, and which of them a non-root user can write."""
    extra = " ".join(shlex.quote(d) for d in environ.get("LD_LIBRARY_PATH", "").split(":") if d)
    result = run(f"/usr/bin/python3 -c {shlex.quote(SEARCH_LISTER)} {extra}")
    if result.rc != 0:
        raise AssertionError(f"listing the loader's folders failed (exit {result.rc}): {result.stderr.strip()[-800:]}")
    return json.loads(result.stdout)


def search_path_problems(found: Mapping[str, Any]) -> list[str]:
    """Each search folder that it, or a folder above it, lets a non-root user write."""
    return [f"{folder} (from {found['dirs'].get(folder, '?')}): the loader searches it, and "
            + ", ".join(f"{path} (uid {uid}, mode {mode})" for path, uid, mode in paths)
            + " can be written by a user other than root"
            for folder, paths in sorted(found["writable"].items())]
