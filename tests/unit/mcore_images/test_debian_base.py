"""The debian base's tree: the build host's resolvers and name do not reach the image."""

from __future__ import annotations

from pathlib import Path

from mcore_images import debian_base


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
