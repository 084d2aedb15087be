"""`mcore-images tags` and `matrix`: the tag scheme of tags.py, and release matrices derived from env/ at run
time (no list of stacks in YAML)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mcore_images import cli
from mcore_images.catalogue import tags
from mcore_images.catalogue.stacks import Stack
from mcore_images.errors import InputError
from mcore_images.release import release_matrix
from tests.unit.conftest import ROOT, write_stacks

REPOSITORY = "ghcr.io/acme/mcore-images"
DIGEST = "sha256:" + "a" * 64
OTHER = "sha256:" + "b" * 64


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
    entries = json.loads((ROOT / "env" / "stacks.json").read_text())["stacks"]
    (tmp_path / "env").mkdir()
    (tmp_path / "env" / "engines.json").write_bytes((ROOT / "env" / "engines.json").read_bytes())
    before_yaml = workflows_digest()
    write_stacks(tmp_path / "env" / "stacks.json", entries)
    first = matrix_cli(tmp_path, "--group", "release")
    assert first.returncode == 0, first.stderr
    assert [(e["stack"], e["arch"]) for e in json.loads(first.stdout)["include"]] == [
        ("ngc", "amd64"), ("ngc", "arm64"), ("cuda", "amd64"), ("cuda", "arm64")]

    changed = [dict(e) for e in entries]
    cuda = next(e for e in changed if e["name"] == "cuda")
    cuda["name"], cuda["verl"], cuda["vllm"], cuda["megatron_bridge"] = "cuda-next", "none", "none", "none"  # no app
    cuda.pop("overrides")
    cuda.pop("substitutes", None)  # they stand in for verl's requirements: without verl, none
    cuda["platforms"] = ["linux/amd64"]
    next(e for e in changed if e["name"] == "ngc")["groups"] = []
    write_stacks(tmp_path / "env" / "stacks.json", changed)
    second = matrix_cli(tmp_path, "--group", "release")
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout) == {"include": [{
        "stack": "cuda-next", "platform": "linux/amd64", "arch": "amd64",
        "targets": "base-cuda-next,kernels-cuda-next,runtime-cuda-next",
        "certify": "runtime-cuda-next", "archs": len(cuda["cuda_archs"].split(";"))}]}
    assert workflows_digest() == before_yaml  # nothing under .github/ was touched


def test_the_build_matrix_checks_rules_first(tmp_path: Path) -> None:
    entries = json.loads((ROOT / "env" / "stacks.json").read_text())["stacks"]
    (tmp_path / "env").mkdir()
    (tmp_path / "env" / "engines.json").write_bytes((ROOT / "env" / "engines.json").read_bytes())
    cuda = next(e for e in entries if e["name"] == "cuda")
    write_stacks(tmp_path / "env" / "stacks.json", [*entries, dict(cuda, name="cuda-unpinned", base_digest="")])
    result = matrix_cli(tmp_path, "--group", "release")
    assert result.returncode == 2 and result.stdout == ""
    assert "cuda-unpinned" in result.stderr and "tag-only base nvidia/cuda:13.0.2" in result.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["--group", "weekly"], "unknown group 'weekly'"),
    (["--group", "release", "--registry", "ghcr.io/acme"], "give --registry and --sha together"),
    (["--group", "release", "--registry", "ghcr.io/acme", "--sha", "HEAD"], "is not a git commit"),
    (["--candidates", "/nonexistent"], "no bake metadata (*.json) under /nonexistent"),
])
def test_bad_matrix_inputs(args: list[str], message: str, capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["matrix", *args]) == 2
    assert message in capsys.readouterr().err


def test_candidate_tags_and_cache_in_the_build_matrix(stacks: dict[str, Stack]) -> None:
    """Each platform of a multi-platform stack builds on its own runner: it pushes <target>.<arch> candidates of
    that platform alone, into a build cache of its own; a stack of one platform builds as it did."""
    sha = "0123456789abcdef0123456789abcdef01234567"
    matrix = release_matrix.build_matrix("release", "ghcr.io/acme", "mcore-images", sha, stacks)
    ngc, ngc_arm64 = matrix["include"][:2]
    assert (ngc["platform"], ngc_arm64["platform"]) == ("linux/amd64", "linux/arm64")
    assert ngc["set"].splitlines()[2] == (f"runtime-ngc.tags=ghcr.io/acme/mcore-images:candidate-{sha}-"
                                          "runtime-ngc.amd64")
    assert ngc["set"].splitlines()[-1] == "*.platform=linux/amd64"
    assert ngc_arm64["set"].splitlines()[-1] == "*.platform=linux/arm64"
    assert ngc["cache_ref"] == "ghcr.io/acme/mcore-images:buildcache-ngc"
    assert ngc_arm64["cache_ref"] == "ghcr.io/acme/mcore-images:buildcache-ngc.arm64"
    assert ngc["certify"] == "runtime-ngc,app-ngc"
    ci = release_matrix.build_matrix("ci", "ghcr.io/acme", "mcore-images", sha, stacks)["include"]
    assert [e["platform"] for e in ci] == ["linux/amd64"]
    assert ci[0]["set"].splitlines() == [
        f"{t}.tags=ghcr.io/acme/mcore-images:candidate-{sha}-{t}" for t in ci[0]["targets"].split(",")]


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
    amd64 = {"platform": "linux/amd64", "arch": "amd64", "index": ""}
    assert got == {"include": [
        {"stack": "cuda", "layer": "runtime", "target": "runtime-cuda", "image": f"{REPOSITORY}@{OTHER}", **amd64},
        {"stack": "cuda", "layer": "app", "target": "app-cuda", "image": f"{REPOSITORY}@{DIGEST}", **amd64},
    ]}
    (tmp_path / "bake-metadata-x.json").write_text(json.dumps({"runtime-gone": {"containerimage.digest": DIGEST}}))
    with pytest.raises(InputError, match=re.escape("target 'runtime-gone' is not in env/stacks.json")):
        release_matrix.certify_matrix(tmp_path, stacks)


def test_top_only_certifies_each_stacks_highest_layer(tmp_path: Path, stacks: dict[str, Stack]) -> None:
    name = f"{REPOSITORY}:candidate-{'c' * 40}"
    (tmp_path / "bake-metadata.json").write_text(json.dumps({
        "runtime-cuda": {"containerimage.digest": OTHER, "image.name": f"{name}-runtime-cuda"},
        "app-cuda": {"containerimage.digest": DIGEST, "image.name": f"{name}-app-cuda"},
        "runtime-debian": {"containerimage.digest": OTHER, "image.name": f"{name}-runtime-debian"},
    }))
    got = release_matrix.certify_matrix(tmp_path, stacks, top_only=True)
    assert [e["target"] for e in got["include"]] == ["app-cuda", "runtime-debian"]
    assert cli.main(["matrix", "--top-only"]) == 2


SHA = "c" * 40
ARM = "sha256:" + "d" * 64
INDEX = "sha256:" + "e" * 64


def per_platform_metadata(tmp_path: Path) -> None:
    for arch, digest in (("amd64", DIGEST), ("arm64", ARM)):
        (tmp_path / f"bake-metadata.{arch}.json").write_text(json.dumps({
            "kernels-debian": {"containerimage.digest": OTHER,
                               "image.name": f"{REPOSITORY}:candidate-{SHA}-kernels-debian.{arch}"},
            "runtime-debian": {"containerimage.digest": digest,
                               "image.name": f"{REPOSITORY}:candidate-{SHA}-runtime-debian.{arch}"}}))


def test_index_joins_each_targets_platforms_with_imagetools(tmp_path: Path, stacks: dict[str, Stack],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from mcore_images.release import platform_index, registry

    per_platform_metadata(tmp_path)
    found = platform_index.per_platform(tmp_path, SHA, stacks)
    assert found["runtime-debian"] == {"linux/amd64": f"{REPOSITORY}@{DIGEST}", "linux/arm64": f"{REPOSITORY}@{ARM}"}
    ran: list[list[str]] = []

    class Done:
        returncode, stdout, stderr = 0, "", ""

    monkeypatch.setattr(registry, "resolve", lambda ref, **kw: ref.with_digest(INDEX))
    monkeypatch.setattr(registry, "platform_children", lambda image, **kw: {
        "linux/amd64": image.with_digest(DIGEST), "linux/arm64": image.with_digest(ARM)})
    made = platform_index.assemble(found, SHA, stacks, run=lambda argv, **kw: (ran.append(argv), Done())[1])
    assert ran[-1] == ["docker", "buildx", "imagetools", "create", "-t",
                       f"{REPOSITORY}:candidate-{SHA}-runtime-debian", f"{REPOSITORY}@{DIGEST}", f"{REPOSITORY}@{ARM}"]
    assert made["runtime-debian"]["containerimage.digest"] == INDEX
    (tmp_path / platform_index.INDEX_FILE).write_text(json.dumps(made))
    certify = release_matrix.certify_matrix(tmp_path, stacks)["include"]
    assert [(e["target"], e["platform"], e["image"], e["index"]) for e in certify] == [
        ("runtime-debian", "linux/amd64", f"{REPOSITORY}@{DIGEST}", f"{REPOSITORY}@{INDEX}"),
        ("runtime-debian", "linux/arm64", f"{REPOSITORY}@{ARM}", f"{REPOSITORY}@{INDEX}")]
    assert release_matrix.promotion_matrix(tmp_path, stacks)["include"] == [{
        "stack": "debian", "layer": "runtime", "target": "runtime-debian", "image": f"{REPOSITORY}@{INDEX}",
        "platforms": "linux/amd64,linux/arm64"}]


def test_index_refuses_another_commits_candidates_and_a_platform_the_stack_lacks(
        tmp_path: Path, stacks: dict[str, Stack]) -> None:
    from mcore_images.release import platform_index

    per_platform_metadata(tmp_path)
    with pytest.raises(InputError, match=r"is a candidate of commit c{40}, not 0{40}"):
        platform_index.per_platform(tmp_path, "0" * 40, stacks)
    (tmp_path / "bake-metadata.arm64.json").write_text(json.dumps({"runtime-debian-verl": {
        "containerimage.digest": ARM, "image.name": f"{REPOSITORY}:candidate-{SHA}-runtime-debian-verl.arm64"}}))
    with pytest.raises(InputError, match="was built for linux/arm64, which stack 'debian-verl' does not list"):
        platform_index.per_platform(tmp_path, SHA, stacks)
