"""One attention backend through verl's own worker and Megatron engine, in a process of its own:
``python -m mcore_images.smoke.verl_step.engine_case --backend fused --model DIR --batch FILE --out FILE``.

verl's TrainingWorker (the class verl's trainer wraps in its ActorRolloutRefWorker) is built with a
McoreEngineConfig that names the backend (megatron-core's ``attention_backend``, as the user's
``override_transformer_config.attention_backend`` does), its engine builds the tiny model through the bridge,
``infer_batch`` computes the log-probs of the batch's responses and ``train_batch`` runs one PPO update on them.
Called in this process, as verl's own engine test calls it through Ray: the process is one rank of world size 1.

One backend per process: megatron-core writes the backend into the NVTE variables TE reads, and asserts that a
variable already set agrees, so a second backend in the same process would be refused for that reason alone.
Writes a JSON record (what ran, with what, the log-probs and the update's metrics, or the stage that failed and
its error) and exits 0 whenever it wrote one; the parent judges it.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from mcore_images import create_only, reading
from mcore_images.errors import InputError
from mcore_images.options import OneLineParser
from mcore_images.smoke.verl_step import spec

DIST_VERSIONS = ("verl", "torch", "megatron-core", "transformer-engine", "mbridge", "megatron-bridge", "transformers",
                 "vllm", "flash-attn", "flash-attn-4")


def versions() -> dict[str, str | None]:
    """Installed versions of what the engine path runs on (None where absent)."""
    found: dict[str, str | None] = {}
    for name in DIST_VERSIONS:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def te_flash_view() -> dict[str, str | None] | None:
    """What TE found when it looked for FlashAttention (its FlashAttentionUtils), None where TE does not say."""
    try:
        from transformer_engine.pytorch.attention.dot_product_attention.utils import FlashAttentionUtils as fa
    except Exception:  # an older or newer TE keeps it elsewhere: say nothing rather than guess
        return None

    def seen(installed: str, version: str) -> str | None:
        return str(getattr(fa, version)) if getattr(fa, installed, False) else None

    return {"fa2": seen("is_installed", "version"), "fa3": seen("v3_is_installed", "fa3_version"),
            "fa4": seen("v4_is_installed", "fa4_version")}


def padding_helpers() -> str:
    """Where verl's attention_utils took its padding helpers from (FlashAttention 2 or verl's torch fallback)."""
    try:
        from verl.utils import attention_utils

        functions = attention_utils._get_attention_functions()
    except Exception as exc:  # verl 0.8 has no fallback: without FlashAttention 2 this raises
        return f"none: {type(exc).__name__}: {exc}".splitlines()[0][:300]
    return ", ".join(sorted({f"{getattr(f, '__module__', '?')}" for f in functions}))


def fusion_used(engine: Any) -> dict[str, Any]:
    """Whether the engine's model runs megatron-core's gradient accumulation fusion (verl's default, through the
    bridge's provider) and who provides the module (catalogue.wgrad_fusion), read from the built TransformerConfig."""
    from mcore_images.catalogue import wgrad_fusion

    config = getattr(engine, "tf_config", None)
    return {"on": getattr(config, "gradient_accumulation_fusion", None), "provider": wgrad_fusion.provider()}


def _cls(obj: Any) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def build_worker(model: Path, backend: str, bridge: str) -> Any:
    """verl's TrainingWorker for the tiny model's actor on the Megatron engine, its engine initialised."""
    from verl.workers.config import HFModelConfig, McoreEngineConfig, McoreOptimizerConfig
    from verl.workers.engine_workers import TrainingWorker, TrainingWorkerConfig

    model_config = HFModelConfig(path=str(model), use_remove_padding=True)
    engine_config = McoreEngineConfig(
        forward_only=False, use_mbridge=True, vanilla_mbridge=bridge == "mbridge",
        tensor_model_parallel_size=1, pipeline_model_parallel_size=1, context_parallel_size=1,
        override_transformer_config={"attention_backend": backend},
        use_dynamic_bsz=True, use_remove_padding=True,
        max_token_len_per_gpu=spec.ENGINE_TOKENS_PER_GPU["train"],
        infer_max_token_len_per_gpu=spec.ENGINE_TOKENS_PER_GPU["infer"])
    config = TrainingWorkerConfig(model_type="language_model", model_config=model_config, engine_config=engine_config,
                                  optimizer_config=McoreOptimizerConfig(lr_decay_steps=10), checkpoint_config=None)
    worker = TrainingWorker(config)
    worker.reset()
    return worker


def log_probs(worker: Any, batch: dict[str, Any]) -> tuple[Any, Any]:
    """(padded log-probs [sequences, response], the DataProto) of the batch's responses, by ``infer_batch``."""
    from verl import DataProto
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding, no_padding_2_padding

    tensors = {k: batch[k] for k in ("input_ids", "prompts", "attention_mask", "position_ids", "responses",
                                      "response_mask")}
    global_token_num = batch["attention_mask"].sum(dim=-1).tolist()
    data = DataProto.from_single_dict(tensors, meta_info={"temperature": 1.0, "global_token_num": global_token_num,
                                                          "compute_loss": False})
    td = left_right_2_no_padding(data.to_tensordict())
    output = worker.infer_batch(td)
    return no_padding_2_padding(tu.get(output, "log_probs").float().cpu(), td), data


def update(worker: Any, data: Any, old: Any, batch: dict[str, Any]) -> dict[str, Any]:
    """One PPO update of verl's actor loss on the batch (the program's fixed advantages, the log-probs just
    computed as the old policy's): verl's metrics of ``train_batch``."""
    from functools import partial

    from verl import DataProto
    from verl.utils import tensordict_utils as tu
    from verl.workers.config import ActorConfig
    from verl.workers.utils.losses import ppo_loss
    from verl.workers.utils.padding import left_right_2_no_padding

    data = data.union(DataProto.from_single_dict({"old_log_probs": old}))
    data.batch["advantages"] = batch["advantages"]
    data.batch["ref_log_prob"] = old.clone()
    worker.set_loss_fn(partial(ppo_loss, config=ActorConfig(strategy="megatron", rollout_n=1,
                                                            ppo_micro_batch_size_per_gpu=-1)))
    td = left_right_2_no_padding(data.to_tensordict())
    tu.assign_non_tensor(td, global_batch_size=td.shape[0])
    metrics = tu.get(worker.train_batch(td), "metrics")
    return {k: (float(v) if isinstance(v, int | float) else v) for k, v in dict(metrics).items()
            if isinstance(v, int | float | str)}


def run(backend: str, model: Path, batch_file: Path, bridge: str) -> dict[str, Any]:
    """The record of one backend's run (see the module docstring)."""
    record: dict[str, Any] = {"backend": backend, "bridge": bridge, "versions": versions(), "error": None,
                              "stage": None}
    start = time.perf_counter()
    stage = "import"
    try:
        import torch

        from mcore_images.smoke.kit import transformer_engine

        batch = torch.load(batch_file)
        stage = "build (TrainingWorker.reset: the Megatron engine builds the model through the bridge)"
        worker = build_worker(model, backend, bridge)
        engine = worker.engine
        record.update(worker=_cls(worker), engine=_cls(engine),
                      bridge_class=_cls(getattr(engine, "bridge", None)),
                      vanilla_mbridge=bool(getattr(engine, "vanilla_bridge", False)),
                      nvte={k: os.environ.get(k) for k in ("NVTE_FLASH_ATTN", "NVTE_FUSED_ATTN", "NVTE_UNFUSED_ATTN")},
                      gradient_accumulation_fusion=fusion_used(engine))
        stage = "log-probs (TrainingWorker.infer_batch)"
        old, data = log_probs(worker, batch)
        record["te_backend"] = transformer_engine.attention_backend("te")
        record["logprobs"] = old.tolist()
        record["response_mask"] = batch["response_mask"].tolist()
        stage = "update (TrainingWorker.train_batch, verl's ppo_loss)"
        record["update"] = update(worker, data, old, batch)
        stage = None
    except Exception as exc:
        record["stage"] = stage
        record["error"] = f"{type(exc).__name__}: {exc}"[:2000]
        record["traceback"] = traceback.format_exc().splitlines()[-25:]
    record["te_flash"] = te_flash_view() if "transformer_engine" in sys.modules else None
    record["padding"] = padding_helpers()
    record["flash_attn_imported"] = "flash_attn" in sys.modules
    record["seconds"] = round(time.perf_counter() - start, 2)
    return record


PROG = "python -m mcore_images.smoke.verl_step.engine_case"
COULD_NOT_RUN = "smoke.verl_step.engine_case: could not run: "
OUTPUT_OWNER = "verl-step engine_case"
"""What an --out file's ``written_by`` names (create_only.py): the records this program may replace."""


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog=PROG, prefix=COULD_NOT_RUN,
                           description="One attention backend through verl's TrainingWorker and Megatron engine (a "
                           "child of python -m mcore_images.smoke.verl_step). Exit 0 the record holds the case, 1 it "
                           "holds the error the case ended in, 2 could not run.")
    parser.add_argument("--backend", choices=spec.BACKENDS, required=True, help="megatron-core attention_backend")
    parser.add_argument("--bridge", choices=spec.BRIDGES, required=True, help="how verl builds the model")
    parser.add_argument("--model", metavar="DIR", required=True, help="the tiny model's folder (with config.json)")
    parser.add_argument("--batch", metavar="FILE", required=True,
                        help="the batch (torch.save of a dict of tensors)")
    parser.add_argument("--out", metavar="FILE", required=True,
                        help="where to write the JSON record: a new file, or one this program wrote")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    model, batch = Path(args.model), Path(args.batch)
    try:  # judged before verl, torch or the engine start: a wrong path is one line, never a record of a crash
        if problem := reading.folder_problem(model, "--model"):
            raise InputError(f"{problem}: give the tiny model's folder")
        if problem := reading.file_problem(model / "config.json", "its config.json", max_bytes=None):
            raise InputError(f"--model {model}: {problem}: give the folder the verl step made")
        if problem := reading.file_problem(batch, "--batch", max_bytes=None):
            raise InputError(f"{problem}: give the batch the verl step saved")
        out = create_only.claim_file(Path(args.out), OUTPUT_OWNER)
    except InputError as exc:
        print(f"{COULD_NOT_RUN}{exc}", file=sys.stderr)
        return 2
    record = run(args.backend, model, batch, args.bridge)
    try:
        create_only.write_file(out, OUTPUT_OWNER, json.loads(json.dumps(record, default=str)))
    except InputError as exc:
        print(f"{COULD_NOT_RUN}{exc}", file=sys.stderr)
        return 2
    return 1 if record.get("error") else 0


if __name__ == "__main__":
    raise SystemExit(main())
