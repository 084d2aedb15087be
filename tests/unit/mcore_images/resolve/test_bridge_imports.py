"""What a Megatron-Bridge wheel imports at import time that a megatron-core wheel lacks, on small made-up wheels."""

from __future__ import annotations

import zipfile
from pathlib import Path

from mcore_images.resolve import bridge_imports


def _wheel(path: Path, files: dict[str, str]) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return path


CORE = {
    "megatron/core/__init__.py": "",
    "megatron/core/utils.py": "def is_te_min_version(v): ...\nLIMIT = 3\n",
    "megatron/core/ssm/__init__.py": "",
    "megatron/core/ssm/alloc.py": "from megatron.core.models.hybrid import *  # moved\n",
    "megatron/core/models/__init__.py": "",
    "megatron/core/models/hybrid.py": "class Symbols: ...\ndef parse_pattern(p): ...\n",
    "megatron/core/transformer/__init__.py": "from .spec import ModuleSpec\n",
    "megatron/core/transformer/spec.py": "class ModuleSpec: ...\n",
}

BRIDGE = {
    "megatron/bridge/__init__.py": "import megatron.bridge.models\n",
    "megatron/bridge/models.py": (
        "from typing import TYPE_CHECKING\n"
        "from megatron.core.utils import is_te_min_version, LIMIT\n"
        "from megatron.core.ssm.alloc import Symbols, parse_pattern\n"  # through the star re-export
        "from megatron.core.transformer import ModuleSpec\n"
        "from megatron.core import utils\n"  # a submodule
        "from megatron.core.utils import gone_name\n"  # lacking
        "from megatron.core.inference.apis import Client\n"  # a module that does not exist
        "import megatron.core.no_such_module\n"
        "try:\n    from megatron.core.optional import Thing\nexcept ImportError:\n    Thing = None\n"
        "if TYPE_CHECKING:\n    from megatron.core.typing_only import Hint\n"
        "def later():\n    from megatron.core.lazy import Late\n"
    ),
}


def test_only_what_import_time_needs_and_the_core_lacks_is_listed(tmp_path: Path) -> None:
    core = _wheel(tmp_path / "megatron_core-9.9.9-py3-none-any.whl", CORE)
    bridge = _wheel(tmp_path / "megatron_bridge-1.0.0-py3-none-any.whl", BRIDGE)
    assert bridge_imports.missing(bridge, core) == [
        "megatron.core.inference.apis", "megatron.core.no_such_module", "megatron.core.utils.gone_name"]


def test_a_core_with_everything_leaves_nothing(tmp_path: Path) -> None:
    files = dict(CORE)
    files["megatron/core/utils.py"] += "gone_name = 1\n"
    files["megatron/core/inference/__init__.py"] = ""
    files["megatron/core/inference/apis.py"] = "class Client: ...\n"
    files["megatron/core/no_such_module.py"] = ""
    core = _wheel(tmp_path / "c.whl", files)
    assert bridge_imports.missing(_wheel(tmp_path / "b.whl", BRIDGE), core) == []
