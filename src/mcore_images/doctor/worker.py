"""The worker: an interpreter of its own for the checks that import, load libraries or ask the driver.

`python -m mcore_images.doctor.worker REQUEST` runs the checks the parent names (isolate.py) and writes
one JSON line per step on its standard output: `{"start": id}` before a check, `{"begin": key}` and
`{"end": key}` around each import or driver query, `{"finding": {...}}` after it. When the worker
dies or is stopped, the last lines tell the parent which check and which import it was in. Whatever
the checks' imports print goes to stderr, so it cannot corrupt these lines.

The request also names imports that crashed or hung in an earlier worker: they are refused here with
an ImportError (also when a package imports them itself), so one broken torch costs one check, not
every check that imports torch.
"""

from __future__ import annotations

import faulthandler
import importlib
import importlib.abc
import importlib.machinery
import json
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, TextIO

from mcore_images.doctor import probes
from mcore_images.doctor.command import load_checks
from mcore_images.doctor.model import Context, Finding, Status, run_one


class Refused(importlib.abc.Loader):
    """Loads nothing: executing the module raises the ImportError that names the earlier failure."""

    def __init__(self, message: str) -> None:
        self.message = message

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        raise ImportError(self.message, name=module.__name__)


class Refuse(importlib.abc.MetaPathFinder):
    """Refuses to import the named modules (and their submodules): importing them crashed or hung
    before. They are still found, with their real location, so static reads (probes.locate) work."""

    def __init__(self, why: Mapping[str, str]) -> None:
        self.why = dict(why)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        name = next((n for n in self.why if fullname == n or fullname.startswith(n + ".")), None)
        if name is None:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if finder is not self and find else None
            if spec is not None:
                spec.loader = Refused(f"import {name} {self.why[name]} ({probes.NOT_RETRIED})")
                return spec
        return None  # not installed at all: Python's own ModuleNotFoundError


def stand_in(key: str, why: str) -> tuple[bool, Any]:
    """The cached answer for a fact whose computation crashed or hung in an earlier worker."""
    if key == probes.GPUS:
        return True, probes.GpuInfo(None, None, (), f"querying {probes.LIBCUDA} {why}")
    return False, RuntimeError(f"{key} {why} ({probes.NOT_RETRIED})")


def prepare(ctx: Context, failed: Mapping[str, str]) -> None:
    """Refuse the imports and stand in for the facts that killed an earlier worker."""
    imports = {key.removeprefix(probes.IMPORT): why for key, why in failed.items() if key.startswith(probes.IMPORT)}
    if imports:
        sys.meta_path.insert(0, Refuse(imports))
    for key, why in failed.items():
        if not key.startswith(probes.IMPORT):
            ctx.memo[key] = stand_in(key, why)


def unknown(check_id: str) -> Finding:
    return Finding(
        check_id,
        Status.CRASH,
        "this check is not registered in a fresh interpreter (it was registered at run time)",
        "run it with --in-process",
        {},
        0.0,
    )


def events() -> TextIO:
    """The event stream: the original stdout; fd 1 then points at stderr for whatever imports print."""
    sys.stdout.flush()
    stream = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    return stream


def serve(request: Mapping[str, Any], stream: TextIO) -> None:
    def emit(**event: Any) -> None:
        stream.write(json.dumps(event) + "\n")
        stream.flush()

    if "sys_path" in request:  # the doctor's own: packages come from where it would import them
        sys.path[:] = request["sys_path"]
    for module in request.get("modules", []):  # modules outside the doctor that register checks
        try:
            importlib.import_module(module)
        except Exception:  # its checks then report themselves as not registered
            continue
    checks = load_checks()
    hf_config = request.get("hf_config")
    ctx = Context(
        hf_config=Path(hf_config) if hf_config else None,
        watch=lambda key, begins: emit(**{"begin" if begins else "end": key}),
    )
    prepare(ctx, request.get("failed", {}))
    for check_id in request["checks"]:
        emit(start=check_id)
        item = checks.get(check_id)
        finding = run_one(item, ctx) if item else unknown(check_id)
        emit(finding=finding.to_dict())


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("doctor worker: takes one JSON request; it is started by `mcore-images doctor`", file=sys.stderr)
        return 2
    faulthandler.enable()  # a segfault prints where it was
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # so does the parent's signal after a timeout
    serve(json.loads(args[0]), events())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
