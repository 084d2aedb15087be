"""The GitHub Actions workflows, checked statically: GitHub's workflow schema (check-jsonschema,
vendored, offline), actionlint (.github/scripts/actionlint.sh), shellcheck on every `run:` step, every
action pinned by commit, and the release pipeline's shape (matrix from env/, build by digest,
certificate-gated promotion, CI = .ci/run)."""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from mcore_images import cli
from mcore_images.catalogue.stacks import Stack
from tests.support.host import HOW, need
from tests.unit.conftest import ROOT

WORKFLOWS = ROOT / ".github" / "workflows"
FILES = sorted(WORKFLOWS.glob("*.yml"))
EXPR = "${{"

# Every third-party action, pinned by the commit of a release tag (read from each repository's
# tags), and the inputs its action.yml declares at that commit.
PINS: dict[str, tuple[str, str, set[str]]] = {
    "actions/checkout": ("3d3c42e5aac5ba805825da76410c181273ba90b1", "v7.0.1", {
        "repository", "ref", "token", "ssh-key", "ssh-known-hosts", "ssh-strict", "ssh-user", "persist-credentials",
        "path", "clean", "filter", "sparse-checkout", "sparse-checkout-cone-mode", "fetch-depth", "fetch-tags",
        "show-progress", "lfs", "submodules", "set-safe-directory", "github-server-url", "allow-unsafe-pr-checkout"}),
    "actions/setup-python": ("5fda3b95a4ea91299a34e894583c3862153e4b97", "v7.0.0", {
        "python-version", "python-version-file", "cache", "architecture", "check-latest", "token",
        "cache-dependency-path", "update-environment", "allow-prereleases", "freethreaded", "pip-version"}),
    "actions/upload-artifact": ("bbbca2ddaa5d8feaa63e36b76fdaad77386f024f", "v7.0.0", {
        "name", "path", "if-no-files-found", "retention-days", "compression-level", "overwrite",
        "include-hidden-files", "archive"}),
    "actions/download-artifact": ("3e5f45b2cfb9172054b4087a40e8e0b5a5461e7c", "v8.0.1", {
        "name", "artifact-ids", "path", "pattern", "merge-multiple", "github-token", "repository", "run-id",
        "skip-decompress", "digest-mismatch"}),
    "docker/setup-buildx-action": ("37fe631027851001ddb9b187196cc803df7f5f0e", "v4.3.0", {
        "version", "driver", "driver-opts", "buildkitd-flags", "buildkitd-config", "buildkitd-config-inline", "use",
        "name", "endpoint", "platforms", "append", "keep-state", "cache-binary", "cleanup"}),
    "docker/login-action": ("4907a6ddec9925e35a0a9e82d7399ccc52663121", "v4.1.0", {
        "registry", "username", "password", "ecr", "scope", "logout", "registry-auth"}),
    "docker/bake-action": ("a66e1c87e2eca0503c343edf1d208c716d54b8a8", "v7.1.0", {
        "builder", "allow", "call", "files", "no-cache", "pull", "load", "provenance", "push", "sbom", "set",
        "source", "targets", "github-token"}),
    "oras-project/setup-oras": ("38de303aac69abb66f3e6255b7198bff35f323e3", "v2.0.0", {"version", "url", "checksum"}),
    # The Pages pair: pins as published workflows use them; inputs from each repository's action.yml
    # (a later stored version: the inputs these releases declare are the same).
    "actions/upload-pages-artifact": ("56afc609e74202658d3ffba0e8f6dda462b719fa", "v3.0.1",
                                      {"name", "path", "retention-days"}),
    "actions/deploy-pages": ("d6db90164ac5ed86f2b6aed7e0febac5b3c0c03e", "v4.0.5", {
        "token", "timeout", "error_count", "reporting_interval", "artifact_name", "preview"}),
}


def load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    if True in data:  # YAML 1.1 reads the key `on` as True
        data["on"] = data.pop(True)
    return data


@pytest.fixture(scope="module")
def workflows() -> dict[str, dict[str, Any]]:
    return {path.name: load(path) for path in FILES}


def steps(workflow: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for job_id, job in workflow["jobs"].items():
        for step in job.get("steps", []):
            yield job_id, step


def runs(workflow: dict[str, Any]) -> list[str]:
    return [step["run"] for _, step in steps(workflow) if "run" in step]


def strings(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield str(key)
            yield from strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from strings(value)
    elif node is not None:
        yield str(node)


def test_every_workflow_runs_on_an_event_or_for_a_caller(workflows: dict[str, dict[str, Any]]) -> None:
    called = {str(job.get("uses", "")).removeprefix("./.github/workflows/")
              for w in workflows.values() for job in w["jobs"].values()}
    for name, workflow in workflows.items():
        triggers = workflow.get(True) or workflow.get("on") or {}
        assert set(triggers) - {"workflow_call"} or name in called, f"{name} never runs"


# ---------------------------------------------------------------------------------------------
# Linters


def test_github_workflow_schema() -> None:
    need("check-jsonschema")
    result = subprocess.run(["check-jsonschema", "--builtin-schema", "vendor.github-workflows", *map(str, FILES)],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint() -> None:
    need("actionlint")
    result = subprocess.run(["bash", ".github/scripts/actionlint.sh"], cwd=ROOT, capture_output=True, text=True,
                            check=False, timeout=600)
    assert result.returncode != 3, f"{result.stderr.strip()}: {HOW['actionlint']}"
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_run_step_passes_shellcheck(tmp_path: Path, workflows: dict[str, dict[str, Any]]) -> None:
    """Each `run:` body as the bash GitHub runs it (`bash -e -o pipefail`), plus .github/scripts."""
    need("shellcheck")
    scripts = sorted(str(p) for p in (ROOT / ".github" / "scripts").glob("*.sh"))
    for name, workflow in workflows.items():
        for i, body in enumerate(runs(workflow)):
            script = tmp_path / f"{name}.{i}.sh"
            script.write_text("#!/usr/bin/env bash\nset -eo pipefail\n" + body)
            scripts.append(str(script))
    result = subprocess.run(["shellcheck", "--severity=style", *scripts], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout


def test_scripts_parse_with_bash_n() -> None:
    for script in (ROOT / ".github" / "scripts").glob("*.sh"):
        result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, check=False)
        assert result.returncode == 0, f"{script}: {result.stderr}"


# ---------------------------------------------------------------------------------------------
# Hygiene


def test_every_action_is_pinned_by_commit_with_its_release_in_a_comment() -> None:
    for path in FILES:
        for line in path.read_text().splitlines():
            match = re.match(r"^\s*(?:-\s+)?uses:\s*(\S+)(.*)$", line)
            if not match or match.group(1).startswith("./"):
                continue
            action, _, ref = match.group(1).partition("@")
            assert action in PINS, f"{path.name}: {action} has no verified pin in PINS"
            sha, tag, _ = PINS[action]
            assert ref == sha, f"{path.name}: {action}@{ref} is not pinned to {sha} ({tag})"
            assert match.group(2).strip() == f"# {tag}", f"{path.name}: {action} pin lacks the comment '# {tag}'"


def test_action_inputs_exist_at_the_pinned_commit(workflows: dict[str, dict[str, Any]]) -> None:
    for name, workflow in workflows.items():
        for job_id, step in steps(workflow):
            uses = step.get("uses", "")
            if uses and not uses.startswith("./"):
                unknown = set(step.get("with", {})) - PINS[uses.split("@")[0]][2]
                assert not unknown, f"{name}:{job_id}: {uses} has no input(s) {sorted(unknown)}"


def test_no_expression_is_expanded_inside_a_script(workflows: dict[str, dict[str, Any]]) -> None:
    """Inputs, matrix values and outputs reach scripts through env: (no script injection)."""
    for name, workflow in workflows.items():
        for body in runs(workflow):
            assert EXPR not in body, f"{name}: pass {body[body.index(EXPR):][:40]}… through env:"


# Write access beyond packages, granted to one job each and for one reason.
WRITERS = {("outdated.yml", "bump"): {("contents", "write"), ("pull-requests", "write")},
           ("promote.yml", "report"): {("pages", "write"), ("id-token", "write")}}
"""The upstream watch pushes a branch of bumped pins and opens a pull request for CI to judge; the
promotion publishes the report site of the certificate it promoted (GitHub Pages needs both)."""


def test_least_privilege_permissions(workflows: dict[str, dict[str, Any]]) -> None:
    for name, workflow in workflows.items():
        assert workflow["permissions"] == {"contents": "read"}, name
        for job_id, job in workflow["jobs"].items():
            granted = job.get("permissions", {})
            allowed = {("contents", "read"), ("packages", "write"), *WRITERS.get((name, job_id), set())}
            assert set(granted.items()) <= allowed, f"{name}:{job_id}"


def test_checkouts_do_not_keep_credentials(workflows: dict[str, dict[str, Any]]) -> None:
    for name, workflow in workflows.items():
        for _, step in steps(workflow):
            if step.get("uses", "").startswith("actions/checkout@"):
                assert step.get("with", {}).get("persist-credentials") is False, name


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_mcore_images_call_matches_the_cli(workflows: dict[str, dict[str, Any]]) -> None:
    """Subcommands and options the workflows use exist."""
    subs = _subparsers(cli.parser())
    calls = 0
    for name, workflow in workflows.items():
        for body in runs(workflow):
            joined = body.replace("\\\n", " ")
            for command in re.findall(r"(?:python -m mcore_images|mcore-images) ([^|;&>)]*)", joined):
                words = shlex.split(command)
                assert words[0] in subs, f"{name}: no subcommand {words[0]}"
                known = {o for a in subs[words[0]]._actions for o in a.option_strings}
                unknown = [w for w in words[1:] if w.startswith("--") and w not in known]
                assert not unknown, f"{name}: mcore-images {words[0]} has no option(s) {unknown}"
                calls += 1
    assert calls >= 6


# ---------------------------------------------------------------------------------------------
# The pipeline's shape


def test_ci_runs_exactly_ci_run(workflows: dict[str, dict[str, Any]]) -> None:
    ci = workflows["ci.yml"]
    assert list(ci["jobs"]) == ["ci"] and ci["jobs"]["ci"]["runs-on"] == "ubuntu-24.04"
    bodies = runs(ci)
    assert bodies[-1] == "bash .github/scripts/in-debian.sh bash .ci/run"
    for body in bodies[:-1]:  # runner housekeeping only: no second list of CI steps
        assert not re.search(r"\b(make|pytest|ruff|shellcheck|hadolint|docker|bake)\b", body), body
    script = (ROOT / ".github" / "scripts" / "in-debian.sh").read_text()
    assert "--privileged" in script and "debian:bookworm" in script and 'exec "$@"' in script


def test_the_release_matrix_comes_from_the_cli_not_yaml(workflows: dict[str, dict[str, Any]],
                                                        stacks: dict[str, Stack]) -> None:
    build = workflows["build.yml"]
    matrix_job = build["jobs"]["matrix"]
    assert any("python -m mcore_images matrix --group release" in body for body in runs({"jobs": {"m": matrix_job}}))
    assert build["jobs"]["build"]["needs"] == "matrix"
    assert build["jobs"]["build"]["strategy"]["matrix"] == "${{ fromJSON(needs.matrix.outputs.build) }}"
    assert build["jobs"]["smoke"]["strategy"]["matrix"] == "${{ fromJSON(needs.candidates.outputs.certify) }}"
    assert any("python -m mcore_images matrix --candidates" in body for body in runs(build))
    # No stack, target or version from env/ is written in any workflow (a job's container image, such as
    # debian:bookworm, names an OS, not a stack).
    def without_containers(workflow: dict[str, Any]) -> dict[str, Any]:
        jobs = {k: {f: v for f, v in job.items() if f != "container"} for k, job in workflow["jobs"].items()}
        return {**workflow, "jobs": jobs}

    words = {w for path in FILES for s in strings(without_containers(load(path)))
             for w in re.split(r"[^A-Za-z0-9_.-]+", s)}
    for stack in stacks.values():
        named = {stack.name, *(f"{layer}-{stack.name}" for layer in stack.layers), stack.mcore, stack.torch}
        assert not named & words, f"workflows name {sorted(named & words)} from env/stacks.json"
    for path in FILES:
        for stack in stacks.values():
            assert f"'{stack.name}'" not in path.read_text() and f'"{stack.name}"' not in path.read_text()


def test_build_pushes_candidates_by_digest_with_attestations_and_cache(workflows: dict[str, dict[str, Any]]) -> None:
    build = workflows["build.yml"]["jobs"]["build"]
    bake = next(s for s in build["steps"] if s.get("uses", "").startswith("docker/bake-action@"))
    assert bake["with"]["push"] is True and bake["with"]["sbom"] is True
    assert bake["with"]["provenance"] == "mode=max"
    assert bake["with"]["targets"] == "${{ matrix.targets }}" and bake["with"]["set"] == "${{ matrix.set }}"
    assert bake["with"]["source"] == "."
    assert bake["env"]["CACHE_FROM"] == "type=registry,ref=${{ matrix.cache_ref }}"
    assert bake["env"]["CACHE_TO"].startswith("type=registry,ref=${{ matrix.cache_ref }},mode=max")
    assert bake["env"]["GIT_SHA"] == "${{ github.sha }}"
    assert any(s.get("uses", "").startswith("docker/setup-buildx-action@") for s in build["steps"])
    digests = next(s for s in build["steps"] if s.get("name") == "Candidate digests")
    assert digests["env"]["METADATA"] == "${{ steps.bake.outputs.metadata }}"
    assert "containerimage.digest" in digests["run"] and "GITHUB_STEP_SUMMARY" in digests["run"]
    upload = next(s for s in build["steps"] if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["with"]["name"] == "bake-metadata-${{ matrix.stack }}-${{ matrix.arch }}"


def test_each_platform_builds_natively_and_one_job_joins_them_per_target(workflows: dict[str, dict[str, Any]]) -> None:
    """arm64 builds on GitHub's Arm runners (no emulation), amd64 on x64 ones; then `mcore-images index` joins the
    platforms' candidates into one index per target, each platform is certified on its own GPU runner, and the
    target is promoted once, after every platform's certificate."""
    jobs = workflows["build.yml"]["jobs"]
    runs_on = jobs["build"]["runs-on"]
    assert "matrix.arch == 'arm64'" in runs_on and "ubuntu-24.04-arm" in runs_on
    assert "vars.BUILD_RUNS_ON_ARM64" in runs_on
    candidates = jobs["candidates"]
    body = "\n".join(runs({"jobs": {"c": candidates}}))
    assert 'python -m mcore_images index --candidates candidates --sha "$GITHUB_SHA"' in body
    assert body.index("mcore_images index") < body.index("mcore_images matrix --candidates candidates)")
    assert "python -m mcore_images matrix --candidates candidates --promotions" in body
    assert any(s.get("uses", "").startswith("docker/login-action@") for s in candidates["steps"])
    assert jobs["smoke"]["with"]["platform"] == "${{ matrix.platform }}" and jobs["smoke"]["with"]["promote"] is False
    promote = jobs["promote"]
    assert promote["needs"] == ["candidates", "smoke"] and promote["uses"] == "./.github/workflows/promote.yml"
    assert promote["strategy"]["matrix"] == "${{ fromJSON(needs.candidates.outputs.promote) }}"
    assert promote["with"]["certificate-artifact"] == "certificate-${{ matrix.layer }}-${{ matrix.stack }}-*"


def test_build_sets_every_bake_variable_it_names() -> None:
    """CACHE_FROM, CACHE_TO and GIT_SHA are variables of docker-bake.hcl (bake reads them from env)."""
    hcl = (ROOT / "docker-bake.hcl").read_text()
    for variable in ("CACHE_FROM", "CACHE_TO", "GIT_SHA", "MAX_JOBS", "NVCC_THREADS"):
        assert f'variable "{variable}"' in hcl


def test_gpu_smoke_certifies_the_candidate_by_digest(workflows: dict[str, dict[str, Any]]) -> None:
    smoke = workflows["gpu-smoke.yml"]
    assert {"workflow_call", "workflow_dispatch"} <= set(smoke["on"])
    job = smoke["jobs"]["certify"]
    labels = [json.loads(found) for found in re.findall(r"'(\[[^']*\])'", job["runs-on"])]
    assert labels == [["self-hosted", "linux", "arm64", "gpu", "gh200"], ["self-hosted", "linux", "x64", "gpu", "h100"]]
    assert "inputs.platform == 'linux/arm64'" in job["runs-on"]
    assert "vars.GPU_RUNS_ON_ARM64" in job["runs-on"] and "vars.GPU_RUNS_ON" in job["runs-on"]
    body = "\n".join(runs({"jobs": {"c": job}}))
    assert "*@sha256:*" in body and 'docker pull "$IMAGE"' in body
    assert 'python -m mcore_images certify "$IMAGE" --out cert' in body
    assert "cert/certificate.md >>\"$GITHUB_STEP_SUMMARY\"" in body
    upload = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert "cert/certificate.json" in upload["with"]["path"] and upload["if"] == "${{ !cancelled() }}"
    assert upload["with"]["name"] == "certificate-${{ inputs.layer }}-${{ inputs.stack }}-${{ steps.ref.outputs.arch }}"


def test_promotion_is_gated_on_a_passed_certificate(workflows: dict[str, dict[str, Any]]) -> None:
    gate = workflows["gpu-smoke.yml"]["jobs"]["promote"]
    assert gate["needs"] == "certify" and gate["uses"] == "./.github/workflows/promote.yml"
    assert "needs.certify.outputs.status == 'passed'" in gate["if"] and "inputs.promote" in gate["if"]
    body = "\n".join(runs(workflows["promote.yml"]))
    attach = body.index('mcore-images attach "$IMAGE" --certificate "$folder" --key')  # each platform's certificate
    promotion = body.index('mcore-images promote "$IMAGE" --stack "$STACK" --layer "$LAYER" --key cosign.pub')
    assert attach < promotion and "--policy release" in body[promotion:] and "--execute" in body[promotion:]
    assert 'exit "$rc"' in body  # a refusal fails the job
    assert "bash .ci/registry.sh tools" in body  # oras and cosign from Debian's packages


def test_reusable_workflow_calls_match_their_inputs(workflows: dict[str, dict[str, Any]]) -> None:
    for name, workflow in workflows.items():
        for job_id, job in workflow["jobs"].items():
            if not str(job.get("uses", "")).startswith("./.github/workflows/"):
                continue
            called = workflows[Path(job["uses"]).name]["on"]["workflow_call"]["inputs"]
            given = set(job.get("with", {}))
            assert given <= set(called), f"{name}:{job_id} passes unknown inputs {given - set(called)}"
            required = {k for k, v in called.items() if v.get("required")}
            assert required <= given, f"{name}:{job_id} misses required inputs {required - given}"
            # Each secret by name, declared by the callee: `secrets: inherit` would hand every secret to it.
            passed = job.get("secrets") or {}
            assert isinstance(passed, dict), f"{name}:{job_id}: pass secrets by name, not {passed!r}"
            declared = workflows[Path(job["uses"]).name]["on"]["workflow_call"].get("secrets") or {}
            extra = set(passed) - set(declared)
            assert not extra, f"{name}:{job_id} passes undeclared secrets {extra}"


def test_promotion_runs_protected_from_trusted_runs_into_the_projects_registry(
        workflows: dict[str, dict[str, Any]]) -> None:
    """The signing key is reachable only in the protected `release` environment; the registry host comes
    from vars.REGISTRY (the image must be in it), never from the free-text image input; a certificate of an
    earlier run is downloaded only after .github/scripts/trusted-run.sh accepted that run."""
    job = workflows["promote.yml"]["jobs"]["promote"]
    assert job["environment"] == {"name": "release"}
    assert job["env"]["REGISTRY"] == "${{ vars.REGISTRY }}"
    names = [step.get("name", "") for step in job["steps"]]
    body = "\n".join(runs({"jobs": {"promote": job}}))
    assert '"$REGISTRY"/*@sha256:*) ;;' in body and 'oras login' in body and '"${REGISTRY%%/*}"' in body
    assert "${IMAGE%%/*}" not in body
    trusted = next(i for i, n in enumerate(names) if n.startswith("The certificate's run is trusted"))
    download = next(i for i, n in enumerate(names) if n.startswith("Download the certificate (run"))
    assert trusted < download and job["steps"][trusted]["if"] == job["steps"][download]["if"] == "inputs.run-id != ''"
    script = (ROOT / ".github" / "scripts" / "trusted-run.sh").read_text()
    for needle in ('"head_branch": {"main"}', '"event": {"push", "schedule", "workflow_dispatch"}',
                   ".github/workflows/gpu-smoke.yml", "head_repository"):
        assert needle in script, needle
    for name, workflow in workflows.items():
        for job_id, other in workflow["jobs"].items():
            assert other.get("secrets") != "inherit", f"{name}:{job_id}"


def _serve_run(run: dict[str, Any]) -> tuple[Any, str]:
    """A local stand-in for the GitHub API's one endpoint the script reads, serving ``run``."""
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps(run).encode()
            self.send_response(200 if self.path.endswith(f"/actions/runs/{run['id']}") else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.mark.parametrize(("change", "trusted"), [
    ({}, True),
    ({"event": "pull_request"}, False),
    ({"head_branch": "feature"}, False),
    ({"path": ".github/workflows/ci.yml"}, False),
    ({"head_repository": {"full_name": "fork/mcore-images"}}, False),
])
def test_only_trusted_runs_give_certificates_to_promote(change: dict[str, Any], trusted: bool) -> None:
    run = {"id": 77, "path": ".github/workflows/gpu-smoke.yml", "head_branch": "main", "event": "push",
           "repository": {"full_name": "acme/mcore-images"}, "head_repository": {"full_name": "acme/mcore-images"},
           **change}
    server, url = _serve_run(run)
    try:
        done = subprocess.run(["bash", str(ROOT / ".github" / "scripts" / "trusted-run.sh")], capture_output=True,
                              text=True, check=False, timeout=60,
                              env={"PATH": "/usr/bin:/bin", "RUN_ID": "77", "REPOSITORY": "acme/mcore-images",
                                   "GH_TOKEN": "t", "GITHUB_API_URL": url})
    finally:
        server.shutdown()
    assert (done.returncode == 0) == trusted, done.stderr
    if not trusted:
        assert done.stderr.startswith("error: run 77 is not trusted: ") and len(done.stderr.splitlines()) == 1
