"""`mcore-images certify`: digest resolution with a faked docker, binding, and the CLI wiring."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from mcore_images import cli
from mcore_images.errors import InputError
from mcore_images.release import certify
from tests.support.sentinels import PLACES, make_root, snapshot

REPO = "sha256:" + "1" * 64
IMAGE_ID = "sha256:" + "2" * 64


class FakeDocker:
    """Stands in for subprocess.run: answers `docker image inspect` and records every command."""

    def __init__(self, inspect: Any = None, rc: int = 0, stderr: str = "", smoke_cert: dict | None = None,
                 test_rc: int = 0, bridge: dict | None = None, bench: dict | None = None) -> None:
        self.inspect, self.rc, self.stderr = inspect, rc, stderr
        self.bridge, self.bench = bridge, bench
        self.smoke_cert, self.test_rc = smoke_cert, test_rc
        self.calls: list[list[str]] = []

    def __call__(self, cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess:
        self.calls.append(cmd)
        if cmd[:3] == ["docker", "image", "inspect"]:
            out = self.inspect if isinstance(self.inspect, str) else json.dumps(self.inspect)
            return subprocess.CompletedProcess(cmd, self.rc, out, self.stderr)
        if "pytest" in cmd:
            return subprocess.CompletedProcess(cmd, self.test_rc, "12 passed in 3.0s\n", "")
        if cmd[:2] == ["docker", "run"] and "--entrypoint" in cmd:  # can this engine give memlock unlimited?
            return subprocess.CompletedProcess(cmd, 0, "", "")
        for module, section in (("mcore_images.smoke.bridge", "bridge"), ("mcore_images.smoke.bench", "bench")):
            if cmd[:2] == ["docker", "run"] and module in cmd:
                cert_path = Path(cmd[cmd.index("-v") + 1].split(":")[0], "certificate.json")
                added = getattr(self, section)
                if added is not None:
                    cert = json.loads(cert_path.read_text())
                    cert[section] = added
                    cert_path.write_text(json.dumps(cert))
                return subprocess.CompletedProcess(cmd, (added or {}).get("exit_code", 2), "", "")
        if cmd[:2] == ["docker", "run"]:
            mount = cmd[cmd.index("-v") + 1].split(":")[0]
            if self.smoke_cert is not None:
                Path(mount, "certificate.json").write_text(json.dumps(self.smoke_cert))
                Path(mount, "certificate.md").write_text("# Smoke certificate: PASSED (exit 0)\n")
            return subprocess.CompletedProcess(cmd, (self.smoke_cert or {}).get("exit_code", 125), "", "")
        raise AssertionError(f"unexpected command {cmd}")


def test_repo_digest_is_preferred_and_matched_to_the_repository() -> None:
    fake = FakeDocker({"Id": IMAGE_ID, "RepoDigests": [f"other/x@sha256:{'3' * 64}", f"reg:5000/team/rt@{REPO}"]})
    got = certify.resolve_digest("reg:5000/team/rt:v1", fake)
    assert got.digest == REPO and got.repo_digest == f"reg:5000/team/rt@{REPO}"
    assert got.digest_source.startswith("RepoDigests")
    assert fake.calls == [["docker", "image", "inspect", "--format", "{{json .}}", "reg:5000/team/rt:v1"]]


def test_local_image_falls_back_to_image_id_and_says_so() -> None:
    got = certify.resolve_digest("mcore-images:runtime-debian", FakeDocker({"Id": IMAGE_ID, "RepoDigests": []}))
    assert got.digest == IMAGE_ID and got.digest_source.startswith("image ID")
    assert "cannot be pulled" in got.digest_source


@pytest.mark.parametrize(("fake", "message"), [
    (FakeDocker({}, rc=1, stderr="Error: No such image: nope"), "not available locally (Error: No such image"),
    (FakeDocker({"Id": "abc", "RepoDigests": ["x@latest"]}), "no sha256 digest"),
    (FakeDocker("not json"), "printed no JSON"),
])
def test_no_digest_no_certificate(fake: FakeDocker, message: str) -> None:
    with pytest.raises(InputError, match=re.escape(message)):
        certify.resolve_digest("nope", fake)


def test_missing_docker_and_bad_reference_are_input_errors() -> None:
    def no_docker(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess:
        raise FileNotFoundError("docker")

    with pytest.raises(InputError, match="docker is not installed"):
        certify.resolve_digest("img", no_docker)
    with pytest.raises(InputError, match="is not an image reference; give an image reference such as"):
        certify.resolve_digest("--rm", FakeDocker())


def test_docker_command_runs_the_smoke_with_gpus_and_no_multicast(tmp_path: Path) -> None:
    cmd = certify.docker_smoke_command("img:1", tmp_path, ["--steps", "12"])
    assert cmd[:5] == ["docker", "run", "--rm", "--gpus", "all"]
    assert "NCCL_NVLS_ENABLE=0" in cmd and f"{tmp_path.resolve()}:/cert" in cmd
    assert cmd[cmd.index("img:1") + 1:] == ["python", "-m", "mcore_images.smoke", "--out", "/cert", "--steps", "12"]
    assert "--gpus" not in certify.docker_smoke_command("img:1", tmp_path, ["--cpu"])


def smoke_cert(status: str = "passed", code: int = 0) -> dict:
    return {"schema": "mcore-images/smoke-certificate/v1", "status": status, "exit_code": code, "error": None,
            "image": {"ref": None, "digest": None, "digest_source": None}, "runs": []}


def test_certify_binds_digest_tests_and_smoke(tmp_path: Path) -> None:
    fake = FakeDocker({"Id": IMAGE_ID, "RepoDigests": []}, smoke_cert=smoke_cert())
    code = certify.certify("mcore:rt", tmp_path, ["--steps", "10"], run=fake)
    cert = json.loads((tmp_path / "certificate.json").read_text())
    assert code == 0 and cert["certify"] == {"status": "passed", "exit_code": 0}
    assert cert["image"]["digest"] == IMAGE_ID and cert["image"]["ref"] == "mcore:rt"
    assert cert["image_tests"]["passed"] and cert["image_tests"]["summary"] == "12 passed in 3.0s"
    md = (tmp_path / "certificate.md").read_text()
    assert md.startswith("# Image certificate: PASSED") and IMAGE_ID in md and "# Smoke certificate" in md
    assert fake.calls[0][:2] == ["docker", "image"]  # digest first, before expensive work


def test_failed_image_tests_or_smoke_fail_the_certificate(tmp_path: Path) -> None:
    assert certify.certify("i", tmp_path / "a", [], run=FakeDocker({"Id": IMAGE_ID}, smoke_cert=smoke_cert(),
                                                                   test_rc=1)) == 1
    assert certify.certify("i", tmp_path / "b", [], run=FakeDocker({"Id": IMAGE_ID},
                                                                   smoke_cert=smoke_cert("failed", 1))) == 1
    code = certify.certify("i", tmp_path / "c", [], run=FakeDocker({"Id": IMAGE_ID}, smoke_cert=None))
    cert = json.loads((tmp_path / "c" / "certificate.json").read_text())
    assert code == 2 and "wrote no certificate" in cert["error"] and cert["image"]["digest"] == IMAGE_ID


def test_bridge_check_runs_after_the_smoke_and_gates(tmp_path: Path) -> None:
    passed = {"status": "passed", "exit_code": 0, "architectures": [], "error": None}
    fake = FakeDocker({"Id": IMAGE_ID}, smoke_cert=smoke_cert(), bridge=passed)
    assert certify.certify("i", tmp_path / "a", ["--cpu"], run=fake) == 0
    bridge_cmd = next(c for c in fake.calls if "mcore_images.smoke.bridge" in c)
    assert "--cpu" in bridge_cmd and "--gpus" not in bridge_cmd and bridge_cmd[-2:] == ["--certificate", "/cert"]
    cert = json.loads((tmp_path / "a" / "certificate.json").read_text())
    assert cert["bridge"]["status"] == "passed"
    wrong = {**passed, "status": "failed", "exit_code": 1}
    assert certify.certify("i", tmp_path / "b", [], run=FakeDocker({"Id": IMAGE_ID}, smoke_cert=smoke_cert(),
                                                                   bridge=wrong)) == 1
    absent = {**passed, "status": "could-not-run", "exit_code": 2}
    assert certify.certify("i", tmp_path / "c", [], run=FakeDocker({"Id": IMAGE_ID}, smoke_cert=smoke_cert(),
                                                                   bridge=absent)) == 0


def test_on_gpus_the_gated_bench_runs_last_and_a_regression_fails_the_image(tmp_path: Path) -> None:
    regressed = {"status": "failed", "exit_code": 1, "results": []}
    fake = FakeDocker({"Id": IMAGE_ID}, smoke_cert=smoke_cert(), bench=regressed)
    assert certify.certify("i", tmp_path / "a", [], run=fake) == 1
    bench_cmd = fake.calls[-1]
    assert "mcore_images.smoke.bench" in bench_cmd and "--gpus" in bench_cmd
    assert bench_cmd[-6:] == [*certify.BENCH_ARGS, "--certificate", "/cert"]
    cert = json.loads((tmp_path / "a" / "certificate.json").read_text())
    assert cert["certify"]["status"] == "failed"
    assert "| bench | failed |" in (tmp_path / "a" / "certificate.md").read_text()
    fine = FakeDocker({"Id": IMAGE_ID}, smoke_cert=smoke_cert(), bench={"status": "passed", "exit_code": 0})
    assert certify.certify("i", tmp_path / "b", [], run=fine) == 0
    for args, bench in (([], False), (["--cpu"], True)):  # --no-bench, or a CPU run: no bench at all
        fake = FakeDocker({"Id": IMAGE_ID}, smoke_cert=smoke_cert(), bench=regressed)
        assert certify.certify("i", tmp_path / "c", args, run=fake, bench=bench) == 0
        assert not any("mcore_images.smoke.bench" in c for c in fake.calls)


def test_unknown_image_stops_before_tests_or_smoke(tmp_path: Path) -> None:
    fake = FakeDocker({}, rc=1, stderr="No such image")
    with pytest.raises(InputError):
        certify.certify("ghost", tmp_path, [], run=fake)
    assert len(fake.calls) == 1 and not (tmp_path / "certificate.json").exists()


@pytest.mark.parametrize("place", list(PLACES), ids=list(PLACES))
def test_out_at_a_folder_it_did_not_write_is_refused_before_docker_and_every_sentinel_survives(
        place: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    root = make_root(tmp_path)
    before = snapshot(root)
    fake = FakeDocker({"Id": IMAGE_ID}, smoke_cert=smoke_cert())
    with pytest.raises(InputError) as refused:
        certify.certify("mcore:rt", root / PLACES[place], [], run=fake)
    assert "\n" not in str(refused.value) and fake.calls == []
    assert cli.main(["certify", "mcore:rt", "--out", str(root / PLACES[place])]) == 2  # the CLI: before docker too
    err = capsys.readouterr().err
    assert err.startswith("error: --out") and err.count("\n") == 1
    assert snapshot(root) == before


def test_certify_replaces_its_own_folder_and_nothing_else(tmp_path: Path) -> None:
    out = tmp_path / "cert"
    assert certify.certify("mcore:rt", out, [], run=FakeDocker({"Id": IMAGE_ID}, smoke_cert=smoke_cert())) == 0
    assert certify.certify("mcore:rt", out, [], run=FakeDocker({"Id": IMAGE_ID}, smoke_cert=smoke_cert("failed", 1))) \
        == 1
    assert json.loads((out / "certificate.json").read_text())["certify"]["status"] == "failed"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cert"]  # no temporary sibling left
    (out / "attach.txt").write_text("attached as sha256:…")  # what the release path writes next to it
    fake = FakeDocker({"Id": IMAGE_ID}, smoke_cert=smoke_cert())
    with pytest.raises(InputError, match=r"holds attach\.txt, which `mcore-images certify` did not write"):
        certify.certify("mcore:rt", out, [], run=fake)
    assert fake.calls == [] and (out / "attach.txt").is_file()


def test_a_smoke_certificate_that_is_not_json_is_bound_as_could_not_run(tmp_path: Path) -> None:
    (tmp_path / "certificate.json").write_text("{half")
    code = certify.bind(tmp_path, certify.ImageDigest("i", IMAGE_ID, "image ID"), {"passed": True}, 1)
    cert = json.loads((tmp_path / "certificate.json").read_text())
    assert code == 2 and cert["status"] == "could-not-run" and "cannot be read" in cert["error"]


def test_cli_wires_certify_with_the_smoke_arguments_after_the_separator(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def fake_certify(ref: str, out: Path, smoke_args: list[str], skip_image_tests: bool = False,
                     bench: bool = True) -> int:
        seen.update(ref=ref, out=out, smoke_args=smoke_args, skip=skip_image_tests, bench=bench)
        return 0

    monkeypatch.setattr(certify, "certify", fake_certify)
    assert cli.main(["certify", "reg/x:1", "--out", "o", "--", "--steps", "12"]) == 0
    assert seen == {"ref": "reg/x:1", "out": Path("o"), "smoke_args": ["--steps", "12"], "skip": False, "bench": True}
    assert cli.main(["certify", "reg/x:1", "--no-bench"]) == 0 and not seen["bench"]
    assert cli.main(["certify", "x", "--skip-image-tests", "--", "--cpu"]) == 0
    assert seen["smoke_args"] == ["--cpu"] and seen["skip"]
    assert certify.default_out("reg:5000/team/rt:v1") == Path("out/certify/reg_5000_team_rt_v1")


def test_an_unknown_option_before_the_separator_is_one_line(capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["certify", "x", "--bogus", "--", "--cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--bogus" in err and "--help" in err


@pytest.mark.parametrize(("docker_rc", "code"), [(0, 0), (137, 1), (1, 1), (125, 2)])
def test_the_worse_of_dockers_exit_code_and_the_certificates_counts(tmp_path: Path, docker_rc: int,
                                                                     code: int) -> None:
    """The container writes its own certificate: one that says passed from a run docker saw fail is not."""
    (tmp_path / "certificate.json").write_text(json.dumps(smoke_cert()))
    got = certify.bind(tmp_path, certify.ImageDigest("i", IMAGE_ID, "image ID"), {"passed": True}, docker_rc)
    cert = json.loads((tmp_path / "certificate.json").read_text())
    assert got == code and cert["certify"]["exit_code"] == code
    assert (cert.get("error") is None) == (docker_rc == 0), cert.get("error")
