#!/usr/bin/env bash
# One GRPO job with verl's Megatron backend and vLLM rollout, in an app image (README.md: which one).
# Run it on the Ray head (ray-node.sh head); the actors spread over every node that joined.
#   MODEL=/models/Qwen2.5-0.5B-Instruct DATA=/data/gsm8k NNODES=2 GPUS_PER_NODE=8 bash grpo-megatron.sh
#   bash grpo-megatron.sh --cfg job       # print the composed config only (CPU, nothing started)
# Hydra overrides given to the script come after its own, so they win (Hydra keeps the last value of a key):
#   bash grpo-megatron.sh data.train_batch_size=32
# verl's defaults stand where the image's doctor (mcore-images doctor) says they run here, and give way where it says
# they do not: attention_backend is verl's flash where TE can run it, else cuDNN's fused attention (today's images:
# fused); gradient accumulation fusion stays on (verl's default) where fused_weight_gradient_mlp_cuda runs, else off.
# ATTENTION_BACKEND=fused|flash|… and WGRAD_FUSION=on|off answer for the doctor.
set -euo pipefail
MODEL="${MODEL:-/models/Qwen2.5-0.5B-Instruct}"
DATA="${DATA:-/data/gsm8k}"
NNODES="${NNODES:-1}"
GPUS_PER_NODE="${GPUS_PER_NODE:-8}"
TP="${TP:-2}"
PP="${PP:-1}"
EP="${EP:-1}"
ROLLOUT_TP="${ROLLOUT_TP:-2}"

say() { echo "grpo-megatron.sh: $*" >&2; }
die() { say "$*"; exit 2; }
# Each value is judged before Hydra sees it: a count is a whole number of 1 or more, and a path reaches Hydra quoted,
# so that a ',' in it is not a sweep and a space not the end of the override; a path Hydra cannot quote (a quote, a
# backslash, '${' or a newline in it) is refused.
for name in NNODES GPUS_PER_NODE TP PP EP ROLLOUT_TP; do
  [[ "${!name}" =~ ^[1-9][0-9]{0,5}$ ]] || die "$name=${!name} is not a count: give a whole number of 1 or more"
done
(((NNODES * GPUS_PER_NODE) % (TP * PP) == 0)) \
  || die "TP=$TP x PP=$PP must divide the $((NNODES * GPUS_PER_NODE)) GPUs (NNODES x GPUS_PER_NODE)"
(((NNODES * GPUS_PER_NODE) % ROLLOUT_TP == 0)) \
  || die "ROLLOUT_TP=$ROLLOUT_TP must divide the $((NNODES * GPUS_PER_NODE)) GPUs (NNODES x GPUS_PER_NODE)"
hydra_path() {  # NAME VALUE: VALUE as a quoted Hydra string
  local value=$2
  [[ -n "$value" ]] || die "$1 is empty: give a path"
  case "$value" in
    *\'* | *\\* | *\$\{* | *$'\n'*)
      die "$1=$value holds a quote, a backslash, a '\${' or a newline, which Hydra cannot take in a path: rename it" ;;
  esac
  printf "'%s'" "$value"
}
model=$(hydra_path MODEL "$MODEL")
train_files=$(hydra_path DATA "$DATA/train.parquet")
val_files=$(hydra_path DATA "$DATA/test.parquet")
# doctor CHECK ARGS…: whether one check of the image's doctor passes here (its exit code: 0 passed, 1 failed).
doctor() {
  local rc=0
  mcore-images doctor --only "$@" >/dev/null 2>&1 || rc=$?
  ((rc <= 1)) || die "mcore-images doctor --only $1 could not run (exit $rc): run it to see why, or set ATTENTION_BACKEND and WGRAD_FUSION"
  return "$rc"
}
case "${WGRAD_FUSION:-on}" in on | off) ;; *) die "WGRAD_FUSION=$WGRAD_FUSION: give on or off" ;; esac
case "${ATTENTION_BACKEND:-auto}" in
  flash | fused | unfused | local | auto) ;;
  *) die "ATTENTION_BACKEND=$ATTENTION_BACKEND: give one of megatron-core's flash, fused, unfused, local, auto" ;;
esac
if [[ -z "${ATTENTION_BACKEND:-}" || -z "${WGRAD_FUSION:-}" ]] && ! command -v mcore-images >/dev/null; then
  die "no mcore-images here to ask which settings run: set ATTENTION_BACKEND (e.g. fused) and WGRAD_FUSION (on or off)"
fi
if [[ -z "${ATTENTION_BACKEND:-}" ]]; then
  for backend in flash fused; do
    if doctor te.attention --attention-backend "$backend"; then
      ATTENTION_BACKEND="$backend"
      break
    fi
  done
  [[ -n "${ATTENTION_BACKEND:-}" ]] || die "the image's doctor finds no attention backend TE can run here (flash, fused): run mcore-images doctor --only te --attention-backend fused"
  say "attention_backend=$ATTENTION_BACKEND: the image's doctor (te.attention) says it runs here"
fi
if [[ -z "${WGRAD_FUSION:-}" ]]; then
  WGRAD_FUSION=off
  if doctor wgrad.fusion; then WGRAD_FUSION=on; fi
  say "gradient accumulation fusion $WGRAD_FUSION: the image's doctor (wgrad.fusion) says it $( [[ $WGRAD_FUSION == on ]] && echo runs || echo "cannot run") here"
fi
settings=()
for part in actor_rollout_ref.actor critic; do  # the reference model takes the actor's (verl's ref config selects it)
  settings+=("$part.megatron.override_transformer_config.attention_backend=$ATTENTION_BACKEND")
  [[ "$WGRAD_FUSION" == on ]] || settings+=("++$part.megatron.override_transformer_config.gradient_accumulation_fusion=False")
done

overrides=(
  algorithm.adv_estimator=grpo
  "data.train_files=$train_files" "data.val_files=$val_files"
  data.train_batch_size=256 data.max_prompt_length=512 data.max_response_length=1024
  "actor_rollout_ref.model.path=$model"
  actor_rollout_ref.actor.strategy=megatron critic.strategy=megatron
  "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=$TP"
  "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=$PP"
  "actor_rollout_ref.actor.megatron.expert_model_parallel_size=$EP"
  actor_rollout_ref.actor.ppo_mini_batch_size=64 actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4
  actor_rollout_ref.actor.use_kl_loss=True actor_rollout_ref.actor.kl_loss_coef=0.001
  actor_rollout_ref.rollout.name=vllm "actor_rollout_ref.rollout.tensor_model_parallel_size=$ROLLOUT_TP"
  actor_rollout_ref.rollout.gpu_memory_utilization=0.6 actor_rollout_ref.rollout.n=4
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4
  actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4
  "trainer.nnodes=$NNODES" "trainer.n_gpus_per_node=$GPUS_PER_NODE"
  trainer.logger=console trainer.total_epochs=1 trainer.project_name=mcore-images trainer.experiment_name=grpo
  # Join the cluster ray-node.sh started instead of starting a one-node Ray of its own.
  +ray_kwargs.ray_init.address=auto
)
# Hydra reads its overrides as one run of positional arguments: the user's options (--cfg job, …) go before the
# script's overrides, the user's overrides (key=value, ~key, +key=value) after them, so they win.
options=()
extra=()
for arg in "$@"; do
  case "$arg" in
    *=* | "~"* | "+"*) extra+=("$arg") ;;
    *) options+=("$arg") ;;
  esac
done
exec python3 -m verl.trainer.main_ppo --config-name ppo_megatron_trainer "${options[@]}" "${overrides[@]}" \
  "${settings[@]}" "${extra[@]}"
