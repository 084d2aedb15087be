"""The debian base: the build host's resolvers and name do not reach the image; one image per platform, the
default platform's made with plain debootstrap, another's with debootstrap --arch under QEMU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcore_images.catalogue import platforms
from mcore_images.catalogue.stacks import Stack, load_stacks
from mcore_images.errors import InputError
from mcore_images.image_build import bake_file, debian_base


def test_host_identity_files_are_emptied(tmp_path: Path) -> None:
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "resolv.conf").write_text("nameserver 10.0.0.2\nsearch corp.example\n")
    outside = tmp_path / "host-hostname"
    outside.write_text("buildbox-17\n")
    (etc / "hostname").symlink_to(outside)
    debian_base.neutralize(str(tmp_path))
    for name in ("resolv.conf", "hostname"):
        path = etc / name
        assert path.is_file() and not path.is_symlink() and path.read_text() == "", name
    assert outside.read_text() == "buildbox-17\n", "a link is replaced, never followed"


def test_a_missing_file_is_created_empty(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    debian_base.neutralize(str(tmp_path))
    assert (tmp_path / "etc" / "hostname").read_text() == ""


def _stack(name: str = "debian") -> Stack:
    return load_stacks()[name]


def test_the_default_platforms_base_is_made_as_before_platforms() -> None:
    # The amd64 base's commands (and so its image, the FROM of every amd64 build) did not change.
    debootstrap, docker_import = debian_base.commands(_stack(), "/t", "http://m", None, machine="x86_64")
    assert debootstrap == ["debootstrap", "--variant=minbase", "trixie", "/t", "http://m"]
    assert docker_import == ["docker", "import", "--change", "ENV LANG=C.UTF-8", "--change", 'CMD ["/bin/bash"]',
                             "--change", f"LABEL {debian_base.RECIPE_LABEL}={debian_base.RECIPE}",
                             "--message", "debootstrap --variant=minbase trixie http://m", "-",
                             "mcore-images/base-debian:trixie"]
    assert debian_base.commands(_stack(), "/t", "http://m", platforms.DEFAULT, machine="x86_64") == (
        debootstrap, docker_import)


def test_the_arm64_base_is_debootstrapped_for_arm64_and_imported_as_arm64_under_its_own_tag() -> None:
    arm64 = platforms.BY_NAME["linux/arm64"]
    debootstrap, docker_import = debian_base.commands(_stack(), "/t", "http://m", arm64, machine="x86_64")
    assert debootstrap == ["debootstrap", "--variant=minbase", "--arch=arm64", "trixie", "/t", "http://m"]
    assert docker_import[:4] == ["docker", "import", "--platform", "linux/arm64"]
    assert docker_import[-1] == "mcore-images/base-debian:trixie-arm64" == debian_base.local_tag(_stack(), arm64)
    assert "debootstrap --variant=minbase --arch=arm64 trixie http://m" in docker_import
    # On a Grace host the amd64 base is the foreign one.
    debootstrap, docker_import = debian_base.commands(_stack(), "/t", "http://m", None, machine="aarch64")
    assert "--arch=amd64" in debootstrap and docker_import[2:4] == ["--platform", "linux/amd64"]


def test_the_arm64_base_tag_is_the_one_bake_hands_to_buildkit(root: Path) -> None:
    arm64 = platforms.BY_NAME["linux/arm64"]
    stack = _stack().replace(platforms=("linux/amd64", "linux/arm64"))
    contexts = bake_file.contexts("base", stack)
    assert contexts[f"{stack.base_image}::linux/arm64"] == f"docker-image://{debian_base.local_tag(stack, arm64)}"


def test_a_foreign_base_needs_qemu_registered_first(monkeypatch: pytest.MonkeyPatch, tools_on_path: None) -> None:
    monkeypatch.setattr(debian_base, "recipe_of", lambda ref: None)
    monkeypatch.setattr(debian_base.os, "geteuid", lambda: 0)
    monkeypatch.setattr(debian_base.emulation, "problem", lambda platform: "linux/arm64 programs … need QEMU")
    ran: list[list[str]] = []
    monkeypatch.setattr(debian_base.subprocess, "run", lambda argv, **kw: ran.append(argv))
    with pytest.raises(InputError, match=r"^debootstrap of the linux/arm64 base: linux/arm64 programs … need QEMU$"):
        debian_base.ensure(_stack(), platform=platforms.BY_NAME["linux/arm64"])
    assert ran == []


def test_base_dry_run_prints_what_it_would_run(capsys: pytest.CaptureFixture[str]) -> None:
    from mcore_images import cli

    assert cli.main(["base", "--stack", "debian", "--platform", "linux/arm64", "--dry-run", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["tag"] == "mcore-images/base-debian:trixie-arm64" and "--arch=arm64" in shown["debootstrap"]
    assert cli.main(["base", "--stack", "debian-verl", "--platform", "linux/arm64", "--dry-run"]) == 2
    assert capsys.readouterr().err == ("error: stack 'debian-verl' is not built for linux/arm64 (its platforms: "
                                       "linux/amd64); give one of them\n")
