"""The doctor survives what it diagnoses: fake packages that segfault, hang or carry no version, first
on PYTHONPATH of a real `python -m mcore_images doctor`, and the worker protocol on its own."""

from __future__ import annotations

import ast
import inspect
import json
import os
import re
import subprocess
import sys
import textwrap
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mcore_images.doctor import command as doctor
from mcore_images.doctor import isolate, probes
from mcore_images.doctor.model import Check, Status, ok
from tests.unit.conftest import ROOT

SRC = ROOT / "src"
TORCH_VERSION = "__version__ = '2.11.0+cu130'\ncuda: Optional[str] = '13.0'\n"
SEGFAULT = "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n"
HANG = "import time\ntime.sleep(10**6)\n"


def fake_site(tmp_path: Path, files: dict[str, str]) -> Path:
    site = tmp_path / "site"
    for name, text in files.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text(textwrap.dedent(text))
    return site


def broken_torch(tmp_path: Path, init: str) -> Path:
    """A torch whose import does `init`, and a megatron-core 0.16.1 that imports torch itself."""
    return fake_site(tmp_path, {
        "torch/__init__.py": init,
        "torch/version.py": TORCH_VERSION,
        "megatron/core/__init__.py": "import torch\n",
        "megatron/core/package_info.py": "MAJOR = 0\nMINOR = 16\nPATCH = 1\n",
    })


def run_doctor(site: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(SRC)])}
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "mcore_images", "doctor", *args],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    return proc, time.monotonic() - start


def by_id(stdout: str) -> dict[str, dict[str, Any]]:
    return {f["id"]: f for f in json.loads(stdout)["findings"]}


def test_a_torch_that_segfaults_on_import_is_one_crash_finding(tmp_path: Path) -> None:
    site = broken_torch(tmp_path, SEGFAULT)
    table, _ = run_doctor(site)
    assert table.returncode == 1, table.stderr[-2000:]  # before: -11 (SIGSEGV), nothing printed
    crashes = [line.split()[1] for line in table.stdout.splitlines() if line.startswith("CRASH")]
    assert crashes == ["torch.version"] and "SIGSEGV" in table.stdout
    assert all(cid in table.stdout for cid in doctor.load_checks())
    assert "1 crash" in table.stdout.splitlines()[-1]

    data, _ = run_doctor(site, "--json")
    found = by_id(data.stdout)
    assert data.returncode == json.loads(data.stdout)["exit_code"] == 1
    crash = found["torch.version"]
    assert crash["status"] == "crash" and "SIGSEGV inside `import torch`" in crash["finding"]
    assert "python -X faulthandler -c 'import torch'" in crash["fix"]
    mcore = found["megatron.core"]  # imports torch itself: refused at once, named, not a second crash
    assert mcore["status"] == "fail" and probes.NOT_RETRIED in mcore["finding"] and "first" in mcore["fix"]
    assert found["torch.cuda"]["status"] == "ok"  # read from torch/version.py, untouched by the crash
    assert [f for f in found.values() if f["status"] == "crash"] == [crash]


def test_a_torch_that_hangs_on_import_times_out_once(tmp_path: Path) -> None:
    site = broken_torch(tmp_path, HANG)
    proc, seconds = run_doctor(site, "--json", "--timeout", "2")
    assert proc.returncode == 1, proc.stderr[-2000:]  # before: 2, no --timeout (without it: hangs for ever)
    found = by_id(proc.stdout)
    hung = found["torch.version"]
    assert hung["status"] == "crash" and "did not finish in 2 s inside `import torch`" in hung["finding"]
    assert "--timeout" in hung["fix"]
    assert found["megatron.core"]["status"] == "fail" and found["megatron.core"]["seconds"] < 1
    assert json.loads(proc.stdout)["timeout_s"] == 2
    assert seconds < 30, f"one hang should cost one timeout, took {seconds:.1f} s"
    assert "torch/__init__.py" in proc.stderr  # the worker's faulthandler said where it hung


def test_a_megatron_core_without_a_version_is_a_finding(tmp_path: Path) -> None:
    site = fake_site(tmp_path, {"megatron/core/__init__.py": ""})  # no __version__, no package_info, no dist-info
    proc, _ = run_doctor(site, "--json", "--only", "megatron.core")
    found = by_id(proc.stdout)["megatron.core"]
    assert found["status"] == "fail", found  # before: ok, "megatron-core None imports from ..."
    assert "has no version" in found["finding"] and "pip install --force-reinstall" in found["fix"]
    assert proc.returncode == 1


# --- the parent's side of the worker protocol, with scripted workers ----------------------------------


def make(check_id: str) -> Check:
    return Check(check_id, Status.FAIL, f"fix for {check_id}", lambda ctx: ok("fine"), isolated=True)


def scripted(monkeypatch: pytest.MonkeyPatch, *scripts: str) -> list[dict[str, Any]]:
    """Workers that run these Python scripts in turn; returns the requests they were given."""
    requests: list[dict[str, Any]] = []

    def command(checks: list[Check], hf_config: Path | None, failed: dict[str, str]) -> list[str]:
        requests.append({"checks": [c.id for c in checks], "failed": dict(failed)})
        return [sys.executable, "-c", scripts[len(requests) - 1]]

    monkeypatch.setattr(isolate, "worker_command", command)
    return requests


def emit(*events: dict[str, Any]) -> str:
    return "".join(f"print({json.dumps(json.dumps(e))}, flush=True)\n" for e in events)


def finding(check_id: str) -> dict[str, Any]:
    return {"finding": {"id": check_id, "status": "ok", "finding": "fine", "fix": "", "details": {}, "seconds": 0}}


def test_a_check_that_hangs_outside_an_import_is_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    requests = scripted(
        monkeypatch,
        emit({"start": "x.slow"}) + "import time\ntime.sleep(60)\n",
        emit({"start": "x.next"}, finding("x.next")),
    )
    start = time.monotonic()
    found = isolate.run_isolated([make("x.slow"), make("x.next")], None, timeout=1)
    assert time.monotonic() - start < 15
    assert found["x.slow"].status == Status.CRASH and "did not finish in 1 s and was stopped" in found["x.slow"].finding
    assert "longer --timeout (now 1 s)" in found["x.slow"].fix
    assert found["x.next"].status == Status.OK
    assert requests[1] == {"checks": ["x.next"], "failed": {}}  # nothing to refuse: no import was running


def test_a_crash_inside_an_import_is_refused_in_the_next_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    requests = scripted(
        monkeypatch,
        emit({"start": "x.a"}, {"begin": "import:torch"}) + "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n",
        emit({"start": "x.b"}, finding("x.b")),
    )
    found = isolate.run_isolated([make("x.a"), make("x.b")], None, timeout=30)
    assert found["x.a"].status == Status.CRASH and "SIGSEGV inside `import torch`" in found["x.a"].finding
    assert requests[1]["failed"] == {"import:torch": "was killed by SIGSEGV in check x.a"}
    assert found["x.b"].status == Status.OK


def test_a_worker_that_dies_before_any_check_blames_the_next_and_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    die = "import sys\nsys.stderr.write('ModuleNotFoundError: No module named mcore_images\\n')\nsys.exit(3)\n"
    scripted(monkeypatch, die, die)
    found = isolate.run_isolated([make("x.a"), make("x.b")], None, timeout=30)
    assert [f.status for f in found.values()] == [Status.CRASH, Status.CRASH]
    assert "worker exited 3 before the check started: ModuleNotFoundError" in found["x.a"].finding


def test_isolate_runs_every_check_in_a_fresh_worker(capsys: pytest.CaptureFixture[str]) -> None:
    assert doctor.main(["--isolate", "--json", "--only", "env.nvte-attn", "--only", "build.max-jobs"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["mode"] == "isolate" and [f["id"] for f in data["findings"]] == ["env.nvte-attn", "build.max-jobs"]
    assert data["counts"]["crash"] == 0


@pytest.mark.parametrize(("args", "needle"), [
    (["--timeout", "0"], "argument --timeout: 0 is out of range: give a number greater than 0, e.g. 120"),
    (["--timeout", "soon"], "argument --timeout: 'soon' is not a number"),
    (["--timeout", "inf"], "argument --timeout: inf is not a finite number"),  # before: accepted
    (["--timeout", "nan"], "argument --timeout: nan is not a finite number"),
    (["--in-process", "--isolate"], "not allowed with argument"),
])
def test_bad_run_options_are_one_line(args: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert doctor.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err, err


# --- which checks may stay in the doctor's own interpreter -------------------------------------------

RISKY = re.compile(
    r"\b(imported|import_error|import_module|gpu_info|load_library|library_version|CDLL)\("
    r"|\blocate\(\"\w+\."  # find_spec of a dotted name imports its parent package
)


def reachable(func: Callable[..., Any]) -> dict[str, str]:
    """Source of `func` and of every doctor function it calls, by qualified name."""
    sources: dict[str, str] = {}
    todo = [func]
    while todo:
        item = todo.pop()
        name = f"{item.__module__}.{item.__qualname__}"
        if name in sources:
            continue
        sources[name] = textwrap.dedent(inspect.getsource(item))
        scope = vars(sys.modules[item.__module__])
        for node in ast.walk(ast.parse(sources[name])):
            target = None
            if isinstance(node, ast.Name):
                target = scope.get(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                target = getattr(scope.get(node.value.id), node.attr, None)
            if isinstance(target, types.FunctionType) and target.__module__.startswith("mcore_images."):
                todo.append(target)
    return sources


def test_checks_in_the_doctors_own_interpreter_import_nothing() -> None:
    """A check that imports, loads a library or asks the driver must be registered isolated=True."""
    risky = {
        item.id: [name for name, text in reachable(item.func).items() if RISKY.search(text)]
        for item in doctor.load_checks().values()
        if not item.isolated
    }
    assert not {cid: names for cid, names in risky.items() if names}
    assert len(risky) >= 5  # the guard looks at something: the cheap checks stay cheap


def test_a_probe_that_leaves_a_process_behind_is_ended_with_its_worker(monkeypatch: pytest.MonkeyPatch,
                                                                        tmp_path: Path) -> None:
    """A check's worker reports and exits, but something it started still runs (a compiler server, a helper):
    after the doctor, nothing of the worker's is left. Before: the group was killed only when the worker itself
    still ran."""
    pid_file = tmp_path / "left.pid"
    leave = ("import subprocess, pathlib\n"
             f"p = subprocess.Popen(['sleep', '300'])\npathlib.Path({str(pid_file)!r}).write_text(str(p.pid))\n")
    scripted(monkeypatch, leave + emit({"start": "x.a"}, finding("x.a")))
    found = isolate.run_isolated([make("x.a")], None, timeout=30)
    assert found["x.a"].status == Status.OK
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists() and \
            Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z":
        time.sleep(0.05)
    alive = Path(f"/proc/{pid}").exists() and Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    assert not alive, f"pid {pid} (sleep 300, started by the check's worker) outlived the doctor"
