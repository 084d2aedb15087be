"""Installed files are what their packages shipped: every file pip installed still has the hash its RECORD
lists, and the lookup that tells a file a distribution or an OS package ships unchanged from one the build
wrote itself. Both run utils/install_records.py once in the image, so no file is read across `docker exec`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.image.utils.probing import normalize

SCRIPT = Path(__file__).resolve().parents[1] / "utils" / "install_records.py"
SHOWN = 50
"""Mismatches named one by one; beyond that, a count (an overwritten package can differ in thousands of files)."""


def _run(run: Any, command: str, what: str) -> Any:
    """Run install_records.py in the image by ``command`` (its source in place of %s); its JSON answer."""
    result = run(command, SCRIPT.read_text())
    if result.rc != 0:
        raise AssertionError(f"{what} failed in the image (exit {result.rc}): {result.stderr.strip()[-1500:]}")
    return json.loads(result.stdout)


def verify_records(run: Any) -> dict[str, Any]:
    """Hash every file the RECORDs of the image's Python list, inside the image: site folders, distributions,
    files, bytes, seconds and the mismatches as [distribution, path, why]."""
    return _run(run, "timeout 900 python -c %s verify", "the RECORD check")


def record_problems(verified: Mapping[str, Any], facts: Mapping[str, Any]) -> list[str]:
    """Each installed file whose hash is not its RECORD's (edited, patched or overwritten by another package after
    pip installed it), named with its distribution; and every distribution the probe found with a RECORD that the
    check did not reach (a folder it did not search would pass unseen)."""
    problems = [f"{normalize(dist)}: {path}: {why} (RECORD)" for dist, path, why in verified["mismatches"][:SHOWN]]
    if verified["mismatch_count"] > SHOWN:
        problems.append(f"… and {verified['mismatch_count'] - SHOWN} more files that differ from their RECORD")
    checked = {normalize(name) for name in verified["distributions"]}
    problems += [
        f"{name}: installed with a RECORD at {dist['location']}, in no folder the check searched ({verified['sites']})"
        for name, dist in sorted(facts["dists"].items())
        if dist.get("record_sha256") and name not in checked
    ]
    if not verified["files"]:
        problems.append(f"no RECORD in {verified['sites']} lists a hashed file: nothing was verified")
    return problems


def owners(run: Any, paths_command: str, python: str = "python") -> dict[str, str | None]:
    """Who ships each path that ``paths_command`` prints (one a line), unchanged: "pip <distribution>" (its RECORD
    lists it with this hash), "dpkg" (an OS package's file list names it, with the md5 dpkg recorded), or None.
    ``python``: the interpreter whose site folders' RECORDs count."""
    return _run(run, f"{paths_command} | timeout 900 {python} -c %s owners", "the owner lookup")
