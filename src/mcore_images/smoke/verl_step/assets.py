"""What the verl step program makes on the spot, offline: the tiny Qwen2 model (random, seeded), its tokenizer
(byte-level BPE of 512 tokens, saved as a Hugging Face tokenizer folder), and the prompts
as parquet files in verl's RL format, read back through verl's own dataset class.

Imports torch, transformers, tokenizers and pandas when called (they are in every image with verl); the values
come from spec.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mcore_images.smoke.verl_step import spec


def make_tokenizer(folder: Path) -> Any:
    """Qwen2's tokenizer class over spec.vocabulary() (a byte-level BPE: transformers builds it on the tokenizers
    library's BPE model with Qwen2's pre-tokenizer), with ChatML, saved into ``folder``.

    Qwen2's own class, because transformers 5 loads every folder whose config.json says ``qwen2`` as
    Qwen2Tokenizer, whatever tokenizer_config.json names: a tokenizer of another model type (word level) would be
    rebuilt as an empty BPE by verl and vLLM alike."""
    from transformers.models.qwen2.tokenization_qwen2 import Qwen2Tokenizer

    vocab, merges = spec.vocabulary()
    tokenizer = Qwen2Tokenizer(vocab=vocab, merges=merges, unk_token=None, eos_token=spec.EOS, pad_token=spec.PAD,
                               additional_special_tokens=[spec.SPECIAL_TOKENS[1]])
    tokenizer.chat_template = spec.CHAT_TEMPLATE
    tokenizer.save_pretrained(str(folder))
    return tokenizer


def make_model(folder: Path, seed: int) -> dict[str, Any]:
    """The tiny Qwen2 model, initialised by transformers with ``seed``, saved in bf16 (safetensors) with its
    config; returns the config as written."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(**{k: v for k, v in spec.MODEL_CONFIG.items() if k != "architectures"})
    config.architectures = list(spec.MODEL_CONFIG["architectures"])
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(str(folder), safe_serialization=True)
    return json.loads((folder / "config.json").read_text())


def make_checkpoint(folder: Path, seed: int) -> Path:
    """Model and tokenizer in one folder, as verl's ``model.path`` expects them."""
    folder.mkdir(parents=True, exist_ok=True)
    make_model(folder, seed)
    make_tokenizer(folder)
    return folder


def write_data(folder: Path, seed: int) -> dict[str, Path]:
    """One parquet file per split (spec.SPLITS) of spec.rows, as verl's examples write them (pandas → pyarrow)."""
    import pandas as pd

    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split, count in spec.SPLITS.items():
        path = folder / f"{split}.parquet"
        pd.DataFrame(spec.rows(split, count, seed)).to_parquet(path)
        paths[split] = path
    return paths


def read_back(path: Path, model: Path) -> dict[str, Any]:
    """The parquet file through verl's RLHFDataset with the tiny tokenizer, as verl's trainer reads it: rows kept
    after its prompt-length filter, the columns and the first row's prompt and ground truth."""
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl.utils.dataset.rl_dataset import RLHFDataset

    tokenizer = AutoTokenizer.from_pretrained(str(model))
    config = OmegaConf.create({"prompt_key": "prompt", "max_prompt_length": spec.MAX_PROMPT_LENGTH,
                               "filter_overlong_prompts": True, "filter_overlong_prompts_workers": 1,
                               "truncation": "error", "return_raw_chat": True,
                               "cache_dir": str(path.parent / "cache")})
    dataset = RLHFDataset(data_files=str(path), tokenizer=tokenizer, config=config)
    first = dataset[0]
    prompt_ids = tokenizer.apply_chat_template(first["raw_prompt"], add_generation_prompt=True, tokenize=True)
    ids = prompt_ids["input_ids"] if isinstance(prompt_ids, dict) or hasattr(prompt_ids, "keys") else prompt_ids
    return {"rows": len(dataset), "columns": sorted(dataset.dataframe.column_names),
            "raw_prompt": first["raw_prompt"], "ground_truth": first["reward_model"]["ground_truth"],
            "data_source": first["data_source"], "prompt_tokens": len(ids),
            "prompt_text": tokenizer.decode(ids)}
