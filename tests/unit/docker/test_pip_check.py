"""docker/pip-check.py: pip check's verdict after a lock is installed, NVIDIA's sbsa tag accepted on aarch64 only."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[3] / "docker" / "pip-check.py"
SBSA = "nvidia-cusparselt-cu13 0.8.0 is not supported on this platform"


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("pip_check", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tags(name: str) -> list[str]:
    return {"nvidia-cusparselt-cu13": ["py3-none-manylinux2014_sbsa"],
            "other": ["py3-none-manylinux2014_x86_64"]}.get(name, [])


def test_a_clean_report_passes() -> None:
    assert _module().judge("No broken requirements found.\n", "x86_64", _tags) == ([], [])


def test_the_sbsa_tag_is_accepted_on_aarch64_and_said() -> None:
    failures, accepted = _module().judge(SBSA + "\n", "aarch64", _tags)
    assert failures == []
    assert accepted and "manylinux2014_sbsa" in accepted[0] and "aarch64" in accepted[0]


def test_the_sbsa_tag_fails_on_x86_64() -> None:
    assert _module().judge(SBSA, "x86_64", _tags) == ([SBSA], [])


def test_another_unsupported_wheel_fails_on_aarch64() -> None:
    line = "other 1.0 is not supported on this platform"
    assert _module().judge(line, "aarch64", _tags) == ([line], [])


def test_a_broken_requirement_fails_beside_an_accepted_line() -> None:
    broken = "megatron-core 0.16.1 has requirement numpy<2, but you have numpy 2.3.0."
    failures, accepted = _module().judge(f"{SBSA}\n{broken}\n", "aarch64", _tags)
    assert failures == [broken] and len(accepted) == 1


def test_an_installed_distribution_without_a_wheel_file_is_not_accepted() -> None:
    line = "ghost 1.0 is not supported on this platform"
    assert _module().judge(line, "aarch64", _tags) == ([line], [])


def _run_main(monkeypatch, report: str, returncode: int, machine: str) -> int:
    """main() as install-lock.sh runs it, with pip check's report and the machine given."""
    import subprocess

    module = _module()
    done = subprocess.CompletedProcess([], returncode, report, "")
    monkeypatch.setattr(module.subprocess, "run", lambda *a, **k: done)
    monkeypatch.setattr(module.platform, "machine", lambda: machine)
    monkeypatch.setattr(module, "wheel_tags", _tags)
    return module.main()


def test_main_exits_0_on_a_clean_check(monkeypatch, capsys) -> None:
    assert _run_main(monkeypatch, "No broken requirements found.\n", 0, "x86_64") == 0
    assert "no broken requirements" in capsys.readouterr().out


def test_main_accepts_sbsa_on_aarch64_and_fails_it_elsewhere(monkeypatch, capsys) -> None:
    assert _run_main(monkeypatch, SBSA + "\n", 1, "aarch64") == 0
    assert "accepted: nvidia-cusparselt-cu13 0.8.0" in capsys.readouterr().out
    assert _run_main(monkeypatch, SBSA + "\n", 1, "x86_64") == 1
    assert SBSA in capsys.readouterr().out


def test_main_fails_a_failed_check_it_cannot_read(monkeypatch) -> None:
    assert _run_main(monkeypatch, "", 1, "aarch64") == 1
