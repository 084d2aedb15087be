"""docker/pip-check.py: pip check's verdict after a lock is installed, NVIDIA's sbsa tag accepted on aarch64 only, a
declared override's requirement and a left-out distribution's absence accepted, nothing else."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

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
    return module.main([])


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


BRIDGE = "megatron-bridge 0.6.2 has requirement flashinfer-python==0.6.8.post1, but you have flashinfer-python 0.6.12."
DECLARED = [("megatron-bridge", "flashinfer-python", "0.6.12")]


def test_the_requirement_a_declared_override_breaks_is_accepted_and_said() -> None:
    failures, accepted = _module().judge(BRIDGE, "x86_64", _tags, DECLARED)
    assert failures == [] and "declared override flashinfer-python==0.6.12" in accepted[0]


@pytest.mark.parametrize("line", [
    # Only by name: another package's requirement on the same release, and another release, both fail.
    "quack-kernels 0.6.5 has requirement flashinfer-python<0.6, but you have flashinfer-python 0.6.12.",
    "megatron-bridge 0.6.2 has requirement flashinfer-python==0.6.8.post1, but you have flashinfer-python 0.6.13.",
    "megatron-bridge 0.6.2 has requirement flashinfer-cubin==0.6.8.post1, but you have flashinfer-cubin 0.6.12.",
])
def test_a_broken_requirement_the_override_does_not_name_fails(line: str) -> None:
    assert _module().judge(line, "x86_64", _tags, DECLARED) == ([line], [])


def test_without_the_lock_the_overridden_requirement_fails() -> None:
    assert _module().judge(BRIDGE, "x86_64", _tags) == ([BRIDGE], [])


def test_the_lock_header_the_tooling_writes_is_the_one_pip_check_reads(tmp_path) -> None:
    from mcore_images.catalogue.stacks import Override, load_stacks
    from mcore_images.resolve import declared_overrides
    from tests.unit.conftest import variant

    stack = variant(load_stacks()["debian"], overrides=(Override("flashinfer-python==0.6.12", "Megatron_Bridge", "w"),
                                                        Override("nvidia-cutlass-dsl[cu13]==4.5.2", "x", "w")))
    header = declared_overrides.header_lines(stack, {"flashinfer-python": "0.6.12", "nvidia-cutlass-dsl": "4.5.2"})
    lock = tmp_path / "runtime.txt"
    lock.write_text("# Lock of layer 'runtime'\n# Python 3.12\n" + header + "flashinfer-python==0.6.12 \\\n")
    assert _module().arguments([str(lock)]) == ([*DECLARED, ("x", "nvidia-cutlass-dsl", "4.5.2")], [])
    assert _module().arguments(["--override", "megatron-bridge:flashinfer-python==0.6.12"]) == (DECLARED, [])


def test_main_reads_the_overrides_of_the_lock_it_is_given(monkeypatch, capsys, tmp_path) -> None:
    import subprocess

    module = _module()
    lock = tmp_path / "runtime.txt"
    lock.write_text("# Override: flashinfer-python==0.6.12 over megatron-bridge's own requirement on it.\n")
    monkeypatch.setattr(module.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess([], 1, BRIDGE, ""))
    monkeypatch.setattr(module.platform, "machine", lambda: "x86_64")
    assert module.main([str(lock)]) == 0
    assert "accepted: megatron-bridge 0.6.2's requirement" in capsys.readouterr().out
    assert module.main([]) == 1


MISSING = "megatron-bridge 0.6.2 requires fast-hadamard-transform, which is not installed."


def test_the_absence_of_a_left_out_distribution_is_accepted_and_said() -> None:
    failures, accepted = _module().judge(MISSING, "x86_64", _tags, absent=["fast-hadamard-transform"])
    assert failures == [] and "which the stack's locks leave out" in accepted[0]


@pytest.mark.parametrize("line", [
    "megatron-bridge 0.6.2 requires nvidia-resiliency-ext, which is not installed.",  # another distribution
    "megatron-bridge 0.6.2 has requirement fast-hadamard-transform>=1.1.0, but you have fast-hadamard-transform 1.0.",
])
def test_a_line_the_left_out_distribution_does_not_name_fails(line: str) -> None:
    assert _module().judge(line, "x86_64", _tags, absent=["fast-hadamard-transform"]) == ([line], [])


def test_without_the_lock_the_absence_fails() -> None:
    assert _module().judge(MISSING, "x86_64", _tags) == ([MISSING], [])


def test_the_left_out_header_the_tooling_writes_is_the_one_pip_check_reads(tmp_path) -> None:
    from mcore_images.catalogue.stacks import LeftOut, load_stacks
    from mcore_images.resolve import declared_overrides
    from tests.unit.conftest import variant

    stack = variant(load_stacks()["debian"], left_out=(LeftOut("Fast_Hadamard_Transform", "w"),))
    lock = tmp_path / "runtime.txt"
    header = declared_overrides.header_lines(stack, [], ["fast-hadamard-transform"])
    lock.write_text("# Lock of layer 'runtime'\n" + header + "numpy==2.3.0 \\\n")
    assert _module().arguments([str(lock)]) == ([], ["fast-hadamard-transform"])
    assert _module().arguments(["--left-out", "Fast_Hadamard.Transform"]) == ([], ["fast-hadamard-transform"])
    with pytest.raises(SystemExit, match="--left-out takes a distribution name"):
        _module().arguments(["--left-out"])


def _wheel(folder, name: str, requires: tuple[str, ...] = ()):
    import zipfile

    path = folder / f"{name}-1.0-py3-none-any.whl"
    info = f"{name}-1.0.dist-info"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n"
                       + "".join(f"Requires-Dist: {r}\n" for r in requires))
        wheel.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                       "Tag: py3-none-any\n")
        wheel.writestr(f"{info}/RECORD", "")
    return path


def test_real_pip_check_in_a_fresh_environment_is_judged_by_the_lock_header(tmp_path) -> None:
    """pip's own words, not a copy of them: a package installed without the distribution it requires, in a venv of its
    own (pip from the standard library's ensurepip, no index)."""
    import subprocess
    import sys

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    python = venv / "bin" / "python"
    wheel = _wheel(tmp_path, "requirer", ("left-alone>=1", "other-missing"))
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], check=True,
                   capture_output=True, env={"PATH": "/usr/bin:/bin", "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    lock = tmp_path / "app.txt"
    lock.write_text("# Left out: left-alone, resolved but not installed (env/stacks.json says why).\n")

    def check(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([python, str(SCRIPT), *args], capture_output=True, text=True, check=False,
                              env={"PATH": "/usr/bin:/bin", "PIP_DISABLE_PIP_VERSION_CHECK": "1"})

    done = check(str(lock))
    assert done.returncode == 1, done.stdout
    assert "accepted: requirer 1.0 requires left-alone, which the stack's locks leave out" in done.stdout
    assert done.stdout.strip().endswith("requirer 1.0 requires other-missing, which is not installed.")
    assert check(str(lock), "--left-out", "other-missing").returncode == 0
