"""`make -n` of a target with every make variable set, and the tool commands its recipe runs (the
`from-make` lines expanded as the tool expands them): what the Makefile tests walk."""

from __future__ import annotations

import os
import re
import shlex
import subprocess

from mcore_images.image_build import make_vars
from tests.unit.conftest import ROOT


def make_targets() -> list[str]:
    out = subprocess.run(["make", "-s", "-C", str(ROOT), "help"], capture_output=True, text=True, check=True).stdout
    return [m.group(1) for line in out.splitlines() if (m := re.match(r"^\s+(?:\x1b\[\d+m)?([a-z][\w-]*)", line))]


VALUES = {"STACK": "debian", "GROUP": "ci", "LAYER": "runtime", "PLATFORM": "linux/arm64", "MAX_JOBS": "2",
          "NVCC_THREADS": "1",
          "REGISTRY": "registry.example/acme", "SHA": "0123456789abcdef", "KEY": "cosign.pub", "POLICY": "ci",
          "EXECUTE": "1", "IMAGE": "registry.example/acme/mcore-images@sha256:" + "0" * 64,
          "BAKE_ARGS": "--set kernels-cuda.contexts.apex=/src/apex"}


def dry_run(target: str, values: dict[str, str]) -> list[str]:
    """The recipe lines `make -n` prints, continuation lines joined. make runs a line that names $(MAKE) even
    under -n, so `ci`'s `.ci/phase.sh` lines run: without CI_PHASES and CI_STARTED they record nothing in the
    phase table of a CI run these tests are part of."""
    env = {k: v for k, v in os.environ.items() if k not in ("CI_PHASES", "CI_STARTED")}
    env = {**env, "MAKEFLAGS": "", **values}
    out = subprocess.run(["make", "-n", "-s", "-C", str(ROOT), target, *(f"{k}={v}" for k, v in values.items())],
                         capture_output=True, text=True, env=env, check=False)
    return out.stdout.replace("\\\n", " ").splitlines()


TOOL_CALL = re.compile(r"-m mcore_images ([^;|)&]*)")


def tool_argvs(line: str, values: dict[str, str]) -> list[list[str]]:
    """The argv of each `python -m mcore_images …` in one recipe line, `from-make` expanded as the tool
    expands it."""
    found = []
    for call in TOOL_CALL.finditer(line):
        argv = shlex.split(call.group(1))
        if argv[:1] == ["from-make"]:
            own, fixed = (argv[1:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv[1:], [])
            argv = make_vars.argv_for(own[0], own[1:], values, fixed)
        found.append(argv)
    return found


