"""`mcore-images build` (what `make build` runs): validate everything, then call docker buildx bake.

Order matters: stack name, group, rules and job counts are checked first, and each bad input
ends with one line and a non-zero exit before docker is touched.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcore_images import docker_cli, tools
from mcore_images.catalogue import components, images, platforms, tags
from mcore_images.catalogue.stacks import Stack, checkout_root, load_stacks, repo_root
from mcore_images.command import Command, print_json
from mcore_images.errors import InputError
from mcore_images.image_build import bake_args, bake_file, debian_base, dockerfile, jobs
from mcore_images.image_build.bake_log import BakeLog
from mcore_images.launch import emulation
from mcore_images.resolve import engine_records, lock_check, overrides, rules
from mcore_images.resolve.plan import make_plan, select

SYSTEM_CA = Path("/etc/ssl/certs/ca-certificates.crt")
CANDIDATES = Path("build") / "candidates"
"""Where a candidate build writes bake's metadata (`mcore-images matrix --candidates build/candidates`)."""


def bake_targets(selected: list[Stack], stack: str | None, group: str | None, layer: str | None) -> list[str]:
    """A group builds as bake defines it; a stack builds each of its layers (each gets its tag)."""
    if stack:
        layers = selected[0].built_layers
        if layer:
            if layer not in layers:
                raise InputError(f"stack '{stack}' has no layer '{layer}'; choose one of: {', '.join(layers)}")
            layers = layers[: layers.index(layer) + 1]
        return [f"{name}-{stack}" for name in layers]
    return [group or "default"]


def candidate_targets(selected: list[Stack], stack: str | None, group: str | None, layer: str | None,
                      bake_files: list[Path]) -> list[str]:
    """The concrete bake targets a build pushes: a stack's layers, or the group's targets as bake defines them."""
    if stack:
        return bake_targets(selected, stack, group, layer)
    files = [a for f in bake_files for a in ("-f", str(f))]
    printed = docker_cli.run("buildx", "bake", *files, "--print", group or "default", capture_output=True,
                             text=True, check=False)
    if printed.returncode != 0:
        raise InputError(f"docker buildx bake --print {group} failed ({printed.stderr.strip()[-300:]}); run "
                         "`make docker-engine`")
    return list(json.loads(printed.stdout)["target"])


def check_docker() -> None:
    probe = docker_cli.run("buildx", "version", capture_output=True, check=False)
    if probe.returncode != 0:
        raise InputError("the docker buildx plugin is missing; run `make docker-engine`")
    probe = docker_cli.run("info", "--format", "{{.ServerVersion}}", capture_output=True, check=False)
    if probe.returncode != 0:
        raise InputError("the Docker Engine does not answer; start it with `make docker-engine`")


def bake_env(request: BuildRequest) -> dict[str, str]:
    """The environment bake runs with: explicit job counts (bake turns them into build secrets, which
    stay out of the compile step's cache key), the CA bundle secret, the commit for the labels and its
    time for the image dates."""
    env = dict(os.environ)
    for name, value in (("MAX_JOBS", request.max_jobs), ("NVCC_THREADS", request.nvcc_threads)):
        env.pop(name, None)
        if value:
            env[name] = value
    if "CA_BUNDLE" not in env and SYSTEM_CA.is_file():
        env["CA_BUNDLE"] = str(SYSTEM_CA)
    if "GIT_SHA" not in env:
        sha = _git("rev-parse", "HEAD")
        if sha:
            env["GIT_SHA"] = sha
    if "SOURCE_DATE_EPOCH" not in env:
        # BuildKit dates the image config and its history by it instead of the build's clock, so one commit
        # rebuilt gives the same digest. No stage declares it: a RUN step's cache key stays the same across
        # commits.
        epoch = _git("log", "-1", "--format=%ct")
        if epoch:
            env["SOURCE_DATE_EPOCH"] = epoch
    return env


def _git(*args: str) -> str:
    """One line of git's output in the checkout, or "" outside a git checkout (or where git is not installed: the
    build then labels no commit, as it does outside a checkout)."""
    try:
        result = tools.run(["git", *args], capture_output=True, text=True, cwd=repo_root(), check=False)
    except InputError:
        return ""
    return result.stdout.strip() if result.returncode == 0 else ""


@dataclass(frozen=True)
class BuildRequest:
    """One `mcore-images build`: what to build, how many compile jobs, which pins to override."""

    stack: str | None = None
    group: str | None = None
    layer: str | None = None
    max_jobs: str | None = None
    nvcc_threads: str | None = None
    sets: tuple[str, ...] = ()
    bake_args: tuple[str, ...] = ()
    dry_run: bool = False
    candidate: str | None = None
    registry: str | None = None
    force: bool = False
    json: bool = False
    """Print one JSON document (tags, digests, per-target steps and seconds) on stdout; bake's output and
    every other line go to stderr."""
    local_tag: str | None = None
    """Tag each built image REPO:<local_tag>-<target> only (no stack tags, no push): a rebuild that must not
    move the tags of what was built before (`mcore-images reproduce`)."""
    platform: str | None = None
    """The one platform to build (``linux/arm64``); None: this machine's."""

    def validate(self) -> None:
        """Every input checked before anything is resolved or built; InputError names the fix."""
        if self.stack and self.group:
            raise InputError("give either STACK or GROUP, not both (e.g. `make build STACK=debian`)")
        if self.layer and not self.stack:
            raise InputError(f"--layer {self.layer} picks a layer of one stack; add --stack (e.g. --stack debian "
                             f"--layer {self.layer}), or build a group without --layer")
        if self.sets and not self.stack:
            raise InputError("--set overrides one stack's pins; add --stack (e.g. --stack debian --set mcore=0.16.0)")
        jobs.parse_positive("MAX_JOBS", self.max_jobs)
        jobs.parse_positive("NVCC_THREADS", self.nvcc_threads)
        bake_args.judge(self.bake_args)
        for option, value in (("--registry", self.registry), ("REGISTRY", os.environ.get("REGISTRY"))):
            if value and (problem := images.registry_problem(value, option)):
                raise InputError(problem)
        repo = os.environ.get("IMAGE_REPO")
        if repo is not None and (problem := images.repo_problem(repo, "IMAGE_REPO")):
            raise InputError(problem)
        if bool(self.candidate) != bool(self.registry):
            raise InputError("--candidate and --registry go together: candidate tags are pushed to a registry "
                             "(e.g. --candidate $(git rev-parse HEAD) --registry 127.0.0.1:5000)")
        if self.candidate:
            tags.candidate_tag("x", self.candidate, "--candidate")  # a git commit, or one line naming the fix
        if self.candidate and self.sets:
            raise InputError("--set builds are for trying a pin, not for pushing: drop --set or --candidate")
        if self.platform and (problem := platforms.problem(self.platform, "--platform")):
            raise InputError(problem)
        if self.local_tag is not None:
            if self.candidate or self.sets:
                raise InputError("--local-tag rebuilds the committed pins under its own tags: drop --candidate "
                                 "and --set")
            if not tags.TAG_PART.fullmatch(self.local_tag):
                raise InputError(f"--local-tag {self.local_tag!r} is not a tag's beginning; use letters, digits, "
                                 "'.', '_' and '-' (e.g. --local-tag reproduce-1a2b3c)")


def build_platform(request: BuildRequest, selected: list[Stack]) -> platforms.Platform | None:
    """The one platform this build makes (given, else this machine's), which every selected stack must list; None
    where bake's own default is that platform already: no platform given, every stack of the default platform alone
    (their targets name none), and this machine of that platform."""
    here = platforms.of_machine(emulation.machine())
    wanted = platforms.BY_NAME[request.platform] if request.platform else here
    if wanted is None:
        raise InputError(f"this machine is {emulation.machine()}, which no stack is built for; give --platform "
                         f"{platforms.DEFAULT.name} (emulated: `make emulation` first)")
    for stack in selected:
        if wanted.name not in stack.platforms:
            why = next((v.message for v in rules.check(stack.replace(platforms=(*stack.platforms, wanted.name)))
                        if v.rule.startswith("platform-")), None)
            fix = (f"build one of its platforms (--platform {stack.platforms[0]})" if request.platform else
                   f"give --platform {stack.platforms[0]} (emulated here: `make emulation` first)")
            raise InputError(f"stack '{stack.name}' is not built for {wanted.name} (its platforms: "
                             f"{', '.join(stack.platforms)}{'; ' + why if why else ''}); {fix}")
    bakes_it = not request.platform and wanted == here == platforms.DEFAULT
    if bakes_it and not any(stack.multi_platform for stack in selected):
        return None
    return wanted


def check_job_counts(request: BuildRequest, selected: list[Stack]) -> None:
    """Explicit MAX_JOBS / NVCC_THREADS judged against this machine (the local builder's) memory and CPUs
    for every component the build compiles, before bake starts; ``force`` accepts them anyway."""
    if not (request.max_jobs or request.nvcc_threads) or request.force:
        return
    resources = jobs.detect()
    for stack in selected:
        for c in components.CATALOGUE:
            if not c.compiled(stack) or c.compile_profile is None:
                continue
            try:
                jobs.plan(resources, c.compile_profile, len(stack.cuda_archs.split(";")), request.max_jobs,
                          request.nvcc_threads)
            except InputError as exc:
                raise InputError(f"stack {stack.name}: {exc}") from None


def _jobs_line(request: BuildRequest) -> str:
    given = [f"{k}={v}" for k, v in (("MAX_JOBS", request.max_jobs), ("NVCC_THREADS", request.nvcc_threads)) if v]
    if given:
        return (f"jobs: {' '.join(given)} given; the compile steps use them (passed as build secrets, so they "
                "are not part of the cache key) and plan the rest from the builder's own CPUs and memory")
    return "jobs: planned inside each compile step from the builder's own CPUs and memory (`mcore-images jobs`)"


def progress_mode(given: tuple[str, ...]) -> str | None:
    """buildx's display: the one given in the bake arguments (None: leave it to them), else plain in CI or
    into a pipe (and read for the summary), else buildx's own TTY display."""
    if any(a == "--progress" or a.startswith("--progress=") for a in given):
        return None
    return "plain" if os.environ.get("CI") or not sys.stdout.isatty() else "tty"


def summarize(log: BakeLog, metadata: Path, only: str | None, code: int, wall: float,
              stage_layer: Mapping[str, str]) -> dict[str, Any]:
    """Per target: its tags and digest (bake's metadata file), its image size where the engine has it, and
    the steps it took from the cache or ran (from a plain log; absent under the TTY display), each step
    counted for its stage's layer (``stage_layer``, read from the Dockerfile the build ran)."""
    meta: dict[str, Any] = {}
    if metadata.is_file():
        meta = {k: v for k, v in json.loads(metadata.read_text()).items() if isinstance(v, dict)}
    steps = log.per_target(stage_layer, only)
    rows = []
    for name in sorted(set(meta) | set(steps)):
        entry = meta.get(name, {})
        names = [t for t in str(entry.get("image.name", "")).split(",") if t]
        rows.append({"target": name, "tags": names, "digest": entry.get("containerimage.digest"),
                     "size_bytes": _size(names[0]) if names else None, **steps.get(name, {})})
    return {"exit_code": code, "wall_s": round(wall, 1), "metadata": str(metadata), "targets": rows}


def _size(ref: str) -> int | None:
    out = docker_cli.run("image", "inspect", "--format", "{{.Size}}", ref, capture_output=True,
                         text=True, check=False)
    return int(out.stdout.strip()) if out.returncode == 0 and out.stdout.strip().isdigit() else None


def describe(summary: dict[str, Any]) -> str:
    lines = [f"summary: exit {summary['exit_code']} after {summary['wall_s']:.0f} s"]
    for row in summary["targets"]:
        steps = (f"{row['steps_built']} steps built in {row['build_s']:.0f} s, {row['steps_cached']} cached"
                 if "steps_built" in row else "steps not read (TTY display)")
        size = f"{row['size_bytes'] / 1e9:.2f} GB" if row.get("size_bytes") else "size unknown"
        lines.append(f"  {row['target']}: {steps}; {row.get('digest') or 'no digest'}; {size}; "
                     f"{', '.join(row['tags']) or 'no tags'}")
    return "\n".join(lines)


def own_tag(request: BuildRequest, target: str, repo: str, arch: str | None = None) -> str:
    """The only tag a candidate or --local-tag build gives ``target``, so no stack tag moves: candidates push
    candidate-<sha>-<target> (public tags come from `promote`; ``arch``: one platform of a multi-platform target,
    candidate-<sha>-<target>.<arch>, which `mcore-images index` joins), a local rebuild is <local_tag>-<target>."""
    if request.candidate:
        return tags.image(tags.candidate_tag(target, request.candidate, arch=arch), request.registry or "", repo)
    return tags.image(f"{request.local_tag}-{target}", "", repo)


@dataclass(frozen=True)
class Preflight:
    """What a build was judged to make, before anything is built, pushed, pruned or written."""

    stacks: dict[str, Stack]
    selected: list[Stack]
    changes: dict[str, str]
    group: str | None
    plans: list[Any]
    platform: platforms.Platform | None


def preflight(request: BuildRequest) -> Preflight:
    """Every check a build makes before it acts (inputs, rules, locks, job counts, platform, the Debian
    mirror): InputError (one line) or what to build. Reads files and package indexes; changes nothing."""
    request.validate()
    if request.candidate:  # what reaches bake from the environment, as judge() does the arguments after --
        bake_args.judge_environment(os.environ, checkout_root("build"))
    stacks = load_stacks()
    changes = overrides.parse(list(request.sets))
    group = None if request.stack else (request.group or "default")
    selected = select(stacks, request.stack, group)
    if changes:
        selected = [overrides.apply(selected[0], changes)]
        engine_records.read_candidates(selected[0])  # a version env/engines.json lacks is judged by its own metadata
        broken = rules.check(selected[0])
        if broken:
            raise InputError(f"with --set {' '.join(request.sets)}: {broken[0]}")
    plans = make_plan(selected, group)
    violations = [v for p in plans for v in p.violations]
    if not changes:  # an override's locks are resolved anew below; the committed ones must match the pins
        violations += [problem for s in selected for problem in lock_check.check_locks(s)]
    if violations:  # the rules first (the cause), then what follows from them (a stale lock, a shared tag)
        more = (f" (and {len(violations) - 1} more: `mcore-images plan` and `mcore-images lock --check` list them)"
                if len(violations) > 1 else "")
        raise InputError(f"{violations[0]}{more}")
    check_job_counts(request, selected)
    target_platform = build_platform(request, selected)
    if any(s.flavor == "debian" for s in selected) and (problem := debian_base.mirror_problem(
            os.environ.get("DEBIAN_MIRROR", debian_base.DEFAULT_MIRROR), "DEBIAN_MIRROR")):
        raise InputError(problem)
    return Preflight(stacks, selected, changes, group, plans, target_platform)


def resolved(cmd: list[str], env: dict[str, str], root: Path) -> dict[str, Any]:
    """The bake definition ``cmd`` (a ``docker buildx bake`` line) resolves to, as ``--print`` shows it."""
    keep, rest = [], iter(cmd)
    for arg in rest:  # what only builds (push, progress display, metadata file) is not part of the definition
        if arg == "--metadata-file":
            next(rest, None)
        elif arg != "--push" and not arg.startswith(("--progress", "--metadata-file=")):
            keep.append(arg)
    printed = tools.run([*keep, "--print"], env=env, cwd=root, capture_output=True, text=True, check=False)
    if printed.returncode != 0:
        said = (printed.stderr.strip().splitlines() or ["no output"])[-1]
        raise InputError(f"docker buildx bake --print cannot resolve this build ({said[:300]}); check the "
                         "arguments after --")
    return json.loads(printed.stdout)


def check_pushed_definition(cmd: list[str], own: int, env: dict[str, str], root: Path) -> None:
    """Refuse a candidate push whose arguments after -- change what any target is made from or where it goes:
    the definition bake resolves with them must equal the stack's own (cmd[:own]) but for cache settings."""
    found = bake_args.changed(resolved(cmd[:own], env, root), resolved(cmd, env, root))
    if found:
        raise InputError(f"the arguments after -- change what the pushed candidates are made from or where they go "
                         f"({', '.join(found[:4])}{' …' if len(found) > 4 else ''}): candidates are built from the "
                         "stack's own definition; drop them, or build without --candidate")


def build(request: BuildRequest) -> int:
    """Validate everything, then run docker buildx bake; returns bake's exit code."""
    checked = preflight(request)
    root = checkout_root("build")
    stacks, selected, changes, group, plans = (checked.stacks, checked.selected, checked.changes, checked.group,
                                               checked.plans)
    target_platform = checked.platform
    say = functools.partial(print, file=sys.stderr if request.json else sys.stdout, flush=True)
    say(_jobs_line(request))
    if target_platform is not None:
        say(f"platform: {target_platform.name}" + ("" if emulation.native(target_platform) else
                                                     f" (emulated on this {emulation.machine()} machine: QEMU)"))
    for note in (n for p in plans for n in p.told):  # notes and a model's needs: told, not refused
        say(f"note: {note}")
    targets = bake_targets(selected, request.stack, group, request.layer)
    stacks_json = root / "docker-bake.json"
    env = bake_env(request)
    if changes:
        changed_stacks, locks = overrides.workspace(stacks, selected[0], changes, root)
        stacks_json = changed_stacks.with_name(bake_file.PATH)
        bake_file.write(load_stacks(changed_stacks).values(), stacks_json)
        env["LOCKS"] = str(locks)
        say(f"override: {', '.join(f'{k}={v}' for k, v in changes.items())}; bake file {stacks_json}, "
              f"locks {locks} (from layer '{overrides.first_changed_layer(changes)}' up)")
    progress = progress_mode(request.bake_args)
    cmd = docker_cli.argv("buildx", "bake", "-f", str(root / "docker-bake.hcl"), "-f", str(stacks_json),
                          *([f"--progress={progress}"] if progress else []), *targets)
    if request.candidate or request.local_tag:
        bake_files = [root / "docker-bake.hcl", stacks_json]
        multi = {tags.target(layer, s) for s in stacks.values() if s.multi_platform for layer in s.built_layers}
        arch = target_platform.arch if target_platform is not None else None
        for name in candidate_targets(selected, request.stack, group, request.layer, bake_files):
            tag = own_tag(request, name, env.get("IMAGE_REPO", tags.DEFAULT_REPO), arch if name in multi else None)
            cmd += ["--set", f"{name}.tags={tag}"]
    if target_platform is not None:
        # One platform per build: the docker driver loads one platform's image, and a multi-platform stack's
        # index is assembled from the platforms' pushed candidates (`mcore-images index`).
        cmd += ["--set", f"*.platform={target_platform.name}"]
    if request.candidate:
        cmd += ["--push"]
    # One file per platform of a multi-platform candidate build: `mcore-images index` reads each platform's digests.
    per_platform = request.candidate and target_platform is not None and any(s.multi_platform for s in selected)
    name = f"bake-metadata.{target_platform.arch}.json" if per_platform and target_platform else "bake-metadata.json"
    metadata = root / (CANDIDATES if request.candidate else Path("build")) / name
    cmd += ["--metadata-file", str(metadata)]
    # An emulated platform's images are tagged <tag>.<arch> (runtime-debian.arm64), so they never take this
    # machine's own platform's tags from the images built before.
    emulated = target_platform is not None and not emulation.native(target_platform)
    suffix = f"{tags.PLATFORM_SEPARATOR}{target_platform.arch}" if emulated and target_platform else ""
    if changes:
        # An override build gets its full tags only: the short alias (runtime-debian) keeps
        # pointing at the image built from the committed pins.
        changed = selected[0]
        registry = env.get("REGISTRY", "")
        for name in changed.built_layers:
            full = tags.image(tags.layer_tag(name, changed), registry)
            cmd += ["--set", f"{name}-{changed.name}.tags={full}{suffix}"]
    elif suffix and not (request.candidate or request.local_tag):
        known = {tags.target(layer, s): (s, layer) for s in stacks.values() for layer in s.built_layers}
        bake_files = [root / "docker-bake.hcl", stacks_json]
        for name in candidate_targets(selected, request.stack, group, request.layer, bake_files):
            stack, layer = known[name]
            for tag in tags.tags(layer, stack, env.get("REGISTRY", ""), env.get("IMAGE_REPO", tags.DEFAULT_REPO)):
                cmd += ["--set", f"{name}.tags={tag}{suffix}"]
    cmd += list(request.bake_args)
    if request.candidate and request.bake_args:  # judged on what bake resolves, dry run or not
        check_docker()
        check_pushed_definition(cmd, len(cmd) - len(request.bake_args), env, root)
    say("bake: " + " ".join(cmd[3:]))
    if request.dry_run:
        if request.json:
            print_json({"dry_run": True, "command": cmd})
        return 0
    check_docker()
    if target_platform is not None and (problem := emulation.problem(target_platform)):
        raise InputError(problem)
    metadata.parent.mkdir(parents=True, exist_ok=True)
    metadata.unlink(missing_ok=True)  # this run's, or none: never an earlier build's digests
    for s in selected:
        if s.flavor == "debian":
            say(debian_base.ensure(s, platform=target_platform))
    start = time.monotonic()
    log = BakeLog()
    if progress == "plain":
        # Streamed through, line by line, and read for the summary.
        with tools.popen(cmd, env=env, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         errors="replace", bufsize=1) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                say(line, end="")
                log.feed(line)
        code = proc.returncode
    else:
        code = tools.run(cmd, env=env, cwd=root, check=False, stdout=sys.stderr if request.json else None
                         ).returncode
    summary = summarize(log, metadata, targets[0] if len(targets) == 1 else None, code, time.monotonic() - start,
                        dockerfile.stage_layers(root))
    if request.json:
        print_json(summary)
    else:
        say(describe(summary))
    return code


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--stack", help="build every layer of one stack (each gets its tags)")
    p.add_argument("--group", help="build a bake group: default (the debian runtime), ci, release, all")
    p.add_argument("--layer", help="with --stack: build up to this layer (base, kernels, runtime, app)")
    p.add_argument("--max-jobs", help="compile jobs (default: planned inside each compile step; validated)")
    p.add_argument("--nvcc-threads", help="nvcc --threads per compile job (default: planned; validated)")
    p.add_argument("--dry-run", action="store_true", help="validate and print the bake command only")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override one pin of --stack for this build (re-resolves the locks it touches)")
    p.add_argument("--candidate", metavar="SHA", help="push the images as candidate-SHA-<target> tags (only "
                   "`mcore-images promote` gives public tags); needs --registry")
    p.add_argument("--registry", help="with --candidate: the registry to push to, e.g. 127.0.0.1:5000")
    p.add_argument("--force", action="store_true",
                   help="accept a --max-jobs / --nvcc-threads that the planner's memory model says cannot fit")
    p.add_argument("--local-tag", metavar="NAME", help="tag the built images NAME-<target> only, locally: the "
                   "stack's tags stay where they are")
    p.add_argument("--platform", metavar="OS/ARCH", help="the one platform to build, one of the stack's (e.g. "
                   "linux/arm64, emulated on an x86_64 machine after `make emulation`); default: this machine's")


def _run(args: argparse.Namespace) -> int:
    return build(BuildRequest(args.stack, args.group, args.layer, args.max_jobs, args.nvcc_threads,
                              tuple(args.set), tuple(args.passthrough), args.dry_run, args.candidate, args.registry,
                              args.force, args.json, args.local_tag, args.platform))


COMMANDS = (Command("build", "Build a stack's or a group's images, once the rules and the locks hold.", _arguments,
                    _run, prints_data=True,
                    passthrough="docker buildx bake (e.g. --no-cache, --set <target>.contexts.apex=DIR)"),)
