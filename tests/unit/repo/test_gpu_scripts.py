"""The GPU scripts run. Every step that .ci/image-env-replica.sh and .ci/gpu/*.sh name in their usage line runs here
as the lent GPU machine runs it (tests/support/gpu_host.py: from the repository root, its python3.12 over a stub
torch, no network, every file system but a sandbox read-only), through the commands that need a GPU, a CUDA
compile, PyPI or an image, each a stand-in that records its command line and exits 0 (tests/support/stand_in.py).

A step must reach such a command with a command line that holds, the first as its header documents it, or finish
(gpu_scripts_checks.py); called wrongly (no step or an unknown one, too few or too many arguments, a bad value, or
before the step that prepares it) it refuses in one line with exit 2 and writes nothing; no step writes outside
its sandbox. The steps come from the usage line each script prints, so a new step is run without editing these
files (a new placeholder needs a value in gpu_scripts_calls.GOOD, a step run where PyPI is reachable its name in
HERE). Steps run in the order their usage line names them, on one sandbox, as on the machines; what the network or
the GPU would have left for the next step comes from small fixtures (gpu_scripts_leftovers.py).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support import host
from tests.support.gpu_host import Result
from tests.unit.repo import gpu_scripts_calls as calls
from tests.unit.repo import gpu_scripts_checks as checks
from tests.unit.repo.gpu_scripts_calls import BAD, CALLS, SCRIPTS, STEPS, Step, make_box
from tests.unit.repo.gpu_scripts_leftovers import HOOKS


def _confined(result: Result) -> Result:
    if result.rc == 97 and "confine:" in result.stderr:
        pytest.fail(result.stderr.strip())
    return result


def _shown(step: Step, result: Result) -> str:
    return f"{step.id} (exit {result.rc}):\n{result.text[-3000:]}"


@pytest.fixture(scope="module")
def journey(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Result, dict[str, str]]]:
    """Every step of every script, in the order of its usage line, on one sandbox."""
    host.need("unshare")
    box = make_box(tmp_path_factory.mktemp("gpu-machine"))
    results = {}
    for step in STEPS:
        ctx = box.context(step)
        hooks = HOOKS.get(step.key, {})
        if "before" in hooks:
            hooks["before"](box, ctx)
        env = hooks["env"](box, ctx) if "env" in hooks else None
        results[step.id] = (_confined(box.run(step, calls.flat(calls.arguments(step, ctx)), ctx, env)), ctx)
        if "after" in hooks:
            hooks["after"](box, ctx)
    return results


@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.id)
def test_each_step_reaches_its_first_gpu_command(step: Step, journey: dict) -> None:
    result, ctx = journey[step.id]
    shown = _shown(step, result)
    assert checks.refusal(result) is None, f"refused its call: {shown}"
    assert not checks.writes_outside(result, ctx), shown
    problems = [p for record in result.records for p in checks.command_problems(record, Path(ctx["root"]).parent)]
    if result.records and step.id in checks.EXPECTED:
        problems += checks.expect_problems(checks.EXPECTED[step.id], result.records[0], ctx)
    assert not problems, "\n".join(problems) + f"\n{shown}"
    if not result.records:
        assert result.rc == 0, f"stopped before any command that stands in: {shown}"
        missing = [p.format(**ctx) for p in checks.LEAVES.get(step.id, []) if not Path(p.format(**ctx)).exists()]
        assert not missing, f"did not leave {missing}: {shown}"
    if step.each:
        summary = Path(ctx["out"], "summary.txt")
        assert summary.is_file() and re.search(rf"^{re.escape(step.each)} rc=0 ", summary.read_text(), re.M), shown


@pytest.mark.parametrize("script", SCRIPTS)
def test_no_step_or_an_unknown_one_is_refused_in_one_line(script: str, tmp_path: Path) -> None:
    host.need("unshare")
    box = make_box(tmp_path)
    for args in ([], ["no-such-step"]):
        before = checks.state(box.root)
        result = _confined(box.sandbox.run(script, args, "gpu"))
        line = checks.refusal(result)
        assert line and "usage:" in line, f"{script} {args}: exit {result.rc}\n{result.text}"
        assert checks.state(box.root) == before


@pytest.mark.parametrize("step", CALLS, ids=lambda s: s.id)
def test_a_wrong_number_of_arguments_is_refused_in_one_line(step: Step, tmp_path: Path) -> None:
    host.need("unshare")
    box = make_box(tmp_path)
    ctx = box.context(step)
    calls.ready_dir(ctx)
    values = calls.arguments(step, ctx)
    required = [i for i, p in enumerate(step.params) if not calls.optional(p)]
    cases = [calls.flat(values[:required[-1]])] if required else []
    if not any(calls.variadic(p) for p in step.params):
        cases.append([*calls.flat([v or ["extra"] for v in values]), "extra"])
    for args in cases:
        before = checks.state(box.root)
        result = _confined(box.run(step, args, ctx))
        line = checks.refusal(result)
        assert line and "usage:" in line, f"{step.id} {args}: exit {result.rc}\n{result.text}"
        assert checks.state(box.root) == before, f"{step.id} {args} wrote before refusing"


BAD_CALLS = [(step, calls.name_of(p)) for step in CALLS for p in step.params if calls.name_of(p) in BAD]
"""Each step with each of its placeholders that has a bad value."""


@pytest.mark.parametrize(("step", "bad"), BAD_CALLS, ids=lambda v: v.id if isinstance(v, Step) else v)
def test_a_bad_value_is_refused_in_one_line_naming_it(step: Step, bad: str, tmp_path: Path) -> None:
    host.need("unshare")
    box = make_box(tmp_path)
    ctx = box.context(step)
    calls.ready_dir(ctx)
    values = calls.arguments(step, ctx, bad)
    wrong = values[[calls.name_of(p) for p in step.params].index(bad)][0]
    before = checks.state(box.root)
    result = _confined(box.run(step, calls.flat(values), ctx))
    line = checks.refusal(result)
    assert line and wrong in line, f"{step.id} with {bad}={wrong}: exit {result.rc}\n{result.text}"
    assert checks.state(box.root) == before, f"{step.id} with {bad}={wrong} wrote before refusing"


@pytest.mark.parametrize("step", CALLS, ids=lambda s: s.id)
def test_a_step_before_the_one_that_prepares_it_refuses_in_one_line(step: Step, tmp_path: Path) -> None:
    """Where nothing was prepared (DIR empty, nothing stashed or installed) a step refuses in one line and writes
    nothing, or reaches a command that holds, or finishes."""
    host.need("unshare")
    box = make_box(tmp_path)
    ctx = box.context(step)
    before = checks.state(box.root)
    result = _confined(box.run(step, calls.flat(calls.arguments(step, ctx)), ctx))
    shown = _shown(step, result)
    assert not checks.writes_outside(result, ctx), shown
    if result.records:
        problems = [p for record in result.records for p in checks.command_problems(record, box.root)]
        assert not problems, "\n".join(problems) + f"\n{shown}"
    elif result.rc == 2:
        assert checks.refusal(result), f"refused in more than one line: {shown}"
        assert checks.state(box.root) == before, f"wrote before refusing: {shown}"
    else:
        assert result.rc == 0, shown


@pytest.mark.parametrize("layers", ["apps", " ", "kernels base"])
def test_replica_layers_outside_the_carried_ones_are_refused_in_one_line(layers: str, tmp_path: Path) -> None:
    """REPLICA_LAYERS names the layers whose wheels `locks` carries: a name that is not one (a typo, base, which is
    the host's torch) or none at all is refused before anything is downloaded or written."""
    host.need("unshare")
    box = make_box(tmp_path)
    step = next(s for s in CALLS if s.key == ("image-env-replica.sh", "locks"))
    ctx = box.context(step)
    before = checks.state(box.root)
    result = _confined(box.run(step, calls.flat(calls.arguments(step, ctx)), ctx, {"REPLICA_LAYERS": layers}))
    line = checks.refusal(result)
    assert line and "REPLICA_LAYERS" in line, f"REPLICA_LAYERS={layers!r}: exit {result.rc}\n{result.text}"
    assert not result.records, f"REPLICA_LAYERS={layers!r} reached {result.records}"
    assert checks.state(box.root) == before
