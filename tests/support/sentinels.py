"""A temporary stand-in for a machine's root, full of sentinel files: what a test points a command that writes
(or could delete) a folder at, instead of a real system path, and then checks that every sentinel survived."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

SENTINELS = {
    "etc/passwd": "root:x:0:0:root:/root:/bin/bash\n",
    "etc/hostname": "sentinel\n",
    "boot/vmlinuz": "a kernel\n",
    "home/user/.bashrc": "export PS1='$ '\n",
    "home/user/certificate.json": '{"mine": true}\n',
    "home/user/notes/todo.txt": "keep me\n",
    "checkout/.git/HEAD": "ref: refs/heads/main\n",
    "checkout/README.md": "# a checkout\n",
    "checkout/certificate.md": "# my own notes\n",
    "checkout/src/app.py": "print('hello')\n",
    "file.txt": "a file, not a folder\n",
}

PLACES = {
    "the root": "",
    "a system folder": "etc",
    "a home folder": "home/user",
    "a checkout": "checkout",
    "a file": "file.txt",
    "a path under a file": "file.txt/site",
}
"""Where a test points --out, relative to the fake root: each must be refused with nothing touched."""


def make_root(base: Path) -> Path:
    """A fake root under ``base`` holding every sentinel."""
    root = base / "root"
    plant(root, SENTINELS)
    return root


def plant(root: Path, files: Mapping[str, str | bytes]) -> None:
    """Each of ``files`` (path under ``root`` → its text or bytes) written under ``root``, its folders made."""
    for name, content in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            (root / name).write_bytes(content)
        else:
            (root / name).write_text(content)


def files_under(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (its path there → its bytes): equal to what was planted means each file was kept
    and none added."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def snapshot(root: Path) -> dict[str, str | None]:
    """Every folder (None) and file (its text) under ``root``: equal before and after means nothing was touched."""
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_text() for p in sorted(root.rglob("*"))}
