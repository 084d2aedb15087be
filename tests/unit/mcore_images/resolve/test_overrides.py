"""`build --set`: pin overrides re-resolve only the locks at and above the layer they touch."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mcore_images.catalogue.stacks import Stack
from mcore_images.errors import InputError
from mcore_images.resolve import lock_files, overrides, pypi, uv_compile


def test_parse_and_layer_order() -> None:
    assert overrides.parse(["mcore=0.16.0", "te=2.19.0"]) == {"mcore": "0.16.0", "te": "2.19.0"}
    assert overrides.first_changed_layer({"mcore": "0.16.0"}) == "runtime"
    assert overrides.first_changed_layer({"mcore": "0.16.0", "te": "2.19.0"}) == "kernels"
    assert overrides.first_changed_layer({"torch": "2.11.0", "verl": "0.9.1"}) == "base"
    assert overrides.first_changed_layer({"cuda_archs": "80;90"}) is None


@pytest.mark.parametrize("bad", ["mcore", "mcore=", "name=other", "groups=ci", "colour=blue"])
def test_bad_assignments(bad: str) -> None:
    with pytest.raises(InputError):
        overrides.parse([bad])


def fake_root(tmp_path: Path, root: Path) -> Path:
    (tmp_path / "env").mkdir()
    shutil.copy(root / "env" / "stacks.json", tmp_path / "env" / "stacks.json")
    shutil.copy(root / "docker-bake.json", tmp_path / "docker-bake.json")
    shutil.copytree(root / "env" / "locks", tmp_path / "env" / "locks")
    return tmp_path


def test_mcore_bump_keeps_lower_locks_byte_identical(tmp_path: Path, root: Path, stacks: dict[str, Stack],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    work = fake_root(tmp_path, root)
    calls: list[tuple[list[str], dict[str, str]]] = []
    agreed: dict[str, dict[str, str]] = {}

    def fake_compile(stack: Stack, requirements: list[str], below: dict[str, str],
                     constraints: dict[str, str] | None = None, machine: str = "x86_64",
                     preferred: str = "") -> str:
        calls.append((requirements, dict(below)))
        agreed.setdefault(machine, {}).update(constraints or {})
        return f"megatron-core=={stack.mcore} \\\n    --hash=sha256:{'1' * 64}\n"

    monkeypatch.setattr(uv_compile, "compile_layer", fake_compile)
    monkeypatch.setattr(pypi, "sdist_requirements", lambda name, version: [])
    changed = overrides.apply(stacks["debian"], {"mcore": "0.16.0"})
    bake_file, locks = overrides.workspace(stacks, changed, {"mcore": "0.16.0"}, work)
    committed = work / "env" / "locks" / "debian"
    for layer in ("base", "builder", "kernels"):
        assert (locks / "debian" / f"{layer}.txt").read_bytes() == (committed / f"{layer}.txt").read_bytes()
    assert "megatron-core==0.16.0" in (locks / "debian" / "runtime.txt").read_text()
    # torch may appear as a requirement of the chain, but always pinned (and not re-emitted) at the
    # version the kept base lock holds.
    base_torch = lock_files.pins((committed / "base.txt").read_text())["torch"]
    assert calls and all(below.get("torch") == base_torch for _, below in calls)
    assert not any("torch" in name for name in lock_files.pins((locks / "debian" / "runtime.txt").read_text()))
    entry = next(e for e in json.loads(bake_file.read_text())["stacks"] if e["name"] == "debian")
    assert entry["mcore"] == "0.16.0"
    assert json.loads((work / "env" / "stacks.json").read_text()) != json.loads(bake_file.read_text())
    # The arm64 locks (debian lists linux/arm64) are laid out as env/locks/aarch64 is, their lower layers kept byte
    # for byte, and resolved at the override's x86_64 versions, not the committed ones.
    for layer in ("base", "builder", "kernels"):
        assert (locks / "aarch64" / "debian" / f"{layer}.txt").read_bytes() == (
            work / "env" / "locks" / "aarch64" / "debian" / f"{layer}.txt").read_bytes()
    assert "aarch64-manylinux" in (locks / "aarch64" / "debian" / "runtime.txt").read_text().splitlines()[1]
    assert agreed["aarch64"]["megatron-core"] == "0.16.0"


def test_override_that_breaks_a_rule_stops_before_docker(root: Path) -> None:
    from mcore_images.image_build import bake
    with pytest.raises(InputError, match="mbridge-mcore"):
        bake.build(bake.BuildRequest(stack="debian", sets=("mcore=0.19.2",), dry_run=True))
    with pytest.raises(InputError, match="add --stack"):
        bake.build(bake.BuildRequest(sets=("mcore=0.16.0",), dry_run=True))


def test_an_override_of_a_stack_sharing_layers_carries_the_shared_locks(tmp_path: Path, root: Path,
                                                                       stacks: dict[str, Stack],
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The Dockerfile mounts the lower layers' locks from <layers_from>/ of the locks context: an override's locks
    folder holds them too, for every platform (before, it held the stack's own folder alone)."""
    work = fake_root(tmp_path, root)
    monkeypatch.setattr(uv_compile, "compile_layer",
                        lambda stack, requirements, below, constraints=None, machine="x86_64", preferred="":
                        f"megatron-core=={stack.mcore} \\\n    --hash=sha256:{'1' * 64}\n")
    monkeypatch.setattr(pypi, "sdist_requirements", lambda name, version: [])
    changed = overrides.apply(stacks["debian-mcore019"], {"mcore": "0.19.1"})
    _, locks = overrides.workspace(stacks, changed, {"mcore": "0.19.1"}, work)
    for tree, committed in ((locks, work / "env" / "locks"), (locks / "aarch64", work / "env" / "locks" / "aarch64")):
        assert (tree / "debian" / "base.txt").read_bytes() == (committed / "debian" / "base.txt").read_bytes()
        assert "megatron-core==0.19.1" in (tree / "debian-mcore019" / "runtime.txt").read_text()
