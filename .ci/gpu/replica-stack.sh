#!/usr/bin/env bash
# A release stack's recipe on a GPU host, in a replica made from the stack's locks (its base image cannot be
# pulled where it is built): the cuda stack over the host's own torch 2.11.0+cu130 and Python 3.12, which are
# that stack's. Prepared on the CPU machine, run on a lent GPU:
#
#   here:   .ci/image-env-replica.sh locks cuda build/replica-cuda build/replica-cuda/host-freeze.txt
#           (host-freeze.txt: what `.ci/gpu/replica-stack.sh freeze` printed there; without it every wheel goes)
#   there:  .ci/gpu/replica-stack.sh freeze                          `pip freeze` of the host, to plan the carry
#           .ci/image-env-replica.sh stash build/replica-cuda/parts/<part>   one call per part, back to back
#           .ci/gpu/replica-stack.sh all build/replica-cuda "$OUT" [STEP…]   install, then each check below (or the
#                                                            steps named: one call's 10 minutes may not hold all)
#   Each part is a call's carry (58,000,000 bytes: with the working tree, within a call's 64 MiB); the three sdists
#   ride with the last, smallest part. build/ is ignored, so the install call carries build/replica-cuda's
#   image-env.json, constraints.txt and path-tools.txt too (they stay there while the machine is warm).
#
# Checks, each in the replica (`image-env-replica.sh run`: the image's variables and PATH, the carried site over
# the host's torch), each with its own log and exit status in $OUT/summary.txt; one failing does not stop the next:
#   smoke     python -m mcore_images.smoke (dense and MoE, local and TE specs)
#   bridge    python -m mcore_images.smoke.bridge --bridges megatron-bridge: HF -> Megatron -> HF round trip and
#             logits against transformers, for a dense and an MoE config made on the spot
#   imports   what verl 0.9.1's Megatron engine and its vLLM rollout import, and which attention TE selects under
#             attention_backend=fused (the stack has no FlashAttention: flash must find no backend)
#   verl      one GRPO step, verl's trainer as users launch it (examples/verl-grpo/grpo-megatron.sh), on a tiny
#             Qwen2 model, tokenizer and prompt set made on the spot: Megatron actor through Megatron-Bridge, vLLM
#             rollout, one GPU, attention_backend=fused
# This is a replica: the host's Python, torch build and driver are the host's, and its certificate says so.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
REPLICA_SH="$ROOT/.ci/image-env-replica.sh"

die() { printf '[replica-gpu] error: %s\n' "$*" >&2; exit 2; }

step() {
  local name="$1" out="$2"; shift 2
  local started=$SECONDS rc=0
  printf '[replica-gpu] %s: %s\n' "$name" "$*"
  "$@" >"$out/$name.log" 2>&1 || rc=$?
  printf '%s rc=%s %ss\n' "$name" "$rc" "$((SECONDS - started))" | tee -a "$out/summary.txt"
  tail -n 5 "$out/$name.log"
}

imports_check() {
  python3 - <<'PY'
import importlib, os, sys
for name in ("transformer_engine.pytorch", "megatron.core", "megatron.bridge", "verl",
             "verl.workers.engine.megatron.transformer_impl", "verl.workers.utils.padding", "vllm", "ray"):
    module = importlib.import_module(name)
    print("import", name, getattr(module, "__version__", ""))
from verl.utils import attention_utils
print("verl padding helpers:", attention_utils._get_attention_functions()[1].__module__)
import torch
from transformer_engine.pytorch import DotProductAttention
q = torch.randn(128, 2, 8, 64, device="cuda", dtype=torch.bfloat16)
for backend, flash, fused in (("fused", "0", "1"), ("flash", "1", "0")):
    os.environ.update(NVTE_FLASH_ATTN=flash, NVTE_FUSED_ATTN=fused, NVTE_UNFUSED_ATTN="0", NVTE_DEBUG="1",
                      NVTE_DEBUG_LEVEL="2")
    try:
        DotProductAttention(8, 64, attn_mask_type="causal")(q, q, q)
        print(f"attention_backend={backend}: ran")
    except Exception as exc:  # flash is expected to find no backend: the stack has no FlashAttention
        print(f"attention_backend={backend}: {type(exc).__name__}: {exc}")
sys.exit(0)
PY
}

verl_step() {
  local work="$1"
  mkdir -p "$work"
  python3 - "$work" <<'PY'
import json, sys
from pathlib import Path
import pandas as pd
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

work = Path(sys.argv[1])
questions = [f"What is {a} plus {b}?" for a in range(1, 9) for b in range(1, 9)]
tok = Tokenizer(models.BPE(unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
special = ["<unk>", "<|endoftext|>", "<|im_start|>", "<|im_end|>"]
corpus = questions + [f"#### {n}" for n in range(100)] + ["user assistant system\n"]
tok.train_from_iterator(corpus * 4, trainers.BpeTrainer(vocab_size=512, special_tokens=special))
tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<|im_end|>",
                                    pad_token="<|endoftext|>")
tokenizer.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                           "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
model_dir = work / "tiny-qwen2"
tokenizer.save_pretrained(model_dir)
config = Qwen2Config(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                     tie_word_embeddings=False, eos_token_id=tokenizer.eos_token_id,
                     pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.eos_token_id)
torch.manual_seed(0)
Qwen2ForCausalLM(config).to(torch.bfloat16).save_pretrained(model_dir)
rows = [{"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": q}], "ability": "math",
         "reward_model": {"style": "rule", "ground_truth": str(eval(q[8:-1].replace("plus", "+")))},
         "extra_info": {"index": i}} for i, q in enumerate(questions)]
for name, part in (("train", rows[:48]), ("test", rows[48:])):
    pd.DataFrame(part).to_parquet(work / f"{name}.parquet")
print(json.dumps({"model": str(model_dir), "prompts": len(rows)}))
PY
  MODEL="$work/tiny-qwen2" DATA="$work" NNODES=1 GPUS_PER_NODE=1 TP=1 ROLLOUT_TP=1 \
    bash "$ROOT/examples/verl-grpo/grpo-megatron.sh" \
    actor_rollout_ref.actor.megatron.vanilla_mbridge=False \
    actor_rollout_ref.actor.megatron.override_transformer_config.attention_backend=fused \
    actor_rollout_ref.ref.megatron.override_transformer_config.attention_backend=fused \
    data.train_batch_size=8 data.max_prompt_length=64 data.max_response_length=32 \
    actor_rollout_ref.actor.ppo_mini_batch_size=8 actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2 \
    actor_rollout_ref.rollout.n=2 actor_rollout_ref.rollout.gpu_memory_utilization=0.3 \
    actor_rollout_ref.rollout.enforce_eager=True actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2 \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2 trainer.total_training_steps=1 \
    trainer.val_before_train=False trainer.save_freq=-1 trainer.test_freq=-1 ray_kwargs.ray_init.address=null
}

all() {
  local dir="$1" out="$2"; shift 2
  local -a steps=("$@")
  [[ ${#steps[@]} -gt 0 ]] || steps=(install smoke bridge imports verl)
  mkdir -p "$out"
  : >"$out/summary.txt"
  local name
  for name in "${steps[@]}"; do
    case "$name" in
      install)
        step install "$out" bash "$REPLICA_SH" install "$dir"
        grep -q '^install rc=0' "$out/summary.txt" || die "the replica did not install ($out/install.log)" ;;
      smoke) step smoke "$out" bash "$REPLICA_SH" run "$dir" python -m mcore_images.smoke ;;
      bridge) step bridge "$out" bash "$REPLICA_SH" run "$dir" python -m mcore_images.smoke.bridge --bridges megatron-bridge ;;
      imports) step imports "$out" bash "$REPLICA_SH" run "$dir" bash -c "$(declare -f imports_check); imports_check" ;;
      verl) step verl "$out" bash "$REPLICA_SH" run "$dir" bash -c \
        "ROOT='$ROOT'; $(declare -f verl_step); verl_step /tmp/replica-verl-step" ;;
      *) die "unknown step $name: use install, smoke, bridge, imports or verl" ;;
    esac
  done
  cat "$out/summary.txt"
}

case "${1:-}" in
  freeze) python3 --version; python3 -m pip freeze; nvidia-smi --query-gpu=name,driver_version --format=csv ;;
  all) shift; [[ $# -ge 2 ]] || die "usage: $0 all DIR OUT [STEP…]"; all "$@" ;;
  *) die "usage: $0 freeze | all DIR OUT [STEP…] (steps: install smoke bridge imports verl; all of them by default)" ;;
esac
