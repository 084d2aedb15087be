"""make → tool: every make variable arrives as data. Each target's command (as `make -n` prints it, with the
`from-make` lines expanded as the tool expands them) parses with the CLI's own parser, and values built to
break a shell line are refused by the tool in one line, with nothing run and make's exit non-zero."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from mcore_images import cli
from mcore_images.image_build import make_vars
from tests.unit.conftest import ROOT
from tests.unit.repo.make_dry import VALUES, dry_run, make_targets, tool_argvs


@pytest.mark.parametrize("target", make_targets())
def test_every_target_command_parses_with_the_cli_parser(target: str) -> None:
    parser = cli.parser()
    for argv in (a for line in dry_run(target, VALUES) for a in tool_argvs(line, VALUES)):
        own = argv[:argv.index("--")] if "--" in argv else argv
        try:
            parser.parse_args(own)
        except SystemExit as exc:  # Parser.error: the line names an option the command no longer takes
            pytest.fail(f"make {target}: `{shlex.join(argv)}` does not parse (exit {exc.code})")


def test_make_promote_runs_promote_with_its_current_options() -> None:
    lines = [a for line in dry_run("promote", VALUES) for a in tool_argvs(line, VALUES)]
    assert lines == [["promote", VALUES["IMAGE"], "--stack", "debian", "--layer", "runtime", "--key", "cosign.pub",
                      "--policy", "ci", "--execute"]]


@pytest.mark.parametrize(("target", "variable", "value"), [
    ("build", "MAX_JOBS", "1; touch {sentinel}"),
    ("build", "MAX_JOBS", "1 `touch {sentinel}`"),
    ("build", "NVCC_THREADS", "$$(touch {sentinel})"),
    ("build", "BAKE_ARGS", "--print; touch {sentinel}"),
    ("build", "BAKE_ARGS", "--print `touch {sentinel}`"),
    ("build", "STACK", "debian; touch {sentinel}"),
    ("jobs", "MAX_JOBS", "2 && touch {sentinel}"),
    ("plan", "GROUP", "ci || touch {sentinel}"),
    ("tags", "STACK", "debian' ; touch {sentinel}; '"),
    ("test-image", "IMAGE", "x; touch {sentinel}"),
    ("kube-manifest", "IMAGE", "x; touch {sentinel}"),
])
def test_a_value_built_for_the_shell_is_data(target: str, variable: str, value: str, tmp_path: Path) -> None:
    """Before: make pasted the value into the recipe's shell line, which ran `touch`; `make build
    MAX_JOBS='1; true'` even exited 0 after bake failed. Now the tool refuses the value itself."""
    sentinel = tmp_path / "ran"
    values = {variable: value.format(sentinel=sentinel)}
    env = {**os.environ, "MAKEFLAGS": "", "PATH": os.environ["PATH"]}
    result = subprocess.run(["make", "-s", "-C", str(ROOT), target, *(f"{k}={v}" for k, v in values.items())],
                            capture_output=True, text=True, env=env, check=False, timeout=120)
    assert not sentinel.exists(), f"make {target} {variable}=… ran a command"
    assert result.returncode != 0, result.stdout[-500:]
    if target != "test-image":  # pytest's own usage error for a bad --image
        errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1, result.stderr


def test_bake_args_are_split_as_words_not_evaluated() -> None:
    assert make_vars.argv_for("build", ["STACK", "BAKE_ARGS"], {
        "STACK": "cuda", "BAKE_ARGS": "--set 'kernels-cuda.contexts.apex=/src/my apex' --no-cache"}) == [
        "build", "--stack", "cuda", "--", "--set", "kernels-cuda.contexts.apex=/src/my apex", "--no-cache"]


def test_an_unbalanced_quote_in_bake_args_is_one_line(capsys: pytest.CaptureFixture) -> None:
    os.environ["BAKE_ARGS"] = "--set 'x"
    try:
        assert cli.main(["from-make", "build", "BAKE_ARGS"]) == 2
    finally:
        del os.environ["BAKE_ARGS"]
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "BAKE_ARGS" in err[0]


def test_switches_follow_their_value() -> None:
    assert make_vars.argv_for("jobs", ["FORCE"], {"FORCE": "1"}) == ["jobs", "--force"]
    assert make_vars.argv_for("jobs", ["FORCE"], {"FORCE": "0"}) == ["jobs"]
    assert make_vars.argv_for("jobs", ["FORCE"], {}) == ["jobs"]


def test_make_build_arm64_makes_the_arm64_base_then_builds_for_linux_arm64() -> None:
    """The emulated build someone times: `make emulation` first, then the arm64 base and the layers, each a phase."""
    lines = dry_run("build-arm64", {"STACK": "debian", "LAYER": "runtime"})
    assert lines[0] == "bash .ci/emulation.sh"
    steps = [line for line in lines if "phase.sh arm64-" in line]
    assert len(steps) == 2 and all("PLATFORM=linux/arm64 " in line for line in steps)
    values = {"STACK": "debian", "LAYER": "runtime", "PLATFORM": "linux/arm64"}
    assert [a for line in steps for a in tool_argvs(line, values)] == [
        ["base", "--stack", "debian", "--platform", "linux/arm64"],
        ["build", "--stack", "debian", "--layer", "runtime", "--platform", "linux/arm64"]]


def test_make_test_arm64_certifies_the_emulated_image_once() -> None:
    body = " ".join(dry_run("test-arm64", {}))
    assert 'image="mcore-images:${LAYER:-runtime}-${STACK:-debian}.arm64"' in body
    assert 'phase.sh arm64-certify python3 -m mcore_images certify "$image" --out build/arm64-certificate -- --cpu ' \
           '--nproc 2 --watchdog 3600' in body
    assert "pytest" not in body and "--skip-image-tests" not in body, "certify runs the image tests itself"

