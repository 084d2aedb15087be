"""Locks re-resolved from the pins: an override keeps the committed pins where it can."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcore_images.catalogue.stacks import Stack
from mcore_images.resolve import lock_update, sdist_builds, uv_compile
from tests.unit.conftest import variant

FAKE_UV = """#!/usr/bin/env python3
import json, os, sys
from pathlib import Path
args = sys.argv[1:]
out = args[args.index("--output-file") + 1] if "--output-file" in args else None
record = {"requirements": Path("requirements.in").read_text(), "preferred": Path(out).read_text() if out else None}
with open(os.environ["FAKE_UV_LOG"], "a") as log:
    log.write(json.dumps(record) + "\\n")
text = "resolved-by-fake==1.0 \\\\\\n    --hash=sha256:00\\n"
if out:
    Path(out).write_text(text)
else:
    sys.stdout.write(text)
"""


def test_an_override_re_resolves_preferring_the_committed_pins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                root: Path, stacks: dict[str, Stack]) -> None:
    # Before: `--set mcore=…` re-resolved the runtime and app layers to whatever the index held newest (verl's app
    # moved ray's virtualenv and python-discovery with it, and one stale index page failed the whole override).
    # Now uv gets each committed lock as its existing output file and keeps those pins where it can.
    uv = tmp_path / "uv"
    uv.write_text(FAKE_UV)
    uv.chmod(0o755)
    calls = tmp_path / "calls.jsonl"
    monkeypatch.setenv("FAKE_UV_LOG", str(calls))
    monkeypatch.setattr(uv_compile, "_uv", lambda: str(uv))
    checked: list[dict[str, str]] = []  # what the check of sdists (its own tests: test_sdist_builds.py) is given
    monkeypatch.setattr(sdist_builds, "refuse_network_builds", lambda stack, machine, pinned: checked.append(pinned))
    stack = variant(stacks["debian-verl"], mcore="0.16.0")
    committed = root / "env" / "locks" / "debian-verl"
    lock_update.write_locks(stack, root, keep_below="runtime", keep_from=committed, folder=tmp_path / "out")
    seen = [json.loads(line) for line in calls.read_text().splitlines()]
    runtime, app = ((committed / f"{layer}.txt").read_text() for layer in ("runtime", "app"))
    assert seen[0]["preferred"] == runtime + app  # the joint resolution of the upper layers
    assert [call["preferred"] for call in seen[1:]] == [runtime, app]
    assert "megatron-core[mlm]==0.16.0" in seen[1]["requirements"]
    assert (tmp_path / "out" / "base.txt").read_text() == (committed / "base.txt").read_text()
    assert checked[0]["resolved-by-fake"] == "1.0" and checked[0]["torch"]  # the new layers' pins and the kept ones'
    calls.unlink()
    uv_compile.compile_layer(stack, ["torch==2.9.0"], {})  # a plain `make update` resolution prefers nothing
    assert json.loads(calls.read_text())["preferred"] is None
