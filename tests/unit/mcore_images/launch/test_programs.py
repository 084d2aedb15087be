"""`mcore-images smoke|bridge|bench`: the same flags for the three programs, here or inside an image."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from mcore_images import cli
from tests.unit.conftest import ROOT


@pytest.fixture
def ran(monkeypatch: pytest.MonkeyPatch, tools_on_path: None) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def fake_run(cmd: list[str], env: dict[str, str] | None = None, check: bool = False,
                 **kwargs: Any) -> subprocess.CompletedProcess:
        if "--entrypoint" in cmd or cmd[1:3] == ["image", "inspect"]:  # the probes: the image is here, the engine
            return subprocess.CompletedProcess(cmd, 0, "", "")  # gives memlock unlimited and the GPUs
        seen.update(cmd=cmd, env=env)
        return subprocess.CompletedProcess(cmd, 1)

    monkeypatch.setattr(subprocess, "run", fake_run)
    return seen


@pytest.mark.parametrize(("name", "module"), [("smoke", "mcore_images.smoke"), ("bridge", "mcore_images.smoke.bridge"),
                                              ("bench", "mcore_images.smoke.bench")])
def test_each_program_runs_here_with_the_checkout_first(name: str, module: str, ran: dict[str, Any],
                                                        tmp_path: Path) -> None:
    assert cli.main([name, "--out", str(tmp_path), "--", "--dry-run"]) == 1
    assert ran["cmd"][1:] == ["-m", module, "--out", str(tmp_path), "--dry-run"]
    assert ran["env"]["PYTHONPATH"].split(":")[0] == str(ROOT / "src")


def test_bench_runs_in_an_image_with_this_checkouts_baselines(ran: dict[str, Any], tmp_path: Path) -> None:
    (tmp_path / "cert").mkdir()
    (tmp_path / "cert" / "certificate.json").write_text("{}")
    assert cli.main(["bench", "--image", "mcore-images:runtime-cuda", "--out", str(tmp_path / "o"),
                     "--certificate", str(tmp_path / "cert"), "--", "--specs", "te"]) == 1
    cmd = ran["cmd"]
    assert cmd[:5] == ["docker", "run", "--rm", "--gpus", "all"]
    assert "NCCL_NVLS_ENABLE=0" in cmd and f"{tmp_path / 'o'}:/out" in cmd and f"{tmp_path / 'cert'}:/cert" in cmd
    assert f"{ROOT / 'env' / 'bench-baselines.json'}:/opt/mcore-images/env/bench-baselines.json:ro" in cmd
    image_at = cmd.index("mcore-images:runtime-cuda")
    assert cmd[image_at + 1:] == ["python", "-m", "mcore_images.smoke.bench", "--out", "/out", "--certificate", "/cert",
                                  "--specs", "te"]


def test_own_baselines_flag_is_not_overridden_by_the_mount(ran: dict[str, Any], tmp_path: Path) -> None:
    cli.main(["bench", "--image", "img", "--out", str(tmp_path), "--", "--baselines", "/x.json"])
    assert not any("bench-baselines.json:" in part for part in ran["cmd"])


def test_cpu_runs_in_an_image_get_no_gpus(ran: dict[str, Any], tmp_path: Path) -> None:
    cli.main(["smoke", "--image", "img", "--out", str(tmp_path), "--", "--cpu"])
    assert "--gpus" not in ran["cmd"] and ran["cmd"][-4:] == ["mcore_images.smoke", "--out", "/out", "--cpu"]


def test_a_missing_certificate_is_one_line_before_anything_runs(ran: dict[str, Any], tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["bridge", "--certificate", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "certificate.json not found" in err and not ran


def test_the_smoke_has_no_certificate_flag(capsys: pytest.CaptureFixture) -> None:
    """The smoke writes the certificate (--out); only the bridge and the bench add sections to one."""
    assert cli.main(["smoke", "--certificate", "x"]) == 2
    assert "unrecognized arguments: --certificate" in capsys.readouterr().err
