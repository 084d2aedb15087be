"""What promotion and verification demand of a certificate and an image (policy.py): pure judgements, each
refusal one line naming its fix. The registry side of the same refusals runs in tests/registry/."""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from mcore_images import schemas
from mcore_images.catalogue import components, images, tags, versions
from mcore_images.catalogue.stacks import Stack
from mcore_images.errors import InputError
from mcore_images.release import policy
from tests.support.certificates import labels_of, packages_of, write_certificate

REPOSITORY = "ghcr.io/acme/mcore-images"
DIGEST = "sha256:" + "a" * 64
OTHER = "sha256:" + "b" * 64
IMAGE = images.parse(f"{REPOSITORY}@{DIGEST}")
NOW = dt.datetime(2026, 9, 1, 12, 0, tzinfo=dt.UTC)
RELEASE = policy.Policy("release", "GPUs required", require_gpu=True, max_age_days=7)
CI = policy.Policy("ci", "CPU accepted", require_gpu=False, max_age_days=1)


def judge(path: Path, stack: Stack, labels: dict[str, str] | None = None, chosen: policy.Policy = RELEASE,
          layer: str | None = None) -> list[str]:
    """Everything promote asks of a certificate file and the image's labels (the registry's part aside)."""
    cert = policy.load_certificate(path)
    labels = labels if labels is not None else labels_of(stack, "runtime")
    _, problems = policy.image_problems(labels, stack, layer)
    return policy.certificate_problems(cert, IMAGE, NOW, chosen) + policy.measured_problems(labels, cert) + problems


def write(out: Path, stack: Stack, **kwargs: object) -> Path:
    return write_certificate(out, stack, repository=REPOSITORY, digest=kwargs.pop("digest", DIGEST),
                             created=kwargs.pop("created", NOW - dt.timedelta(hours=2)), **kwargs)


@pytest.fixture
def ngc(stacks: dict[str, Stack]) -> Stack:
    return stacks["ngc"]


def test_the_right_certificate_passes_both_policies(tmp_path: Path, ngc: Stack) -> None:
    assert judge(write(tmp_path, ngc), ngc) == []
    assert judge(write(tmp_path, ngc), ngc, chosen=CI) == []


WRONG: list[tuple[str, Callable[[Path, Stack], Path], str]] = [
    ("other digest", lambda out, s: write(out, s, digest=OTHER),
     f"the certificate is for {OTHER}, not {DIGEST}; certify this digest"),
    ("failed", lambda out, s: write(out, s, smoke_status="failed"),
     "the certificate did not pass (certify failed, smoke failed, exit 1: rank 0 failed in tp2"),
    ("stale", lambda out, s: write(out, s, created=NOW - dt.timedelta(days=8)),
     "the certificate is stale: 8.0 days old (created 2026-08-24T12:00:00+00:00), policy 'release' allows 7 days"),
    ("other versions", lambda out, s: write(out, s, packages={**packages_of(s), "megatron-core": "0.18.0"}),
     "the certificate measured megatron-core 0.18.0 but the image is labelled mcore=0.19.2"),
    ("tests skipped", lambda out, s: write(out, s, tests={"skipped": True, "passed": False}),
     "the image tests were skipped (--skip-image-tests)"),
    ("local image id", lambda out, s: write(out, s, digest_source="image ID: the local config digest"),
     "bound a local image ID, not a registry digest"),
    ("cpu run", lambda out, s: write(out, s, gpus=0), "the smoke ran on no GPU (a --cpu run) and policy 'release'"),
    ("future", lambda out, s: write(out, s, created=NOW + dt.timedelta(days=1)), "created in the future"),
    ("gpu run in a machine's tree", lambda out, s: write(out, s, source=schemas.MACHINE_TREE),
     "the GPU smoke ran in machine's tree, not the image's environment (torch 2.11.0+cu130, the image pins"),
]


@pytest.mark.parametrize(("make", "message"), [(m, msg) for _, m, msg in WRONG], ids=[n for n, _, _ in WRONG])
def test_wrong_certificates_are_refused(make: Callable[[Path, Stack], Path], message: str, tmp_path: Path,
                                        ngc: Stack) -> None:
    problems = judge(make(tmp_path, ngc), ngc)
    assert any(message in p for p in problems), problems
    assert all("\n" not in p for p in problems)


def test_the_ci_policy_accepts_a_cpu_certificate_but_not_a_day_old_one(tmp_path: Path, ngc: Stack) -> None:
    assert judge(write(tmp_path, ngc, gpus=0), ngc, chosen=CI) == []
    stale = write(tmp_path, ngc, gpus=0, created=NOW - dt.timedelta(days=2))
    assert any("policy 'ci' allows 1 days" in p for p in judge(stale, ngc, chosen=CI))


def test_a_certificate_for_another_stack_is_refused(tmp_path: Path, ngc: Stack, stacks: dict[str, Stack]) -> None:
    problems = judge(write(tmp_path, stacks["cuda"]), stacks["cuda"], labels_of(ngc, "runtime"))
    assert "the image is stack 'ngc', not 'cuda'; pass --stack ngc" in problems[-1]


def test_a_certificate_whose_versions_are_another_stacks_is_refused(tmp_path: Path, ngc: Stack,
                                                                    stacks: dict[str, Stack]) -> None:
    cuda = stacks["cuda"]
    problems = " ".join(judge(write(tmp_path, ngc, packages=packages_of(cuda)), ngc))
    assert f"measured torch {cuda.torch} but the image is labelled torch={ngc.torch}" in problems
    assert f"measured transformer-engine {cuda.te} but the image is labelled te={ngc.te}" in problems


def test_an_image_built_from_other_pins_is_refused(tmp_path: Path, ngc: Stack) -> None:
    moved = ngc.replace(mcore="0.19.3")
    problems = judge(write(tmp_path, moved), ngc, labels_of(moved, "runtime"))
    assert any("the image says mcore=0.19.3 but env/stacks.json pins 0.19.2" in p for p in problems)


@pytest.mark.parametrize(("labels", "message"), [
    ({}, "carries no io.mcore-images.stack label"),
    ({images.label("stack"): "ngc", images.label("layer"): "kernels"}, "layer 'kernels' carries no megatron-core"),
])
def test_images_that_cannot_carry_a_certificate_are_refused(labels: dict[str, str], message: str, tmp_path: Path,
                                                            ngc: Stack) -> None:
    assert any(message in p for p in judge(write(tmp_path, ngc), ngc, labels))


@pytest.mark.parametrize(("text", "message"), [
    ("not json", "is not JSON"),
    ('{"schema": "other/v9"}', "schema 'other/v9' is not 'mcore-images/smoke-certificate/v1'"),
    ("[]", "is malformed (not a JSON object)"),
])
def test_malformed_files_are_refused(text: str, message: str, tmp_path: Path) -> None:
    path = tmp_path / "certificate.json"
    path.write_text(text)
    with pytest.raises(InputError, match=re.escape(message)):
        policy.load_certificate(path)


def test_unreadable_certificates_are_one_line(tmp_path: Path, ngc: Stack) -> None:
    with pytest.raises(InputError, match=r"is a folder; name the file in it"):
        policy.load_certificate(tmp_path)
    path = write(tmp_path, ngc)
    path.write_bytes(path.read_bytes().replace(b'"passed"', b'"pass\xe9d"', 1))
    with pytest.raises(InputError, match=r"is not UTF-8 text \(byte \d+"):
        policy.load_certificate(path)


def test_a_wrong_field_type_is_malformed_not_a_crash(tmp_path: Path, ngc: Stack) -> None:
    """Types the judgements rely on (here: the GPU record promote counts) are the schema's to check."""
    path = write(tmp_path, ngc)
    cert = json.loads(path.read_text())
    cert["environment"]["gpu"] = [{"model": "H100", "count": 8}]
    path.write_text(json.dumps(cert))
    with pytest.raises(InputError, match=r"malformed \(field environment.gpu: \[.*\] is not of type 'object'"):
        policy.load_certificate(path)


def test_a_release_policies_file_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "release-policies.json").write_bytes(b'{"ci": "\xff"}')
    with pytest.raises(InputError, match=r"release-policies\.json is not UTF-8 text"):
        policy.load_policy("ci", tmp_path / "release-policies.json")


def test_a_created_time_without_zone_is_malformed(tmp_path: Path, ngc: Stack) -> None:
    path = write(tmp_path, ngc)
    cert = json.loads(path.read_text())
    cert["created"] = "2026-09-01T10:00:00"
    path.write_text(json.dumps(cert))
    with pytest.raises(InputError, match="is not an ISO 8601 time with a zone"):
        policy.load_certificate(path)


def test_policies_ship_with_the_tool_and_another_file_is_read_only_when_given(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert policy.load_policy("release").require_gpu is True
    assert policy.load_policy("ci").require_gpu is False
    with pytest.raises(InputError, match="unknown policy 'nightly'; choose one of ci, release"):
        policy.load_policy("nightly")
    # A folder holding its own env/release-policies.json changes nothing (it used to win)
    (tmp_path / "env").mkdir()
    (tmp_path / "env" / "release-policies.json").write_text(json.dumps(
        {"release": {"description": "lax", "require_gpu": False, "max_age_days": 100000}}))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MCORE_IMAGES_ROOT", str(tmp_path))
    assert policy.load_policy("release") == policy.Policy("release", policy.load_policy("release").description,
                                                          True, 7, True)
    given = tmp_path / "site-policies.json"
    given.write_text(json.dumps({"ci": {"description": "x", "require_gpu": "no", "max_age_days": -1}}))
    with pytest.raises(InputError, match=r"field ci.max_age_days: -1 is less than or equal to the minimum of 0"):
        policy.load_policy("ci", given)


def test_the_immutable_tag_names_the_content_the_date_and_the_digest(ngc: Stack) -> None:
    full = tags.layer_tag("runtime", ngc)
    tag = tags.immutable_tag(full, DIGEST, NOW)
    assert tag == f"{full}-20260901-{'a' * 12}" and len(tag) <= 128
    assert tags.is_immutable(tag) and tags.is_immutable_tag_of(tag, full, DIGEST)
    assert not tags.is_immutable_tag_of(tag, full, "sha256:" + "b" * 64)  # another digest
    assert not tags.is_immutable_tag_of(tag, tags.layer_tag("kernels", ngc), DIGEST)  # another content tag
    assert not tags.is_immutable(full)


@pytest.mark.parametrize(("tag", "ok"), [
    ("candidate-0123abc-runtime-ngc", True),
    ("candidate-" + "f" * 40 + "-runtime-ngc", True),
    ("candidate-0123ab-runtime-ngc", False),  # 6 hex digits: not a commit
    ("candidate-0123ABC-runtime-ngc", False),
    ("candidate-0123abc-runtime-ngc-x", False),
    ("runtime-ngc", False),
])
def test_candidate_tags_are_recognised_by_their_form(tag: str, ok: bool) -> None:
    assert tags.is_candidate_tag_of(tag, "runtime-ngc") is ok


@pytest.mark.parametrize(("key", "pinned", "have", "same"), [
    ("torch", "2.13.0a0", "2.13.0a0+8145d630e8", True),
    ("torch", "2.11", "2.11.0", True),
    ("torch", "2.11.0", "2.11.1", False),
    ("python", "3.12", "3.12.4", True),
    ("python", "3.12", "3.13.0", False),
    ("cuda", "13.0", "13.0", True),
    ("te", "2.16.0", "2.16.0.dev0+abc", False),
    ("apex", "6424da3b4faa6c8f062da4a48c424fff3f02d42d", "0.1", True),
    ("mbridge", "none", None, True),
    ("mbridge", "none", "0.15.1", False),
])
def test_version_matching(key: str, pinned: str, have: str | None, same: bool) -> None:
    assert versions.pin_satisfied(components.BY_LABEL[key].pin, pinned, have) is same


@pytest.mark.parametrize(("loaded", "message"), [
    ("91400", "torch loaded cuDNN 9.14.0 in the run, but the image is labelled cudnn=9.19.0.56; make the image load "
              "torch's own cuDNN wheel"),
    ("error: cuDNN version incompatibility: PyTorch was compiled against (9, 19, 0)",
     "torch could not use the cuDNN it loaded in the run (error: cuDNN version incompatibility"),
])
def test_a_run_that_loaded_another_cudnn_than_the_label_is_refused(tmp_path: Path, stacks: dict[str, Stack],
                                                                  loaded: str, message: str) -> None:
    # The cuDNN mismatch trap: the wheel is installed as pinned, yet another copy is what got loaded.
    cuda = stacks["cuda"]
    assert judge(write(tmp_path, cuda), cuda) == []
    problems = judge(write(tmp_path, cuda, cudnn=loaded), cuda)
    assert len(problems) == 1 and message in problems[0], problems


def test_a_base_images_cudnn_is_recorded_by_what_torch_loads(tmp_path: Path, ngc: Stack) -> None:
    cert = policy.load_certificate(write(tmp_path, ngc, cudnn="91400"))
    labels = labels_of(ngc, "runtime")
    assert labels["io.mcore-images.cudnn"] == "base" and policy.measured_problems(labels, cert) == []
    cert["environment"]["packages"]["cudnn"] = None
    assert any("the certificate measured cudnn absent" in p for p in policy.measured_problems(labels, cert))
    cert["environment"].update(packages=packages_of(ngc), cudnn="error: cuDNN version incompatibility")
    assert [p for p in policy.measured_problems(labels, cert) if "torch could not use the cuDNN" in p]
