"""The verl step's outputs keep the create-only rule, and a certificate gains only what a run tested.

Before: `python -m mcore_images.smoke.verl_step --out DIR` replaced the user's verl_step.json (`mkdir(exist_ok=True)`,
then `write_text`); `--certificate CERT` on a run that could not run rewrote a passed certificate's json and md and
still exited 0 (with --cpu-check); `engine_case --model MISSING` exited 0 silently and replaced its --out file."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mcore_images import create_only
from mcore_images.smoke import certificate
from mcore_images.smoke.verl_step import cli
from tests.unit.conftest import PYTHONPATH
from tests.unit.mcore_images.smoke.test_certificate import sample_cert

USERS = b'{"mine": true}\n'


def sha(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def passed_certificate(folder: Path) -> Path:
    certificate.write(sample_cert(), folder)
    return folder


def test_a_users_folder_with_verl_step_json_is_refused_before_anything_runs(tmp_path: Path,
                                                                            capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "verl_step.json").write_bytes(USERS)
    before = sha(tmp_path)
    assert cli.main(["--out", str(tmp_path), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"smoke.verl_step: could not run: --out {tmp_path} is a folder mcore-images did not write (it has "
                   f"no {create_only.MARKER}) and is not empty: give a new or empty folder; nothing was changed"]
    assert sha(tmp_path) == before


def test_a_run_that_could_not_run_leaves_the_certificate_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture) -> None:
    cert = passed_certificate(tmp_path / "cert")
    before = sha(cert)
    monkeypatch.setattr(cli, "count_gpus", lambda: 1)  # past the GPU check, to the packages this machine lacks
    monkeypatch.setattr(cli, "missing_modules", lambda parts: ["verl"])
    code = cli.main(["--certificate", str(cert), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"{cert} left as it was: this run tested nothing to add to it" in err
    assert sha(cert) == before
    assert (tmp_path / "out" / "verl_step.json").is_file()  # the report itself is written
    assert create_only.claim(tmp_path / "out", cli.OUTPUT_OWNER).listed == ("verl_step.json",)


def test_the_cpu_check_adds_nothing_to_a_certificate(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    cert = passed_certificate(tmp_path / "cert")
    before = sha(cert)
    assert cli.main(["--cpu-check", "--certificate", str(cert)]) == 2
    assert "--cpu-check runs none of the GPU parts a certificate records: drop --certificate" in capsys.readouterr().err
    assert sha(cert) == before


def engine_case(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": PYTHONPATH}
    return subprocess.run([sys.executable, "-m", "mcore_images.smoke.verl_step.engine_case", "--backend", "fused",
                           "--bridge", "mbridge", *args], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)


def test_engine_case_refuses_a_missing_model_and_a_users_file(tmp_path: Path) -> None:
    (tmp_path / "batch.pt").write_bytes(b"x")
    mine = tmp_path / "record.json"
    mine.write_bytes(USERS)
    before = sha(tmp_path)
    missing = engine_case(tmp_path, "--model", "MISSING", "--batch", "batch.pt", "--out", "new.json")
    assert missing.returncode == 2 and missing.stderr.splitlines() == [
        "smoke.verl_step.engine_case: could not run: --model MISSING not found: give the tiny model's folder"]
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    taken = engine_case(tmp_path, "--model", "model", "--batch", "batch.pt", "--out", str(mine))
    assert taken.returncode == 2 and "did not write: give a new file name" in taken.stderr, taken.stderr
    assert sha(tmp_path) == before and not (tmp_path / "new.json").exists()
