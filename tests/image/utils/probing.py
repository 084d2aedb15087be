"""Facts from inside the image: utils/probe.py run in a container, and what the checks read from its JSON."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from mcore_images.catalogue import components
from tests.image.utils.docker import remove_container, start_container

# Every module the probe imports, torch first (the CUDA extensions need libtorch loaded).
PROBE_MODULES: tuple[str, ...] = tuple(m for c in components.CATALOGUE for m in c.modules)


def probe_source() -> str:
    return (Path(__file__).resolve().parent / "probe.py").read_text()


def run_probe(run: Any, modules: Iterable[str] = PROBE_MODULES) -> dict[str, Any]:
    """Run probe.py in the image. `run` is a testinfra host's run (or anything with its signature)."""
    args = " ".join(["%s"] * (1 + len(tuple(modules))))
    result = run(f"timeout 900 python -c {args}", probe_source(), *modules)
    if result.rc != 0:
        raise AssertionError(f"the probe failed in the image (exit {result.rc}): {result.stderr.strip()[-1500:]}")
    return json.loads(result.stdout)


@contextlib.contextmanager
def container_host(ref: str) -> Iterator[Any]:
    """A testinfra host on a short-lived container of `ref`, removed afterwards."""
    import testinfra

    cid = start_container(ref)
    try:
        yield testinfra.get_host(f"docker://{cid}")
    finally:
        remove_container(cid)


def probe_image(ref: str, modules: Iterable[str] = PROBE_MODULES) -> dict[str, Any]:
    """Facts from a short-lived container of `ref`; `modules=()` skips the import checks when only
    installed distributions are needed."""
    with container_host(ref) as host:
        return run_probe(host.run, modules)


def installed(facts: Mapping[str, Any], dist: str) -> str | None:
    entry = facts["dists"].get(normalize(dist))
    return entry["version"] if entry else None


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()
