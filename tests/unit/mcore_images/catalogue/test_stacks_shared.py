"""A stack that takes its base and kernels layers from another (``layers_from``): what it builds, where its
locks live, and every way the declaration can be wrong, each one line before anything runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcore_images.catalogue.stacks import load_stacks
from mcore_images.errors import InputError
from mcore_images.resolve import lock_check, lock_files
from tests.unit.conftest import ROOT


def test_the_shared_stack_builds_only_its_runtime_on_debians_layers() -> None:
    stacks = load_stacks()
    shared = stacks["debian-mcore019"]
    assert shared.layers == ("base", "kernels", "runtime") and shared.built_layers == ("runtime",)
    assert shared.layer_stack("kernels") == "debian" and shared.layer_stack("runtime") == "debian-mcore019"
    assert lock_files.lock_path(shared, "base") == ROOT / "env/locks/debian/base.txt"
    assert lock_files.lock_path(shared, "runtime") == ROOT / "env/locks/debian-mcore019/runtime.txt"
    assert lock_files.own_layers(shared) == ("runtime", "app") and lock_check.check_locks(shared) == []


def edited(tmp_path: Path, **changes: str) -> Path:
    doc = json.loads((ROOT / "env/stacks.json").read_text())
    entry = next(e for e in doc["stacks"] if e["name"] == "debian-mcore019")
    entry.update(changes)
    path = tmp_path / "stacks.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize(("changes", "message"), [
    ({"layers_from": "ubuntu"}, "layers_from 'ubuntu' must name another stack that builds its own layers"),
    ({"layers_from": "debian-mcore019"}, "must name another stack"),
    ({"torch": "2.10.0"}, "takes its base and kernels layers from 'debian' but its torch differ"),
    ({"cuda_archs": "80;90"}, "but its cuda_archs differ; give them debian's values, or drop layers_from"),
])
def test_a_wrong_declaration_is_one_line(tmp_path: Path, changes: dict[str, str], message: str) -> None:
    with pytest.raises(InputError, match=message) as caught:
        load_stacks(edited(tmp_path, **changes))
    assert "\n" not in str(caught.value)
