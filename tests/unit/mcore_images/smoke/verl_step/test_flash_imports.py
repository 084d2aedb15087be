"""Where a verl tree imports FlashAttention on its Megatron path, and whether anything in verl reaches it: read
from source files written here in verl's shapes (verl 0.8's unguarded padding import, 0.9's guarded one with a
fallback, an import in a function nothing calls)."""

from __future__ import annotations

from pathlib import Path

from mcore_images.smoke.verl_step import flash_imports


def tree(root: Path, files: dict[str, str]) -> Path:
    package = root / "verl"
    for name, text in files.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return package


PADDING_08 = ("def _get_attention_functions():\n"
              "    from flash_attn.bert_padding import pad_input, unpad_input\n"
              "    return pad_input, unpad_input\n"
              "def unpad_input(*a):\n"
              "    return _get_attention_functions()[1](*a)\n")
PADDING_09 = ("def _get_attention_functions():\n"
              "    try:\n"
              "        from flash_attn.bert_padding import pad_input, unpad_input\n"
              "    except ImportError:\n"
              "        pad_input = unpad_input = None\n"
              "    return pad_input, unpad_input\n"
              "def unpad_input(*a):\n"
              "    return _get_attention_functions()[1](*a)\n")
PIPELINE = ("def compute_shapes(batches):\n"
            "    from flash_attn.bert_padding import unpad_input  # flash 2 is a must\n"
            "    return unpad_input\n")
FUNCTIONAL = ("try:\n"
              "    from flash_attn.ops.triton.cross_entropy import cross_entropy_loss\n"
              "except ImportError:\n"
              "    cross_entropy_loss = None\n"
              "import flash_attn\n"
              "from .relative import flash_attn_thing\n")


def by_file(found: list[flash_imports.FlashImport]) -> dict[tuple[str, int], flash_imports.FlashImport]:
    return {(f.file, f.line): f for f in found}


def test_an_unguarded_padding_import_that_verl_uses_is_what_needs_flash_attention_2(tmp_path: Path) -> None:
    package = tree(tmp_path, {"utils/attention_utils.py": PADDING_08, "workers/utils/padding.py":
                              "from verl.utils.attention_utils import unpad_input\n"})
    (found,) = flash_imports.scan(package)
    assert (found.file, found.module, found.where, found.how) == (
        "utils/attention_utils.py", "flash_attn.bert_padding", "in _get_attention_functions", "unguarded")
    assert "utils/attention_utils.py:5" in found.used_at


def test_a_guarded_import_and_one_in_a_function_nothing_calls(tmp_path: Path) -> None:
    package = tree(tmp_path, {"utils/attention_utils.py": PADDING_09, "utils/megatron/pipeline_parallel.py": PIPELINE})
    found = by_file(flash_imports.scan(package))
    assert found[("utils/attention_utils.py", 3)].how == "guarded (except ImportError)"
    pipeline = found[("utils/megatron/pipeline_parallel.py", 2)]
    assert pipeline.how == "unguarded" and pipeline.where == "in compute_shapes" and pipeline.used_at == ()


def test_module_level_imports_guarded_or_not_and_relative_ones_ignored(tmp_path: Path) -> None:
    package = tree(tmp_path, {"utils/torch_functional.py": FUNCTIONAL})
    found = by_file(flash_imports.scan(package))
    assert set(found) == {("utils/torch_functional.py", 2), ("utils/torch_functional.py", 5)}
    assert found[("utils/torch_functional.py", 2)].how == "guarded (except ImportError)"
    assert found[("utils/torch_functional.py", 5)].how == "unguarded"
    assert found[("utils/torch_functional.py", 5)].where == "module level"


def test_files_off_the_megatron_path_are_not_listed(tmp_path: Path) -> None:
    package = tree(tmp_path, {"models/transformers/qwen2_vl.py": "from flash_attn import flash_attn_func\n",
                              "utils/megatron/broken.py": "def (:\n"})
    assert flash_imports.scan(package) == []
