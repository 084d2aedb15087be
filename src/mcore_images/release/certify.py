"""`mcore-images certify IMAGE`: bind an image's digest to its image-test and smoke results.

The digest comes from ``docker image inspect`` (the registry digest when the image has one, else the
local image ID, and the certificate says which) and is resolved before anything expensive runs.
The smoke runs inside the image and writes its own certificate; this module adds the image, the
digest and the image-test outcome to it. The certificate folder is written new and renamed into place
(create_only.py), so a folder certify did not write is never touched. Never imports torch, megatron-core or
the smoke package.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mcore_images import SOURCE_TREE, create_only, docker_cli, progress, schemas, tools
from mcore_images.catalogue import images, platforms
from mcore_images.command import Command
from mcore_images.errors import InputError
from mcore_images.launch import container, emulation
from mcore_images.release import framework_tests
from mcore_images.release.pytest_steps import VERBOSE, PytestSteps

Runner = Callable[..., subprocess.CompletedProcess]
ROOT = SOURCE_TREE
COMMAND = "certify"


@dataclass(frozen=True)
class ImageDigest:
    """Which image was certified, by content."""

    ref: str
    digest: str
    digest_source: str
    repo_digest: str | None = None
    labels: dict[str, str] | None = None
    """The image's io.mcore-images.* labels (stack, layer, pins): what a report files the certificate under."""
    size: int | None = None
    """The image's size as `docker image inspect` reports it (compressed content with the containerd store)."""
    platform: str | None = None
    """Its config's os/architecture (``linux/arm64``); the smoke records what the image itself says it runs on."""

    @property
    def foreign(self) -> str | None:
        """The platform to give `docker run` when this machine is another (the image runs under QEMU), else None."""
        found = platforms.BY_NAME.get(self.platform or "")
        return None if found is None or emulation.native(found) else found.name


def _repository_of(ref: str) -> str | None:
    try:
        return images.repository(ref)
    except ValueError:
        return None


def resolve_digest(ref: str, run: Runner = tools.run) -> ImageDigest:
    """The image's content digest from ``docker image inspect``; InputError when there is none."""
    if problem := images.reference_problem(ref):
        raise InputError(problem)
    try:
        proc = docker_cli.run("image", "inspect", "--format", "{{json .}}", ref, runner=run, capture_output=True,
                              text=True, timeout=60)
    except FileNotFoundError as exc:
        raise InputError(tools.missing(docker_cli.PROGRAM)) from exc
    if proc.returncode != 0:
        why = (proc.stderr or proc.stdout or "").strip().splitlines()
        raise InputError(f"image {ref} is not available locally ({why[0] if why else 'inspect failed'}): "
                         f"build or pull it first")
    try:
        data = json.loads(proc.stdout)
    except ValueError as exc:
        raise InputError(f"docker image inspect {ref} printed no JSON: check the Docker installation") from exc
    if isinstance(data, list):
        data = data[0] if data else {}
    labels = {k: v for k, v in ((data.get("Config") or {}).get("Labels") or {}).items()
              if k.startswith(images.LABEL_PREFIX)}
    size = data.get("Size") if isinstance(data.get("Size"), int) else None
    platform = f"{data.get('Os') or 'linux'}/{data['Architecture']}" if data.get("Architecture") else None
    repo_digests = [d for d in data.get("RepoDigests") or [] if "@" in d]
    mine = [d for d in repo_digests if d.split("@", 1)[0] == _repository_of(ref)] or repo_digests
    if mine and images.is_digest(mine[0].split("@", 1)[1]):
        return ImageDigest(ref, mine[0].split("@", 1)[1],
                           "RepoDigests: the registry manifest digest (pull by it to get this image)", mine[0],
                           labels, size, platform)
    image_id = str(data.get("Id", ""))
    if images.is_digest(image_id):
        return ImageDigest(ref, image_id,
                           "image ID: the local config digest (the image has no registry digest: never pushed "
                           "or pulled); it identifies the image's content but cannot be pulled", None, labels, size,
                           platform)
    raise InputError(f"docker reported no sha256 digest for {ref}: rebuild the image and try again")


def image_test_command(ref: str) -> list[str]:
    """The image tests on ``ref``, a line per test (pytest_steps.py makes steps of them); the ten slowest are named at
    the end (where a certification's time goes)."""
    return [sys.executable, "-m", "pytest", *VERBOSE, "--durations=10", "tests/image", "--image", ref]


def followed(cmd: list[str], steps: PytestSteps, run: Runner, **kwargs: Any) -> int:
    """Run ``cmd`` with its output followed by ``steps`` as it comes (progress.follow); a runner other than
    tools.run (a test's) returns the whole output at once, which ``steps`` then reads line by line."""
    if run in (subprocess.run, tools.run):
        code = progress.follow(cmd, steps, **kwargs).returncode
    else:
        done = run(cmd, capture_output=True, text=True, **kwargs)
        for line in (done.stdout or "").splitlines():
            steps.line(line)
        code = done.returncode
    steps.finish()
    return -9 if code is None else code


def run_image_tests(ref: str, run: Runner = tools.run, say: progress.Progress | None = None) -> dict[str, Any]:
    """Run tests/image against the image, a step per test file; the outcome goes into the certificate."""
    cmd = image_test_command(ref)
    steps = PytestSteps("image tests", say or progress.Progress(COMMAND, sys.stdout))
    code = followed(cmd, steps, run, cwd=ROOT)
    steps.progress.say(f"image tests: {steps.last or f'exit {code}'}")
    return {"command": cmd, "exit_code": code, "passed": code == 0, "summary": steps.last}


def docker_smoke_command(ref: str, out_dir: Path, smoke_args: Sequence[str], memlock: bool = True,
                         platform: str | None = None) -> list[str]:
    """``docker run`` that runs the smoke in the image and writes the certificate to ``out_dir`` (``platform``: an
    image of another platform, run under QEMU)."""
    return container.run_command(ref, ["python", "-m", "mcore_images.smoke", "--out", "/cert", *smoke_args],
                                 gpus="--cpu" not in smoke_args, mounts={out_dir: "/cert"}, memlock=memlock,
                                 platform=platform)


def docker_bridge_command(ref: str, out_dir: Path, cpu: bool, memlock: bool = True,
                          platform: str | None = None) -> list[str]:
    """``docker run`` of the HF <-> Megatron bridge check, adding its section to the certificate."""
    return container.run_command(ref, ["python", "-m", "mcore_images.smoke.bridge", *(["--cpu"] if cpu else []),
                                       "--certificate", "/cert"], gpus=not cpu, mounts={out_dir: "/cert"},
                                 memlock=memlock, platform=platform)


BENCH_ARGS = ("--specs", "te", "--variants", "fusions")
"""The bench rows a GPU certification runs and gates: the default configs on Transformer Engine with
Megatron-LM's fusions, the rows env/bench-baselines.json keeps for each measured stack and GPU."""


def docker_bench_command(ref: str, out_dir: Path, memlock: bool = True, platform: str | None = None) -> list[str]:
    """``docker run`` of the throughput bench, adding its gated section to the certificate."""
    return container.run_command(ref, ["python", "-m", "mcore_images.smoke.bench", *BENCH_ARGS, "--certificate",
                                       "/cert"],
                                 gpus=True, mounts={out_dir: "/cert"}, memlock=memlock, platform=platform)


def _header(cert: dict[str, Any]) -> str:
    image, tests = cert["image"], cert.get("image_tests") or {}
    test_line = ("skipped (--skip-image-tests)" if tests.get("skipped")
                 else f"{'passed' if tests.get('passed') else 'FAILED'} — {tests.get('summary', '')}")
    return "\n".join([
        f"# Image certificate: {cert['certify']['status'].upper()} (exit {cert['certify']['exit_code']})",
        "",
        "| | |",
        "|---|---|",
        f"| image | `{image['ref']}` |",
        f"| digest | `{image['digest']}` |",
        f"| digest source | {image['digest_source']} |",
        f"| image tests | {test_line} |",
        *(f"| {name}'s own tests | {_framework_line(o)} |" for name, o in (cert.get("framework_tests") or {}).items()),
        f"| smoke | {cert.get('status', 'missing')} (exit {cert.get('exit_code', '–')}) |",
        f"| bench | {(cert.get('bench') or {}).get('status', 'not run')} |",
        "",
    ])


def _framework_line(outcome: dict[str, Any]) -> str:
    if not outcome.get("ran"):
        return f"not run: {outcome.get('error')}"
    known = f", {outcome['known']} failed for their own setup" if outcome.get("known") else ""
    return (f"{outcome['version']}: {outcome['passed']} passed, {outcome['failed']} failed{known}, "
            f"{outcome['skipped']} skipped ({outcome['selection']})")


def _smoke_certificate(path: Path, smoke_rc: int) -> dict[str, Any]:
    """The certificate the smoke wrote, or a could-not-run one saying why there is none to bind."""
    try:
        cert = json.loads(path.read_text(encoding="utf-8")) if path.exists() else None
        why = f"the smoke wrote no certificate (docker run exited {smoke_rc})"
    except (OSError, ValueError) as exc:
        cert, why = None, f"the smoke's certificate.json cannot be read ({exc}; docker run exited {smoke_rc})"
    if cert is not None and not isinstance(cert, dict):
        cert, why = None, f"the smoke's certificate.json is not a JSON object (docker run exited {smoke_rc})"
    return cert if cert is not None else {"schema": schemas.CERTIFICATE, "status": "could-not-run", "exit_code": 2,
                                          "error": why, "runs": []}


DOCKER_OWN_ERRORS = (125, 126, 127)
"""`docker run`'s own exit codes (the daemon, or the command could not start): the smoke could not run."""


def run_framework_tests(digest: ImageDigest, phase: Callable[[str], progress.Progress] | None = None
                        ) -> dict[str, Any]:
    """Each framework the image carries, its own CPU tests run in the image (framework_tests.py); ``phase`` says
    each suite's start and gives the progress its steps go to."""
    labels = digest.labels or {}
    python = labels.get(images.label("python"), "")
    found = platforms.BY_NAME.get(digest.platform or "")
    machine = found.machine if found else "x86_64"
    outcomes = {suite.distribution: framework_tests.run_suite(digest.ref, labels, suite, python, machine,
                                                              phase(suite_phase(suite)) if phase else None)
                for suite in framework_tests.carried(labels)}
    return {name: outcome for name, outcome in outcomes.items() if outcome is not None}


def suite_phase(suite: framework_tests.Suite) -> str:
    return f"{suite.distribution}'s own tests"


def phases(digest: ImageDigest, smoke_args: Sequence[str], skip_image_tests: bool, bench: bool) -> list[str]:
    """What certify runs, in order: the steps its progress counts."""
    gpus = "--cpu" not in smoke_args
    return [*([] if skip_image_tests else ["image tests"]),
            *(suite_phase(s) for s in framework_tests.carried(digest.labels or {})),
            "smoke", "bridge check", *(["bench"] if bench and gpus else [])]


def bind(out_dir: Path, digest: ImageDigest, tests: dict[str, Any], smoke_rc: int,
         framework: dict[str, Any] | None = None) -> int:
    """Add image, digest and test outcome to the smoke's certificate; returns the overall exit code.

    The container writes its own certificate, so its ``exit_code`` is the smoke's word only: the worse of it
    and docker's exit code counts (a certificate saying passed from a run that exited 137 is a failure)."""
    path = out_dir / "certificate.json"
    cert = _smoke_certificate(path, smoke_rc)
    smoke_code = cert.get("exit_code", 2) if cert.get("exit_code") in (0, 1, 2) else 2
    if smoke_code == 0 and smoke_rc != 0:
        smoke_code = 2 if smoke_rc in DOCKER_OWN_ERRORS else 1
        cert["error"] = (f"docker run exited {smoke_rc} although the smoke's certificate.json says it passed: the "
                         "run did not end as its certificate claims")
    tests_failed = not tests.get("skipped") and not tests["passed"]
    # A bridge that converts wrongly fails the image; one that cannot run (no bridge in the image,
    # or a bridge that cannot build models on this megatron-core) is recorded in its section.
    bridge_failed = (cert.get("bridge") or {}).get("exit_code") == 1
    # A throughput drop past the allowed percentage against the stack's baseline fails the image too.
    bench_failed = (cert.get("bench") or {}).get("status") == "failed"
    # A framework's own test that fails in the image, for a reason not listed as the test's own setup, fails it;
    # tests that could not be fetched (no index to reach) are recorded, not counted against the image.
    framework_failed = any(o.get("failed") for o in (framework or {}).values())
    code = 1 if (tests_failed or smoke_code == 1 or bridge_failed or bench_failed or framework_failed) else smoke_code
    cert["image"] = {k: v for k, v in asdict(digest).items()}
    cert["image_tests"] = tests
    if framework:
        cert["framework_tests"] = framework
    cert["certify"] = {"status": {0: "passed", 1: "failed", 2: "could-not-run"}[code], "exit_code": code}
    smoke_md = out_dir / "certificate.md"
    body = smoke_md.read_text() if smoke_md.exists() else f"Smoke: {cert.get('error')}\n"
    path.write_text(json.dumps(cert, indent=2) + "\n")
    smoke_md.write_text(_header(cert) + "\n" + body)
    return code


def certify(ref: str, out_dir: Path, smoke_args: Sequence[str], skip_image_tests: bool = False,
            run: Runner = tools.run, bench: bool = True) -> int:
    """Resolve the digest, run image tests, the smoke, the bridge check and (on GPUs) the gated bench in the
    image, and write the bound certificate. ``out_dir`` is written as a new folder (create_only.py): an existing
    one is replaced only when it is empty or an earlier certify's, whole, once everything has run."""
    target = create_only.claim(out_dir, COMMAND)
    digest = resolve_digest(ref, run)
    foreign = digest.foreign
    if foreign and (problem := emulation.problem(platforms.BY_NAME[foreign])):
        raise InputError(f"image {ref} is {foreign}: {problem}")
    say = progress.Progress(COMMAND, sys.stdout)
    say.say(f"{ref} → {digest.digest} ({digest.digest_source.split(':')[0]})"
            + (f", {foreign} under QEMU" if foreign else ""))
    planned = phases(digest, smoke_args, skip_image_tests, bench)

    def phase(name: str, detail: str = "") -> progress.Progress:
        say.say(f"step {planned.index(name) + 1}/{len(planned)}: {name}" + (f": {detail}" if detail else ""))
        return say

    with create_only.writing(target) as work:
        tests = {"skipped": True, "passed": False} if skip_image_tests else run_image_tests(
            ref, run, phase("image tests", " ".join(image_test_command(ref)[1:])))
        framework = run_framework_tests(digest, phase)
        memlock = container.memlock_unlimited(ref, run, foreign) if foreign else container.memlock_unlimited(ref, run)
        cmd = docker_smoke_command(ref, work, smoke_args, memlock, foreign)
        phase("smoke", " ".join(cmd))
        smoke_rc = run(cmd).returncode
        if (work / "certificate.json").exists():
            bridge = docker_bridge_command(ref, work, "--cpu" in smoke_args, memlock, foreign)
            phase("bridge check", " ".join(bridge))
            run(bridge)
            if "bench" in planned:
                bench_cmd = docker_bench_command(ref, work, memlock, foreign)
                phase("bench", " ".join(bench_cmd))
                run(bench_cmd)
        code = bind(work, digest, tests, smoke_rc, framework)
    say.say(f"wrote {out_dir / 'certificate.json'} and certificate.md (exit {code})")
    return code


def default_out(image: str) -> Path:
    """``out/certify/<image with / and : made safe>``."""
    return Path("out") / "certify" / re.sub(r"[^A-Za-z0-9._-]+", "_", image)


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("image", help="image reference, e.g. mcore-images:runtime-debian or REPO@sha256:…")
    p.add_argument("--out", help="folder for certificate.json/.md (default: out/certify/<image>): a new or empty "
                   "one, or one `certify` wrote before (then replaced)")
    p.add_argument("--skip-image-tests", action="store_true",
                   help="smoke only; the certificate records that the image tests did not run")
    p.add_argument("--no-bench", dest="bench", action="store_false",
                   help="on GPUs, skip the throughput bench (its regression gate then cannot fail the image)")


def _run(args: argparse.Namespace) -> int:
    if problem := images.reference_problem(args.image):
        raise InputError(problem)
    out = Path(args.out) if args.out else default_out(args.image)
    return certify(args.image, out, list(args.passthrough), skip_image_tests=args.skip_image_tests,
                   bench=args.bench)


COMMANDS = (Command(COMMAND, "Test an image (image tests, its frameworks' own tests, smoke, bridge) and write its "
                    "certificate.", _arguments, _run,
                    description="Resolve IMAGE's digest (docker image inspect), run tests/image, the smoke suite, "
                    "the bridge check and, on GPUs, the bench with its regression gate in the image, and write "
                    "certificate.json and certificate.md.",
                    passthrough="python -m mcore_images.smoke"),)
