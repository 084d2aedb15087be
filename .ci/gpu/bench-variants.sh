#!/usr/bin/env bash
# The bench's variants on one GPU, in the runtime-debian replica, measured in ONE device call of at most 10 minutes,
# each beside its eager (or bf16) row of the same process, into ONE table (docs/bench.md, "Variants in one GPU call"):
#   graphs     dense-1b, production+ce, micro-batch 1 × 8: eager, megatron-core's graphs, TE's graphs
#   8b         dense-8b (Llama-3-8B's layer, the layers one H200 holds: bench/memory.py), bf16 and FP8 delayed
#   moe        moe-olmoe-4l, alltoall: dropless and drop-pad, each eager and with TE's graphs of the attention
#   fused      dense-1b, fusions, attention_backend=fused
#   unfused    dense-1b, fusions, attention_backend=unfused
# Goals (bench/goals.py) stand in the table's last column; each group has its own time limit, so a hang costs
# that group only.
#
# Here (PyPI reachable):   bash .ci/gpu/bench-variants.sh prepare [FREEZE]
#   the debian stack's kernels, runtime and app wheels for the GPU host's Python 3.12 (.ci/image-env-replica.sh
#   locks, less what FREEZE, `pip freeze` of the GPU host, already has), in parts of 58,000,000 bytes under
#   build/replica-debian/parts, TE's extension sdist beside them; checks every bench command of `measure` here
#   (--dry-run: no torch), and prints the device calls. Nothing is fetched on the GPU host.
# The device calls, back to back (the machine goes back after ~30 s idle):
#   each part:  run(carry=["build/replica-debian/parts/PART"],
#                   command="bash .ci/image-env-replica.sh stash build/replica-debian/parts/PART")
#   install:    run(carry=[<the three files below>], timeout_s=600,
#                   command="bash .ci/image-env-replica.sh install build/replica-debian")   (TE's extension: ~150 s)
#   measure:    run(carry=[<the three files below>], timeout_s=600,
#                   command="bash .ci/gpu/bench-variants.sh measure build/replica-debian")
#   The three files: build/replica-debian/{image-env.json,constraints.txt,path-tools.txt} (build/ is git-ignored, so
#   they travel as carried paths; a part with them stays well under the 64 MiB of a call).
# `measure` checks the replica and every bench command on the CPU first (BENCH_VARIANTS_STOP_AT_GPU=1 stops it at
# the first command that needs a GPU, as the unit test does), then runs the groups and writes to $OUT:
#   bench-variants.md (the table), GROUP/bench.json and GROUP.log each, bench-baselines.json (env/bench-baselines.json
#   with this call's rows stored: copy it over env/ to make them the baselines), summary.txt.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
REPLICA_SH="$ROOT/.ci/image-env-replica.sh"
REPLICA="${REPLICA:-/tmp/mcore-images-replica}"
DIR_DEFAULT=build/replica-debian

die() { printf '[bench-variants] error: %s\n' "$*" >&2; exit 2; }

# GROUP SECONDS ARGS…: the bench's command line of each group and its time limit (the limits sum to 550 s of the
# call's 600; measured steps: dense-1b 0.4-0.9 s, moe-olmoe-4l 0.23-0.37 s, dense-8b ~2 s predicted from its FLOPs).
BENCH_GROUPS=(
  "graphs 140 --configs dense-1b --specs te --variants production+ce --micro-batch 1 --micro-batches 8 --cuda-graphs local,te"
  "8b 150 --configs dense-8b --specs te --variants production+ce --precisions fp8-delayed --steps 5 --repeats 2"
  "moe 110 --configs moe-olmoe-4l --specs te --variants dropless,fusions+drop-pad --dispatcher alltoall --cuda-graphs te"
  "fused 70 --configs dense-1b --specs te --variants fusions --attention-backend fused"
  "unfused 80 --configs dense-1b --specs te --variants fusions --attention-backend unfused"
)

group_field() { local -a words; read -r -a words <<<"$1"; case "$2" in name) echo "${words[0]}" ;; seconds) echo "${words[1]}" ;; args) echo "${words[*]:2}" ;; esac; }

# Every group's command, checked by the bench's own parser without torch (a bad flag is exit 2 here, not on a GPU).
plan() {
  local group args
  for group in "${BENCH_GROUPS[@]}"; do
    read -r -a args <<<"$(group_field "$group" args)"
    printf '[bench-variants] %s: python -m mcore_images.smoke.bench %s\n' "$(group_field "$group" name)" "${args[*]}"
    PYTHONPATH="$ROOT/src" python3 -m mcore_images.smoke.bench "${args[@]}" --dry-run \
      || die "group $(group_field "$group" name): the bench refuses its flags (above)"
  done
}

prepare() {
  local freeze="${1:-}" dir="$ROOT/$DIR_DEFAULT"
  [[ -z "$freeze" || -f "$freeze" ]] || die "FREEZE $freeze not found: give the GPU host's \`pip freeze\` or nothing"
  plan
  REPLICA_PYTHON="${REPLICA_PYTHON:-3.12}" bash "$REPLICA_SH" locks debian "$dir" ${freeze:+"$freeze"}
  local part
  printf '[bench-variants] device calls, back to back:\n'
  for part in "$dir"/parts/*; do
    printf '  run(carry=["%s"], command="bash .ci/image-env-replica.sh stash %s")\n' \
      "${part#"$ROOT"/}" "${part#"$ROOT"/}"
  done
  local small="[\"$DIR_DEFAULT/image-env.json\", \"$DIR_DEFAULT/constraints.txt\", \"$DIR_DEFAULT/path-tools.txt\"]"
  printf '  run(carry=%s, timeout_s=600, command="bash .ci/image-env-replica.sh install %s")\n' "$small" "$DIR_DEFAULT"
  printf '  run(carry=%s, timeout_s=600, command="bash .ci/gpu/bench-variants.sh measure %s")\n' "$small" "$DIR_DEFAULT"
}

# A command that needs the GPU: run it, or, with BENCH_VARIANTS_STOP_AT_GPU=1, name it on the script's own stdout
# (descriptor 3: the command's output goes to its log) and stop: everything before it ran on the CPU.
gpu() {
  if [[ "${BENCH_VARIANTS_STOP_AT_GPU:-}" == 1 ]]; then
    printf '[bench-variants] first command that needs a GPU: %s\n' "$*" >&3
    exit 0
  fi
  "$@"
}

measure() {
  local dir="$1" out="${OUT:-/tmp/bench-variants}"
  [[ "$dir" = /* ]] || dir="$ROOT/$dir"
  local f
  for f in image-env.json constraints.txt path-tools.txt; do
    [[ -f "$dir/$f" ]] || die "$dir/$f not found: carry it with this call (prepare prints the calls)"
  done
  # megatron-core installed there: its package, or at least its dist-info record
  { [[ -d "$REPLICA/site/megatron" ]] || compgen -G "$REPLICA/site/megatron_core-*.dist-info" >/dev/null; } \
    && [[ -x "$REPLICA/bin/python" ]] \
    || die "no replica installed under $REPLICA: run \`bash .ci/image-env-replica.sh install $dir\` first"
  plan
  mkdir -p "$out"
  : >"$out/summary.txt"
  cp "$ROOT/env/bench-baselines.json" "$out/bench-baselines.json"
  local group name seconds started rc
  local -a args
  exec 3>&1
  for group in "${BENCH_GROUPS[@]}"; do
    name="$(group_field "$group" name)" seconds="$(group_field "$group" seconds)"
    read -r -a args <<<"$(group_field "$group" args)"
    [[ ! -e "$out/$name" ]] || die "$out/$name exists: give an empty OUT"
    started=$SECONDS rc=0
    gpu timeout --kill-after=10 "$seconds" bash "$REPLICA_SH" run "$dir" python -m mcore_images.smoke.bench \
      "${args[@]}" --out "$out/$name" --write-baselines "$out/bench-baselines.json" >"$out/$name.log" 2>&1 || rc=$?
    printf '%s rc=%s %ss (limit %ss)\n' "$name" "$rc" "$((SECONDS - started))" "$seconds" | tee -a "$out/summary.txt"
    grep '^\[bench\] ' "$out/$name.log" | tail -n 4 || true
  done
  local -a found=()
  for group in "${BENCH_GROUPS[@]}"; do
    name="$(group_field "$group" name)"
    [[ -f "$out/$name/bench.json" ]] && found+=("$out/$name/bench.json")
  done
  [[ ${#found[@]} -gt 0 ]] || die "no group wrote its bench.json (see $out/*.log)"
  PYTHONPATH="$ROOT/src" python3 -m mcore_images.smoke.bench.goals "${found[@]}" | tee "$out/bench-variants.md"
}

case "${1:-}" in
  prepare) shift; [[ $# -le 1 ]] || die "usage: $0 prepare [FREEZE]"; prepare "$@" ;;
  plan) [[ $# -eq 1 ]] || die "usage: $0 plan"; plan ;;
  measure) shift; [[ $# -eq 1 ]] || die "usage: $0 measure DIR (e.g. $DIR_DEFAULT)"; measure "$1" ;;
  *) die "usage: $0 prepare [FREEZE] | plan | measure DIR" ;;
esac
