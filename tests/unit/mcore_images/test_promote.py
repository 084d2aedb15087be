"""`mcore-images promote` / `tags` / `matrix`: wrong certificates are refused, the right one promotes,
and the release matrix comes from env/ (no docker, no registry: both are faked)."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from smoke import certificate as smoke_certificate

from mcore_images import certify, cli, components, promote, release_matrix, schemas, tags, versions
from mcore_images.errors import InputError
from mcore_images.stacks import Stack
from tests.unit.conftest import ROOT, write_stacks

REPOSITORY = "ghcr.io/acme/mcore-images"
DIGEST = "sha256:" + "a" * 64
OTHER = "sha256:" + "b" * 64
IMAGE = f"{REPOSITORY}@{DIGEST}"
NOW = dt.datetime(2026, 9, 1, 12, 0, tzinfo=dt.UTC)
LABEL = "io.mcore-images."


# ---------------------------------------------------------------------------------------------
# Fixtures: a certificate made by the real writers, image labels as docker-bake.hcl sets them.


def packages_of(stack: Stack) -> dict[str, str | None]:
    """What the smoke records for an image of this stack (every catalogue component with a certificate key;
    a local build tag where the base provides torch, as NGC's has; a version for a commit-pinned apex)."""
    def recorded(comp: components.Component) -> str | None:
        pin = stack.pins[comp.key]
        if pin == "none":
            return None
        if comp.key == "python":
            return f"{pin}.4"
        if comp.key == "torch" and stack.torch_source == "base":
            return f"{pin}+8145d630e8"
        return "0.1" if comp.pin == "commit" else pin

    return {c.certificate: recorded(c) for c in components.CATALOGUE if c.certificate}


def labels_of(stack: Stack, layer: str) -> dict[str, str]:
    """The io.mcore-images.* labels docker-bake.hcl's layer_labels gives a layer of the stack."""
    labels = {f"{LABEL}layer": layer, f"{LABEL}stack": stack.name, f"{LABEL}flavor": stack.flavor}
    return labels | {c.oci_label: stack.pins[c.key] for c in components.labelled_in(layer)}


def write_certificate(out: Path, stack: Stack, *, digest: str = DIGEST, created: dt.datetime = NOW,
                      smoke_status: str = "passed", tests: dict[str, Any] | None = None,
                      digest_source: str | None = None, gpus: int = 8,
                      packages: dict[str, str | None] | None = None) -> Path:
    """A certificate as the smoke writes it (smoke/certificate.py), bound by certify.bind."""
    cert = smoke_certificate.new(["python", "-m", "smoke", "--out", "/cert"], created.isoformat(timespec="seconds"))
    code = {"passed": 0, "failed": 1}[smoke_status]
    cert.update(status=smoke_status, exit_code=code, error=None if code == 0 else "rank 0 failed in tp2: loss rose")
    cert["environment"] = {"packages": packages or packages_of(stack), "cuda": stack.cuda, "nccl": "2.27.7",
                           "cudnn": "91900", "gpu": {"model": "NVIDIA H100 80GB HBM3", "count": gpus,
                                                     "driver": "580.65.06"}}
    assert smoke_certificate.validate(cert) == []
    smoke_certificate.write(cert, out)
    source = digest_source or "RepoDigests: the registry manifest digest (pull by it to get this image)"
    image = certify.ImageDigest(f"{REPOSITORY}@{digest}", digest, source, f"{REPOSITORY}@{digest}")
    certify.bind(out, image, tests or {"command": ["pytest"], "exit_code": 0, "passed": True,
                                       "summary": "41 passed in 63.0s"}, code)
    return out / "certificate.json"


class FakeRegistry:
    """Stands in for the registry: labels of the digest, and a record of every command run."""

    def __init__(self, labels: dict[str, str]) -> None:
        self.labels = labels
        self.inspected: list[str] = []
        self.ran: list[tuple[list[str], Path | None]] = []
        self.fail: str | None = None

    def inspect(self, image: promote.ImageRef) -> dict[str, str]:
        self.inspected.append(image.ref)
        return self.labels

    def run(self, argv: list[str], cwd: Path | None = None, **kwargs: Any) -> subprocess.CompletedProcess:
        self.ran.append((argv, cwd))
        return subprocess.CompletedProcess(argv, 1 if argv[0] == self.fail else 0)


@pytest.fixture
def ngc(stacks: dict[str, Stack]) -> Stack:
    return stacks["ngc"]


@pytest.fixture
def registry(ngc: Stack) -> FakeRegistry:
    return FakeRegistry(labels_of(ngc, "runtime"))


def plan(cert: Path, registry: FakeRegistry, stacks: dict[str, Stack], stack: str = "ngc",
         image: str = IMAGE, **kwargs: Any) -> promote.Promotion:
    return promote.plan_promotion(cert, image, stack, now=NOW, inspect=registry.inspect, stacks=stacks, **kwargs)


# ---------------------------------------------------------------------------------------------
# The right certificate


def test_the_right_certificate_promotes_to_the_tag_scheme_of_tags_py(tmp_path: Path, ngc: Stack,
                                                                      registry: FakeRegistry,
                                                                      stacks: dict[str, Stack]) -> None:
    cert = write_certificate(tmp_path, ngc, created=NOW - dt.timedelta(days=2))
    got = plan(cert, registry, stacks)
    assert got.layer == "runtime" and got.stack.name == "ngc"
    assert got.public_tags == tags.tags("runtime", ngc, "ghcr.io/acme", "mcore-images")
    assert got.public_tags[1] == "ghcr.io/acme/mcore-images:runtime-ngc"
    attach, retag = got.steps
    assert attach.argv[:4] == ("oras", "attach", "--artifact-type", schemas.CERTIFICATE_ARTIFACT)
    assert attach.argv[-3:] == (IMAGE, "certificate.json:application/json", "certificate.md:text/markdown")
    assert attach.cwd == tmp_path.resolve()
    assert retag.argv == ("docker", "buildx", "imagetools", "create", "--tag", got.public_tags[0],
                          "--tag", got.public_tags[1], IMAGE)
    assert registry.inspected == [IMAGE] and registry.ran == []


def test_a_tag_before_the_digest_is_dropped_and_the_app_layer_promotes(tmp_path: Path, ngc: Stack,
                                                                        stacks: dict[str, Stack]) -> None:
    registry = FakeRegistry(labels_of(ngc, "app"))
    cert = write_certificate(tmp_path, ngc)
    got = plan(cert, registry, stacks, image=f"{REPOSITORY}:candidate-{'c' * 40}-app-ngc@{DIGEST}", layer="app")
    assert got.image.ref == IMAGE
    assert got.public_tags == tags.tags("app", ngc, "ghcr.io/acme", "mcore-images")


def test_execute_attaches_the_certificate_before_moving_tags(tmp_path: Path, ngc: Stack, registry: FakeRegistry,
                                                             stacks: dict[str, Stack]) -> None:
    got = plan(write_certificate(tmp_path, ngc), registry, stacks)
    assert promote.execute(got, registry.run) == 0
    assert [argv[0] for argv, _ in registry.ran] == ["oras", "docker"]
    assert registry.ran[0][1] == tmp_path.resolve()


def test_a_failed_attach_leaves_the_tags_alone(tmp_path: Path, ngc: Stack, registry: FakeRegistry,
                                               stacks: dict[str, Stack], capsys: pytest.CaptureFixture) -> None:
    got = plan(write_certificate(tmp_path, ngc), registry, stacks)
    registry.fail = "oras"
    assert promote.execute(got, registry.run) == 1
    assert [argv[0] for argv, _ in registry.ran] == ["oras"]
    assert "nothing changed" in capsys.readouterr().err


def test_dry_run_prints_the_exact_commands_and_runs_nothing(tmp_path: Path, ngc: Stack, registry: FakeRegistry,
                                                            stacks: dict[str, Stack], monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture) -> None:
    cert = write_certificate(tmp_path, ngc, created=dt.datetime.now(dt.UTC) - dt.timedelta(hours=3))
    monkeypatch.setattr(promote.registry, "registry_labels", registry.inspect)
    monkeypatch.setattr(promote.subprocess, "run", registry.run)
    rc = cli.main(["promote", "--certificate", str(cert), "--image", IMAGE, "--stack", "ngc"])
    out = capsys.readouterr().out
    assert rc == 0 and registry.ran == []
    assert "dry run" in out
    assert f"docker buildx imagetools create --tag {tags.tags('runtime', stacks['ngc'], 'ghcr.io/acme')[0]}" in out
    assert f"(cd {tmp_path.resolve()} && oras attach --artifact-type {schemas.CERTIFICATE_ARTIFACT}" in out


# ---------------------------------------------------------------------------------------------
# Wrong certificates: each is refused before anything runs, with a line naming the fix.


def _stale(out: Path, s: Stack) -> Path:
    return write_certificate(out, s, created=NOW - dt.timedelta(days=8))


def _other_digest(out: Path, s: Stack) -> Path:
    return write_certificate(out, s, digest=OTHER)


def _failed(out: Path, s: Stack) -> Path:
    return write_certificate(out, s, smoke_status="failed")


def _other_versions(out: Path, s: Stack) -> Path:
    return write_certificate(out, s, packages={**packages_of(s), "megatron-core": "0.18.0"})


def _malformed(out: Path, s: Stack) -> Path:
    path = write_certificate(out, s)
    cert = json.loads(path.read_text())
    del cert["image"]
    path.write_text(json.dumps(cert))
    return path


def _tests_skipped(out: Path, s: Stack) -> Path:
    return write_certificate(out, s, tests={"skipped": True, "passed": False})


def _local_image_id(out: Path, s: Stack) -> Path:
    return write_certificate(out, s, digest_source="image ID: the local config digest")


def _cpu_run(out: Path, s: Stack) -> Path:
    return write_certificate(out, s, gpus=0)


def _future(out: Path, s: Stack) -> Path:
    return write_certificate(out, s, created=NOW + dt.timedelta(days=1))


@pytest.mark.parametrize(("make", "message"), [
    (_other_digest, f"the certificate is for {OTHER}, not {DIGEST}; certify this digest"),
    (_failed, "the certificate did not pass (certify failed, smoke failed, exit 1: rank 0 failed in tp2"),
    (_stale, "the certificate is stale: 8.0 days old"),
    (_malformed, "is malformed (image missing or not dict)"),
    (_other_versions, "the certificate measured megatron-core 0.18.0 but the image is labelled mcore=0.19.2"),
    (_tests_skipped, "the image tests were skipped (--skip-image-tests)"),
    (_local_image_id, "bound a local image ID, not a registry digest"),
    (_cpu_run, "the smoke ran on no GPU"),
    (_future, "created in the future"),
], ids=lambda v: getattr(v, "__name__", "")[1:] or None)
def test_wrong_certificates_are_refused(make: Any, message: str, tmp_path: Path, ngc: Stack,
                                        registry: FakeRegistry, stacks: dict[str, Stack]) -> None:
    cert = make(tmp_path, ngc)
    with pytest.raises(InputError, match=re.escape(message)) as err:
        plan(cert, registry, stacks)
    assert "\n" not in str(err.value)
    assert registry.ran == []


def test_a_certificate_for_another_stack_is_refused(tmp_path: Path, ngc: Stack, registry: FakeRegistry,
                                                    stacks: dict[str, Stack]) -> None:
    cert = write_certificate(tmp_path, stacks["cuda"])
    with pytest.raises(InputError, match=re.escape("the image is stack 'ngc', not 'cuda'; pass --stack ngc")):
        plan(cert, registry, stacks, stack="cuda")


def test_a_certificate_whose_versions_are_another_stacks_is_refused(tmp_path: Path, ngc: Stack,
                                                                    registry: FakeRegistry,
                                                                    stacks: dict[str, Stack]) -> None:
    cert = write_certificate(tmp_path, ngc, packages=packages_of(stacks["cuda"]))
    with pytest.raises(InputError) as err:
        plan(cert, registry, stacks)
    assert "measured torch 2.11.0 but the image is labelled torch=2.13.0a0" in str(err.value)
    assert "measured transformer-engine 2.17.1 but the image is labelled te=2.16.0" in str(err.value)


def test_an_image_built_from_other_pins_is_refused(tmp_path: Path, ngc: Stack, stacks: dict[str, Stack]) -> None:
    moved = ngc.replace(mcore="0.19.3")
    registry = FakeRegistry(labels_of(moved, "runtime"))
    cert = write_certificate(tmp_path, moved)
    with pytest.raises(InputError, match=re.escape("the image says mcore=0.19.3 but env/stacks.json pins 0.19.2")):
        plan(cert, registry, stacks)


@pytest.mark.parametrize(("labels", "message"), [
    ({}, "carries no io.mcore-images.stack label"),
    ({f"{LABEL}stack": "ngc", f"{LABEL}layer": "kernels"}, "layer 'kernels' carries no megatron-core"),
])
def test_images_that_cannot_carry_a_certificate_are_refused(labels: dict[str, str], message: str, tmp_path: Path,
                                                            ngc: Stack, stacks: dict[str, Stack]) -> None:
    with pytest.raises(InputError, match=re.escape(message)):
        plan(write_certificate(tmp_path, ngc), FakeRegistry(labels), stacks)


@pytest.mark.parametrize(("text", "message"), [
    ("not json", "is malformed (not JSON"),
    ('{"schema": "other/v9"}', "schema 'other/v9' is not 'mcore-images/smoke-certificate/v1'"),
    ("[]", "is malformed (not a JSON object)"),
])
def test_malformed_files_are_refused(text: str, message: str, tmp_path: Path, registry: FakeRegistry,
                                     stacks: dict[str, Stack]) -> None:
    path = tmp_path / "certificate.json"
    path.write_text(text)
    with pytest.raises(InputError, match=re.escape(message)):
        plan(path, registry, stacks)
    assert registry.inspected == []  # refused before the registry is asked


def test_a_created_time_without_zone_is_malformed(tmp_path: Path, ngc: Stack, registry: FakeRegistry,
                                                  stacks: dict[str, Stack]) -> None:
    path = write_certificate(tmp_path, ngc)
    cert = json.loads(path.read_text())
    cert["created"] = "2026-09-01T10:00:00"
    path.write_text(json.dumps(cert))
    with pytest.raises(InputError, match="is not an ISO 8601 time with a zone"):
        plan(path, registry, stacks)


@pytest.mark.parametrize(("image", "message"), [
    (f"{REPOSITORY}:runtime-ngc", "must name the candidate by digest"),
    (f"{REPOSITORY}@sha256:abc", "the digest is not sha256:<64 hex>"),
])
def test_the_image_must_be_named_by_digest(image: str, message: str, tmp_path: Path, ngc: Stack,
                                           registry: FakeRegistry, stacks: dict[str, Stack]) -> None:
    with pytest.raises(InputError, match=message):
        plan(write_certificate(tmp_path, ngc), registry, stacks, image=image)


def test_missing_certificate_and_bad_age_limit(tmp_path: Path, registry: FakeRegistry,
                                               stacks: dict[str, Stack]) -> None:
    with pytest.raises(InputError, match="not found: download the gpu-smoke run's certificate artifact"):
        plan(tmp_path / "nope.json", registry, stacks)
    with pytest.raises(InputError, match="--max-age-days 0 must be positive"):
        plan(tmp_path / "nope.json", registry, stacks, max_age_days=0)


def test_the_age_limit_is_a_parameter(tmp_path: Path, ngc: Stack, registry: FakeRegistry,
                                      stacks: dict[str, Stack]) -> None:
    cert = _stale(tmp_path, ngc)
    assert plan(cert, registry, stacks, max_age_days=9).layer == "runtime"


@pytest.mark.parametrize(("key", "pinned", "have", "same"), [
    ("torch", "2.13.0a0", "2.13.0a0+8145d630e8", True),
    ("torch", "2.11", "2.11.0", True),
    ("torch", "2.11.0", "2.11.1", False),
    ("python", "3.12", "3.12.4", True),
    ("python", "3.12", "3.13.0", False),
    ("cuda", "13.0", "13.0", True),
    ("te", "2.16.0", "2.16.0.dev0+abc", False),
])
def test_version_matching(key: str, pinned: str, have: str, same: bool) -> None:
    assert versions.pin_satisfied(components.BY_LABEL[key].pin, pinned, have) is same


# ---------------------------------------------------------------------------------------------
# Labels from the registry (docker faked)


def _imagetools(payload: Any, rc: int = 0) -> Any:
    def run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess:
        assert cmd[:4] == ["docker", "buildx", "imagetools", "inspect"] and cmd[-2:] == ["--format", "{{json .Image}}"]
        return subprocess.CompletedProcess(cmd, rc, json.dumps(payload), "ERROR: unauthorized" if rc else "")
    return run


def test_registry_labels_of_an_image_and_of_an_index() -> None:
    ref = promote.parse_candidate(IMAGE)
    one = {"config": {"Labels": {f"{LABEL}stack": "ngc"}}, "rootfs": {}}
    assert promote.registry.registry_labels(ref, _imagetools(one)) == {f"{LABEL}stack": "ngc"}
    index = {"linux/amd64": one, "linux/arm64": one}
    assert promote.registry.registry_labels(ref, _imagetools(index)) == {f"{LABEL}stack": "ngc"}
    differ = {"linux/amd64": one, "linux/arm64": {"config": {"Labels": {f"{LABEL}stack": "cuda"}}}}
    with pytest.raises(InputError, match="carry different labels"):
        promote.registry.registry_labels(ref, _imagetools(differ))
    with pytest.raises(InputError, match="failed \\(ERROR: unauthorized\\): log in to the registry"):
        promote.registry.registry_labels(ref, _imagetools({}, rc=1))


# ---------------------------------------------------------------------------------------------
# tags and matrix


def test_tags_command_reuses_tags_py(capsys: pytest.CaptureFixture, stacks: dict[str, Stack]) -> None:
    assert cli.main(["tags", "--stack", "cuda", "--layer", "runtime", "--registry", "ghcr.io/acme"]) == 0
    assert capsys.readouterr().out.split() == tags.tags("runtime", stacks["cuda"], "ghcr.io/acme")
    assert cli.main(["tags", "--stack", "cuda", "--layer", "app", "--candidate", "abc1234"]) == 0
    assert capsys.readouterr().out.split() == ["mcore-images:candidate-abc1234-app-cuda"]
    assert cli.main(["tags", "--stack", "debian", "--layer", "app"]) == 2
    assert "has no layer 'app'" in capsys.readouterr().err


def matrix_cli(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "MCORE_IMAGES_ROOT": str(root), "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-m", "mcore_images", "matrix", *args], capture_output=True,
                          text=True, env=env, check=False)


def workflows_digest() -> str:
    digest = hashlib.sha256()
    for path in sorted((ROOT / ".github").rglob("*")):
        if path.is_file():
            digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()


def test_the_release_matrix_is_derived_from_env_not_yaml(tmp_path: Path) -> None:
    entries = json.loads((ROOT / "env" / "stacks.json").read_text())["variable"]["STACKS"]["default"]
    (tmp_path / "env").mkdir()
    before_yaml = workflows_digest()
    write_stacks(tmp_path / "env" / "stacks.json", entries)
    first = matrix_cli(tmp_path, "--group", "release")
    assert first.returncode == 0, first.stderr
    assert [e["stack"] for e in json.loads(first.stdout)["include"]] == ["ngc", "cuda"]

    changed = [dict(e) for e in entries]
    cuda = next(e for e in changed if e["name"] == "cuda")
    cuda["name"], cuda["verl"], cuda["megatron_bridge"] = "cuda-next", "none", "none"  # no app layer
    next(e for e in changed if e["name"] == "ngc")["groups"] = []
    write_stacks(tmp_path / "env" / "stacks.json", changed)
    second = matrix_cli(tmp_path, "--group", "release")
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout) == {"include": [{
        "stack": "cuda-next", "targets": "base-cuda-next,kernels-cuda-next,runtime-cuda-next",
        "certify": "runtime-cuda-next", "archs": 3}]}
    assert workflows_digest() == before_yaml  # nothing under .github/ was touched


def test_the_build_matrix_checks_rules_first(tmp_path: Path) -> None:
    entries = json.loads((ROOT / "env" / "stacks.json").read_text())["variable"]["STACKS"]["default"]
    (tmp_path / "env").mkdir()
    unpinned = [dict(e, groups=["release"]) if e["name"] == "verl-mcore013" else e for e in entries]
    write_stacks(tmp_path / "env" / "stacks.json", unpinned)
    result = matrix_cli(tmp_path, "--group", "release")
    assert result.returncode == 2 and result.stdout == ""
    assert "verl-mcore013" in result.stderr and "tag-only base nvidia/cuda:12.8.1" in result.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["--group", "nightly"], "unknown group 'nightly'"),
    (["--group", "release", "--registry", "ghcr.io/acme"], "give --registry and --sha together"),
    (["--group", "release", "--registry", "ghcr.io/acme", "--sha", "HEAD"], "is not a git commit"),
    (["--candidates", "/nonexistent"], "no bake metadata (*.json) under /nonexistent"),
])
def test_bad_matrix_inputs(args: list[str], message: str, capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["matrix", *args]) == 2
    assert message in capsys.readouterr().err


def test_candidate_tags_and_cache_in_the_build_matrix(stacks: dict[str, Stack]) -> None:
    sha = "0123456789abcdef0123456789abcdef01234567"
    matrix = release_matrix.build_matrix("release", "ghcr.io/acme", "mcore-images", sha, stacks)
    ngc = matrix["include"][0]
    assert ngc["set"].splitlines()[2] == f"runtime-ngc.tags=ghcr.io/acme/mcore-images:candidate-{sha}-runtime-ngc"
    assert ngc["cache_ref"] == "ghcr.io/acme/mcore-images:buildcache-ngc"
    assert ngc["certify"] == "runtime-ngc,app-ngc"


def test_certify_matrix_reads_bake_metadata(tmp_path: Path, stacks: dict[str, Stack]) -> None:
    name = f"{REPOSITORY}:candidate-{'c' * 40}"
    metadata = {
        "buildx.build.warnings": [],
        "base-cuda": {"containerimage.digest": OTHER, "image.name": f"{name}-base-cuda"},
        "app-cuda": {"containerimage.digest": DIGEST, "image.name": f"{name}-app-cuda"},
        "runtime-cuda": {"containerimage.digest": OTHER, "image.name": f"{name}-runtime-cuda"},
    }
    (tmp_path / "bake-metadata-cuda.json").write_text(json.dumps(metadata))
    got = release_matrix.certify_matrix(tmp_path, stacks)
    assert got == {"include": [
        {"stack": "cuda", "layer": "runtime", "target": "runtime-cuda", "image": f"{REPOSITORY}@{OTHER}"},
        {"stack": "cuda", "layer": "app", "target": "app-cuda", "image": f"{REPOSITORY}@{DIGEST}"},
    ]}
    (tmp_path / "bake-metadata-x.json").write_text(json.dumps({"runtime-gone": {"containerimage.digest": DIGEST}}))
    with pytest.raises(InputError, match=re.escape("target 'runtime-gone' is not in env/stacks.json")):
        release_matrix.certify_matrix(tmp_path, stacks)


def test_the_cli_wires_promote_tags_and_matrix() -> None:
    from mcore_images import cli

    choices = next(a for a in cli.parser()._actions if hasattr(a, "choices") and a.choices).choices
    if "matrix" not in choices:
        pytest.skip("cli.py does not call promote.add_parsers yet")
    result = subprocess.run([sys.executable, "-m", "mcore_images", "matrix", "--group", "release"],
                            capture_output=True, text=True, cwd=ROOT, check=False,
                            env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert result.returncode == 0, result.stderr
    assert {"promote", "tags", "matrix"} <= set(choices)


def test_promote_end_to_end_with_fake_docker_and_oras(tmp_path: Path, ngc: Stack) -> None:
    """The CLI as the workflow runs it: labels from `docker buildx imagetools inspect`, then --execute."""
    cert = write_certificate(tmp_path / "cert", ngc, created=dt.datetime.now(dt.UTC) - dt.timedelta(hours=1))
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    image_json = json.dumps({"config": {"Labels": labels_of(ngc, "runtime")}, "rootfs": {}})
    (bin_dir / "docker").write_text(
        f'#!/usr/bin/env bash\necho "docker $* @ $PWD" >> {log}\n'
        f"if [[ $2 == imagetools && $3 == inspect ]]; then echo '{image_json}'; fi\n")
    (bin_dir / "oras").write_text(f'#!/usr/bin/env bash\necho "oras $* @ $PWD" >> {log}\n')
    for tool in ("docker", "oras"):
        (bin_dir / tool).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT / "src")}
    argv = [sys.executable, "-m", "mcore_images", "promote", "--certificate", str(cert), "--image", IMAGE,
            "--stack", "ngc"]
    dry = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path, check=False)
    assert dry.returncode == 0, dry.stderr
    assert [line.split()[:4] for line in log.read_text().splitlines()] == [
        ["docker", "buildx", "imagetools", "inspect"]]
    log.unlink()
    done = subprocess.run([*argv, "--execute"], capture_output=True, text=True, env=env, cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stderr
    lines = log.read_text().splitlines()
    assert [line.split()[:3] for line in lines] == [
        ["docker", "buildx", "imagetools"], ["oras", "attach", "--artifact-type"], ["docker", "buildx", "imagetools"]]
    assert lines[1].endswith(f"@ {tmp_path / 'cert'}") and "certificate.json:application/json" in lines[1]
    assert lines[2].split()[3] == "create" and lines[2].split(" @ ")[0].endswith(IMAGE)
    assert f"promoted {IMAGE} to {REPOSITORY}:runtime-mcore" in done.stdout
