"""`mcore-images build --platform`: one platform per build, a stack's own platforms only, QEMU registered first for a
foreign one; an amd64-only stack builds on an x86_64 machine with no platform given to bake."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mcore_images.catalogue import platforms
from mcore_images.errors import InputError
from mcore_images.image_build import bake
from mcore_images.launch import emulation

SHA = "0123456789abcdef0123456789abcdef01234567"
ARM64 = platforms.BY_NAME["linux/arm64"]


@pytest.fixture
def x86_64(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(emulation, "machine", lambda: "x86_64")


def bake_command(capsys: pytest.CaptureFixture[str], **request: object) -> list[str]:
    assert bake.build(bake.BuildRequest(dry_run=True, **request)) == 0  # type: ignore[arg-type]
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("bake: "))
    return line.removeprefix("bake: ").split()


def test_an_amd64_only_stack_builds_as_before(x86_64: None, capsys: pytest.CaptureFixture[str]) -> None:
    command = bake_command(capsys, stack="debian-verl")
    assert not any("platform" in word for word in command)
    assert command[-1].endswith("build/bake-metadata.json")


def test_a_multi_platform_stack_builds_this_machines_platform_alone(x86_64: None,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    command = bake_command(capsys, stack="debian", layer="runtime")
    assert command[command.index("--set") + 1] == "*.platform=linux/amd64"


def test_platform_arm64_builds_arm64_with_per_platform_candidate_tags(x86_64: None,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    command = bake_command(capsys, stack="debian", layer="runtime", platform="linux/arm64", candidate=SHA,
                           registry="127.0.0.1:5000")
    sets = [command[i + 1] for i, word in enumerate(command) if word == "--set"]
    assert "*.platform=linux/arm64" in sets
    assert f"runtime-debian.tags=127.0.0.1:5000/mcore-images:candidate-{SHA}-runtime-debian.arm64" in sets
    assert command[-1].endswith("build/candidates/bake-metadata.arm64.json")


def test_a_platform_the_stack_cannot_have_is_refused_with_the_rules_reason(x86_64: None) -> None:
    with pytest.raises(InputError) as caught:
        bake.build(bake.BuildRequest(stack="debian-verl", platform="linux/arm64", dry_run=True))
    assert str(caught.value).startswith("stack 'debian-verl' is not built for linux/arm64 (its platforms: linux/amd64; "
                                        "torch 2.9.0 has no CUDA build for aarch64 on PyPI")
    assert str(caught.value).endswith("; build one of its platforms (--platform linux/amd64)")


def test_on_a_grace_host_an_amd64_only_stack_names_the_platform_to_give(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(emulation, "machine", lambda: "aarch64")
    with pytest.raises(InputError, match=r"give --platform linux/amd64 \(emulated here: `make emulation` first\)$"):
        bake.build(bake.BuildRequest(stack="debian-verl", dry_run=True))


def test_an_unknown_platform_is_one_line() -> None:
    with pytest.raises(InputError, match=r"^--platform 'linux/riscv64' is not one of linux/amd64, linux/arm64"):
        bake.build(bake.BuildRequest(stack="debian", platform="linux/riscv64", dry_run=True))


def test_a_foreign_build_stops_before_bake_without_qemu(x86_64: None, monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    monkeypatch.setattr(bake, "check_docker", lambda: None)
    monkeypatch.setattr(bake, "bake_env", lambda request: {})
    monkeypatch.setattr(emulation, "BINFMT", tmp_path)
    ran: list[object] = []
    monkeypatch.setattr(bake.subprocess, "run", lambda *a, **k: ran.append(a))
    monkeypatch.setattr(bake.subprocess, "Popen", lambda *a, **k: ran.append(a))
    with pytest.raises(InputError, match=r"need QEMU registered with binfmt_misc .*run `make emulation`"):
        bake.build(bake.BuildRequest(stack="debian", layer="runtime", platform="linux/arm64"))
    assert ran == []


def _entry(tmp_path: Path, state: str = "enabled", flags: str = "OCF") -> Path:
    (tmp_path / "qemu-aarch64").write_text(f"{state}\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\n"
                                           f"flags: {flags}\noffset 0\nmagic 7f454c46\nmask ffffffff\n")
    return tmp_path


def qemu(version: str | None) -> Callable[[list[str]], str | None]:
    return lambda lines: version


def test_emulation_needs_an_enabled_qemu_entry_with_the_f_flag(tmp_path: Path) -> None:
    assert emulation.problem(ARM64, "aarch64", tmp_path) is None  # native
    assert "(no " in str(emulation.problem(ARM64, "x86_64", tmp_path))
    assert "is disabled" in str(emulation.problem(ARM64, "x86_64", _entry(tmp_path, state="disabled")))
    missing_f = str(emulation.problem(ARM64, "x86_64", _entry(tmp_path, flags="OC")))
    assert "with the F flag" in missing_f and "flags 'OC'" in missing_f and missing_f.endswith(emulation.FIX)
    assert emulation.problem(ARM64, "x86_64", _entry(tmp_path), qemu("11.1.3")) is None
    assert emulation.problem(ARM64, "x86_64", _entry(tmp_path), qemu("11.1")) is None


@pytest.mark.parametrize(("version", "says"), [
    ("7.2.22", "holds QEMU 7.2.22, which runs Debian's arm64 programs about 9x slower"),
    ("9.2", "holds QEMU 9.2, which runs Debian's arm64 programs about 9x slower"),
    ("10.0.2", "holds QEMU 10.0.2, which can deadlock a child forked from a many-threaded program"),
    (None, "did not say its QEMU version"),
])
def test_emulation_refuses_a_qemu_older_than_the_floor(tmp_path: Path, version: str | None, says: str) -> None:
    """Under QEMU 7.2 every emulated step and test limit takes about nine times longer, and 10.0 hangs forked children
    now and then: one line that says which, before any run."""
    found = str(emulation.problem(ARM64, "x86_64", _entry(tmp_path), qemu(version)))
    assert says in found and found.endswith(emulation.FIX) and "\n" not in found


def test_the_registered_qemu_is_asked_its_version_with_the_entrys_own_magic(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe file is the entry's offset and magic, run with QEMU_VERSION set: the interpreter the kernel holds
    answers, not the one the package installed since."""
    seen: dict[str, object] = {}

    def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        seen["bytes"] = Path(argv[0]).read_bytes()
        seen["env"] = kwargs["env"]["QEMU_VERSION"]
        return subprocess.CompletedProcess(argv, 0, "qemu-aarch64 version 10.0.2 (Debian 1:10.0.2+ds-2)\nCopyright\n")

    monkeypatch.setattr(emulation.subprocess, "run", run)
    lines = ["enabled", "flags: POF", "offset 2", "magic 7f454c460201", "mask ffffffffffff"]
    assert emulation.registered_version(lines) == "10.0.2"
    assert seen == {"bytes": b"\0\0\x7fELF\x02\x01", "env": "1"}
    monkeypatch.setattr(emulation.subprocess, "run",
                        lambda argv, **kw: subprocess.CompletedProcess(argv, 126, "", "exec format error"))
    assert emulation.registered_version(lines) is None
    assert emulation.registered_version(["enabled", "magic 7f45zz"]) is None


def test_time_limits_stretch_only_for_a_platform_that_runs_under_qemu() -> None:
    amd64 = platforms.BY_NAME["linux/amd64"]
    assert emulation.slowdown(amd64, "x86_64") == 1.0
    assert emulation.slowdown(ARM64, "aarch64") == 1.0  # a Grace host runs its own images at full speed
    assert emulation.slowdown(None, "x86_64") == 1.0  # an image whose platform is not one of ours: no stretch
    assert emulation.slowdown(ARM64, "x86_64") == emulation.SLOWDOWN > 1
    assert emulation.slowdown(amd64, "aarch64") == emulation.SLOWDOWN
