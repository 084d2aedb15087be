"""Runs INSIDE the image under test (standard library only, Python >= 3.8): prints one JSON object of facts.

    python -c "$(cat probe.py)" MODULE [MODULE ...]

The host-side tests compare these facts with the image's labels; nothing here decides pass or fail.
Each MODULE is imported in the order given, in this one process (torch first, so that the CUDA
extensions of TE and apex find libtorch); an import error is recorded, never raised.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import re
import sys
import time
import traceback
from importlib import metadata


def normalize(name: str) -> str:
    """PEP 503 name: 'Megatron_Core' and 'megatron-core' are the same distribution."""
    return re.sub(r"[-_.]+", "-", name).lower()


def distributions() -> tuple:
    """Every installed distribution (the first on sys.path wins, as for imports): version, where it
    lives, Requires-Python and its install record; and the names found more than once."""
    out: dict = {}
    seen: dict = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if not name:
            continue
        seen.setdefault(normalize(name), []).append({"version": dist.version, "path": str(getattr(dist, "_path", ""))})
        if normalize(name) in out:
            continue
        record = dist.read_text("RECORD") or ""
        direct_url = dist.read_text("direct_url.json")
        out[normalize(name)] = {
            "name": name,
            "version": dist.version,
            "requires_python": dist.metadata["Requires-Python"],
            "location": str(getattr(dist, "_path", "")),
            "record_sha256": hashlib.sha256(record.encode()).hexdigest() if record else None,
            "direct_url": json.loads(direct_url) if direct_url else None,
        }
    return out, {name: where for name, where in seen.items() if len(where) > 1}


def try_import(module: str) -> dict:
    start = time.monotonic()
    try:
        importlib.import_module(module)
    except BaseException as error:  # SystemExit or a C-level error from a broken extension too
        last = traceback.format_exception_only(type(error), error)[-1].strip()
        return {
            "ok": False,
            "error_type": type(error).__name__,
            "error": last[:2000],
            "seconds": round(time.monotonic() - start, 2),
        }
    return {"ok": True, "seconds": round(time.monotonic() - start, 2)}


def compiler() -> dict:
    """The run-time C compiler on PATH and its full version (what Triton and inductor will call)."""
    import shutil
    import subprocess

    path = shutil.which("gcc")
    version = None
    if path:
        try:
            version = subprocess.run([path, "-dumpfullversion"], capture_output=True, text=True, timeout=20).stdout
        except OSError:
            version = None
    return {"path": path, "version": (version or "").strip() or None}


def cudnn(torch: object) -> object:
    """The cuDNN torch loads (cudnnGetVersion(), e.g. 91900; None without one), or the error torch raises."""
    try:
        return torch.backends.cudnn.version()  # type: ignore[attr-defined]
    except Exception as error:  # two cuDNNs in one process: torch refuses the one it finds
        return "error: " + (str(error).splitlines() or [type(error).__name__])[0][:300]


def main(modules: list) -> dict:
    facts: dict = {
        "python": {
            "version": ".".join(map(str, sys.version_info[:3])),
            "major_minor": "{}.{}".format(*sys.version_info[:2]),
            "executable": sys.executable,
            "prefix": sys.prefix,
        },
        "env": dict(os.environ),
        "imports": {},
        "gcc": compiler(),
    }
    facts["dists"], facts["duplicates"] = distributions()
    # Imports print banners and warnings: keep stdout for the JSON alone.
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        for module in modules:
            facts["imports"][module] = try_import(module)
        torch = sys.modules.get("torch")
        if torch is not None:
            facts["torch"] = {
                "version": torch.__version__,
                "cuda": torch.version.cuda,
                "git_version": getattr(torch.version, "git_version", None),
                "cudnn": cudnn(torch),
            }
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
    return facts


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
