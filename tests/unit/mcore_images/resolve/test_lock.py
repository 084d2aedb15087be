"""The committed locks agree with env/stacks.json, carry hashes, and never re-pin a lower layer."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mcore_images.catalogue.stacks import Stack
from mcore_images.resolve import lock
from tests.unit.conftest import variant


def test_every_stack_has_consistent_locks(root: Path, stacks: dict[str, Stack]) -> None:
    problems = [p for s in stacks.values() for p in lock.check_locks(s, root)]
    assert not problems, problems


def test_a_bumped_pin_is_caught(root: Path, debian: Stack) -> None:
    problems = lock.check_locks(variant(debian, mcore="0.16.0"), root)
    assert any("megatron-core" in p and "mcore-images lock" in p for p in problems)


def test_lower_layer_conflict_is_caught(tmp_path: Path, root: Path, debian: Stack) -> None:
    folder = tmp_path / "env" / "locks" / debian.name
    shutil.copytree(lock.lock_dir(debian, root), folder)
    runtime = folder / "runtime.txt"
    runtime.write_text(runtime.read_text() + "torch==2.10.0 \\\n    --hash=sha256:" + "0" * 64 + "\n")
    problems = lock.check_locks(debian, tmp_path)
    assert any("torch==2.10.0 conflicts" in p for p in problems)


def test_a_runtime_lock_without_psutil_is_caught(tmp_path: Path, root: Path, debian: Stack) -> None:
    """megatron-core's checkpoint writer needs psutil undeclared: without it every save waits forever."""
    folder = tmp_path / "env" / "locks" / debian.name
    shutil.copytree(lock.lock_dir(debian, root), folder)
    runtime = folder / "runtime.txt"
    lines = runtime.read_text().split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("psutil=="))
    end = next(i for i in range(start + 1, len(lines)) if lines[i] and not lines[i].startswith(" "))
    runtime.write_text("\n".join(lines[:start] + lines[end:]))
    problems = lock.check_locks(debian, tmp_path)
    assert any("psutil missing" in p and "--from-layer runtime" in p for p in problems), problems
    assert "psutil" in lock.layer_inputs(debian)["runtime"]


def test_layer_inputs_follow_the_pins(debian: Stack) -> None:
    inputs = lock.layer_inputs(debian, ["torch>=2.1", "einops", "transformer_engine_cu13==2.20.2"])
    assert inputs["base"] == [f"torch=={debian.torch}"]
    assert f"megatron-core[mlm]=={debian.mcore}" in inputs["runtime"]
    assert set(lock.UNDECLARED_RUNTIME) <= set(inputs["runtime"])
    assert "einops" in inputs["kernels"]
    assert not any(r.startswith("torch") for r in inputs["kernels"])
    assert all(r.endswith(f"=={debian.cuda}.*") for r in inputs["builder"] if r.startswith("nvidia-"))


def test_ngc_lock_drops_what_the_base_provides() -> None:
    text = ("numpy==2.0 \\\n    --hash=sha256:aa\ntorch==2.11.0 \\\n    --hash=sha256:bb\n"
            "nvidia-nccl-cu13==2 \\\n    --hash=sha256:cc\n")
    kept = lock.pins(lock._drop_base_provided(text))
    assert kept == {"numpy": "2.0"}


@pytest.mark.parametrize("line,expected", [("megatron-core==0.16.1 \\", ("megatron-core", "0.16.1")),
                                           ("mbridge[megatron]==0.15.1 \\", ("mbridge", "0.15.1"))])
def test_pins_parser(line: str, expected: tuple[str, str]) -> None:
    assert lock.pins(line) == {expected[0]: expected[1]}


def test_a_numpy1_verl_app_caps_pyarrow() -> None:
    """verl < 0.9 pins numpy < 2; pyarrow >= 26 does not import with it (Ray's actors import pyarrow)."""
    from mcore_images.catalogue.stacks import get_stack
    numpy1 = lock.layer_inputs(get_stack("debian-verl"))["app"]
    assert set(lock.UNDECLARED_APP_NUMPY1) <= set(numpy1)
    assert not set(lock.UNDECLARED_APP_NUMPY1) & set(lock.layer_inputs(get_stack("ngc"))["app"])  # verl 0.9.1


def test_uvs_reason_is_its_conclusion_not_the_hint_after_it() -> None:
    stderr = ("  × No solution found when resolving dependencies:\n"
              "  ╰─▶ Because a==1 depends on b>2 and you require b<2, we can conclude that your requirements are "
              "unsatisfiable.\n\nhint: You require CPython 3.12 (`cp312`), but we only found wheels for x: `cp311`\n")
    assert lock.uv_reason(stderr).endswith("we can conclude that your requirements are unsatisfiable.")
    assert lock.uv_reason("error: no such index\n") == "error: no such index"
    assert lock.uv_reason("") == "no output"


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
    monkeypatch.setattr(lock, "_uv", lambda: str(uv))
    stack = variant(stacks["debian-verl"], mcore="0.16.0")
    committed = root / "env" / "locks" / "debian-verl"
    lock.write_locks(stack, root, keep_below="runtime", keep_from=committed, folder=tmp_path / "out")
    seen = [json.loads(line) for line in calls.read_text().splitlines()]
    runtime, app = ((committed / f"{layer}.txt").read_text() for layer in ("runtime", "app"))
    assert seen[0]["preferred"] == runtime + app  # the joint resolution of the upper layers
    assert [call["preferred"] for call in seen[1:]] == [runtime, app]
    assert "megatron-core[mlm]==0.16.0" in seen[1]["requirements"]
    assert (tmp_path / "out" / "base.txt").read_text() == (committed / "base.txt").read_text()
    calls.unlink()
    lock.compile_layer(stack, ["torch==2.9.0"], {})  # a plain `make update` resolution prefers nothing
    assert json.loads(calls.read_text())["preferred"] is None
