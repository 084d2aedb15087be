"""`mcore-images build` (what `make build` runs): validate everything, then call docker buildx bake.

Order matters: stack name, group, rules and job counts are checked first, and each bad input
ends with one line and a non-zero exit before docker is touched.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from mcore_images import debian_base, jobs, overrides, rules, tags
from mcore_images.errors import InputError
from mcore_images.plan import make_plan, select
from mcore_images.stacks import Stack, load_stacks, repo_root

SYSTEM_CA = Path("/etc/ssl/certs/ca-certificates.crt")


def bake_targets(selected: list[Stack], stack: str | None, group: str | None, layer: str | None) -> list[str]:
    """A group builds as bake defines it; a stack builds each of its layers (each gets its tag)."""
    if stack:
        layers = selected[0].layers
        if layer:
            if layer not in layers:
                raise InputError(f"stack '{stack}' has no layer '{layer}'; choose one of: {', '.join(layers)}")
            layers = layers[: layers.index(layer) + 1]
        return [f"{name}-{stack}" for name in layers]
    return [group or "default"]


def check_docker() -> None:
    if not shutil.which("docker"):
        raise InputError("docker is not installed; run `make docker-engine` (or .ci/docker-engine.sh)")
    probe = subprocess.run(["docker", "buildx", "version"], capture_output=True, check=False)
    if probe.returncode != 0:
        raise InputError("the docker buildx plugin is missing; run `make docker-engine`")
    probe = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, check=False)
    if probe.returncode != 0:
        raise InputError("the Docker Engine does not answer; start it with `make docker-engine`")


def bake_env(plan: jobs.JobPlan) -> dict[str, str]:
    env = dict(os.environ)
    env.update(plan.env())
    if "CA_BUNDLE" not in env and SYSTEM_CA.is_file():
        env["CA_BUNDLE"] = str(SYSTEM_CA)
    if "GIT_SHA" not in env:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=repo_root(),
                             check=False)
        if sha.returncode == 0:
            env["GIT_SHA"] = sha.stdout.strip()
    return env


def build(stack: str | None = None, group: str | None = None, layer: str | None = None,
          max_jobs: str | None = None, nvcc_threads: str | None = None, dry_run: bool = False,
          extra: list[str] | None = None, sets: list[str] | None = None) -> int:
    stacks = load_stacks()
    if stack and group:
        raise InputError("give either STACK or GROUP, not both (e.g. `make build STACK=debian`)")
    changes = overrides.parse(sets or [])
    if changes and not stack:
        raise InputError("--set overrides one stack's pins; add --stack (e.g. --stack debian --set mcore=0.16.0)")
    group = None if stack else (group or "default")
    selected = select(stacks, stack, group)
    if changes:
        selected = [overrides.apply(selected[0], changes)]
        broken = rules.check(selected[0])
        if broken:
            raise InputError(f"with --set {' '.join(sets or [])}: {broken[0]}")
    violations = [v for p in make_plan(selected, group) for v in p.violations]
    if violations:
        for v in violations[1:]:
            print(f"error: {v}", file=sys.stderr)
        raise InputError(str(violations[0]))
    archs = max(len(s.cuda_archs.split(";")) for s in selected)
    job_plan = jobs.plan(jobs.detect(), component="te", archs=archs, max_jobs=max_jobs, nvcc_threads=nvcc_threads)
    print(f"jobs: MAX_JOBS={job_plan.max_jobs} NVCC_THREADS={job_plan.nvcc_threads} ({job_plan.reason})")
    targets = bake_targets(selected, stack, group, layer)
    root = repo_root()
    stacks_file = root / "docker-bake.json"
    env = bake_env(job_plan)
    if changes:
        stacks_file, locks = overrides.workspace(stacks, selected[0], changes, root)
        env["LOCKS"] = str(locks)
        print(f"override: {', '.join(f'{k}={v}' for k, v in changes.items())}; bake file {stacks_file}, "
              f"locks {locks} (from layer '{overrides.first_changed_layer(changes)}' up)")
    cmd = ["docker", "buildx", "bake", "-f", str(root / "docker-bake.hcl"), "-f", str(stacks_file),
           "--progress=plain", *targets]
    if changes:
        # An override build gets its full tags only: the short alias (runtime-debian) keeps
        # pointing at the image built from the committed pins.
        changed = selected[0]
        registry = env.get("REGISTRY", "")
        for name in changed.layers:
            full = tags.image(tags.layer_tag(name, changed), registry)
            cmd += ["--set", f"{name}-{changed.name}.tags={full}"]
    cmd += extra or []
    print("bake: " + " ".join(cmd[3:]))
    if dry_run:
        return 0
    check_docker()
    for s in selected:
        if s.flavor == "debian":
            print(debian_base.ensure(s))
    return subprocess.run(cmd, env=env, cwd=root, check=False).returncode
