"""Runs INSIDE the image under test: the run-time code paths that compile, each run once, on CPU.

    python -c "$(cat runtime_paths.py)" PATH [PATH ...]

Prints one JSON object {path: {"ok", "seconds", "result" | "error"}}. Each path is what a training job does
at its first step, made directly: Triton's launcher build (the C compile every first kernel launch makes),
torch.compile on CPU, megatron-core's jit_fuser fusions (torch.compile'd), torch.utils.cpp_extension's
load_inline, megatron-core's compile_helpers(), and MegatronTokenizer over a locally made HF tokenizer.
Nothing here decides pass or fail; every error is recorded, never raised.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import traceback


def triton_launcher() -> object:
    """The launcher source Triton generates for a kernel, compiled by the same function its first launch
    calls (triton.runtime.build._build: cc against Python.h and Triton's CUDA headers). Only the link
    against the driver's libcuda, which a machine without a GPU lacks, is left out."""
    from triton.backends.nvidia import driver
    from triton.runtime.build import _build

    src = driver.make_launcher({(3,): 1024}, {0: "*fp32", 1: "*fp32", 2: "i32", 3: "constexpr"}, None)
    folder = tempfile.mkdtemp(prefix="triton-launcher-")
    path = os.path.join(folder, "main.c")
    with open(path, "w") as handle:
        handle.write(src)
    built = _build("__triton_launcher", path, folder, [], list(driver.include_dirs), [], [])
    return {"so_bytes": os.path.getsize(built)}


def torch_compile() -> object:
    import torch

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.sin(x) * 2 + x

    x = torch.randn(64)
    return {"max_error": float((torch.compile(f)(x) - f(x)).abs().max())}


def jit_fusions() -> object:
    """megatron-core's fusions that go through jit_fuser (torch.compile): bias-SwiGLU, bias-GeLU and
    bias-dropout-add with fused=True, as verl's bias_activation_fusion and bias_dropout_fusion use them."""
    import torch
    from megatron.core.fusions.fused_bias_dropout import get_bias_dropout_add
    from megatron.core.fusions.fused_bias_gelu import bias_gelu_impl
    from megatron.core.fusions.fused_bias_swiglu import bias_swiglu_impl

    torch.manual_seed(0)
    swiglu = bias_swiglu_impl(torch.randn(4, 2, 16, requires_grad=True), torch.randn(16, requires_grad=True))
    swiglu.sum().backward()
    gelu = bias_gelu_impl(torch.randn(4, 2, 8, requires_grad=True), torch.randn(8, requires_grad=True))
    gelu.sum().backward()
    dropout_add = get_bias_dropout_add(training=True, fused=True)
    out = dropout_add((torch.randn(4, 2, 8), torch.randn(8)), torch.randn(4, 2, 8), 0.1)
    return {"swiglu": list(swiglu.shape), "gelu": list(gelu.shape), "bias_dropout_add": list(out.shape)}


def load_inline() -> object:
    """A C++ extension built at run time (ninja, the compiler, Python.h), as megatron-core's NCCL
    allocator builds its own."""
    from torch.utils.cpp_extension import load_inline as build

    module = build(name="mcore_images_probe", cpp_sources="int twice(int x) { return 2 * x; }",
                   functions=["twice"], build_directory=tempfile.mkdtemp(prefix="load-inline-"))
    return {"twice(21)": module.twice(21)}


def compile_helpers() -> object:
    """What Megatron-LM's training runs on rank 0 before it builds datasets (`make -C` in megatron-core's
    datasets folder; it calls sys.exit(1) when make fails), then the helpers module it provides."""
    from megatron.core.datasets.utils import compile_helpers as compile_them

    compile_them()
    from megatron.core.datasets import helpers_cpp

    return {"helpers_cpp": helpers_cpp.__file__}


def hf_tokenizer() -> object:
    """MegatronTokenizer's HF path over a word-level tokenizer made here (no download)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<unk>", "<s>", "</s>", "hello", "megatron", "world"]
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    folder = tempfile.mkdtemp(prefix="hf-tokenizer-")
    PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", bos_token="<s>",
                            eos_token="</s>").save_pretrained(folder)
    from megatron.core.tokenizers import MegatronTokenizer

    tokenizer = MegatronTokenizer.from_pretrained(tokenizer_path=folder, metadata_path={"library": "huggingface"})
    return {"ids": list(tokenizer.tokenize("hello megatron world"))}


PATHS = {f.__name__: f for f in (triton_launcher, torch_compile, jit_fusions, load_inline, compile_helpers,
                                 hf_tokenizer)}


def run(name: str) -> dict:
    start = time.monotonic()
    try:
        result = PATHS[name]()
    except BaseException as error:  # SystemExit from compile_helpers, C-level errors, anything
        last = traceback.format_exception_only(type(error), error)[-1].strip()
        return {"ok": False, "error": last[-1500:], "seconds": round(time.monotonic() - start, 2)}
    return {"ok": True, "result": result, "seconds": round(time.monotonic() - start, 2)}


if __name__ == "__main__":
    # Imports and compilers print; keep stdout for the JSON alone.
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        results = {name: run(name) for name in sys.argv[1:]}
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
    print(json.dumps(results))
