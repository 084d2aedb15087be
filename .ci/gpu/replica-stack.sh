#!/usr/bin/env bash
# A release stack's recipe on a GPU host, in a replica made from the stack's locks (its base image cannot be
# pulled where it is built): the cuda stack over the host's own torch 2.11.0+cu130 and Python 3.12, which are
# that stack's. Prepared on the CPU machine, run on a lent GPU:
#
#   here:   .ci/image-env-replica.sh locks cuda build/replica-cuda [FREEZE]
#           (FREEZE: what `.ci/gpu/replica-stack.sh freeze` printed there; without it every wheel goes)
#           .ci/gpu/replica-stack.sh apex-source APEX_CHECKOUT build/replica-cuda   (optional: apex's gradient
#           accumulation extension's sources at the stack's commit, compiled there beside ours for the comparison)
#           .ci/gpu/replica-stack.sh megatron-lm-source MEGATRON_LM_CHECKOUT DIR   (optional: Megatron-LM at the
#           stack's megatron-core release, core_vX.Y.Z, as DIR/megatron-lm.tar for the megatron-lm step)
#   there:  .ci/gpu/replica-stack.sh freeze                          `pip freeze` of the host, to plan the carry
#           .ci/image-env-replica.sh stash build/replica-cuda/parts/<part>   one call per part, back to back
#           .ci/gpu/replica-stack.sh all build/replica-cuda "$OUT" [STEP…]   install, then each check below (or the
#                                                            steps named: one call's 10 minutes may not hold all)
#   Each part is a call's carry (58,000,000 bytes: with the working tree, within a call's 64 MiB); the sdists
#   ride with the last, smallest part. build/ is ignored, so the install call carries build/replica-cuda's
#   image-env.json, constraints.txt and path-tools.txt too (they stay there while the machine is warm).
#
# Checks, each in the replica (`image-env-replica.sh run`: the image's variables and PATH, the carried site over
# the host's torch), each with its own log and exit status in $OUT/summary.txt; one failing does not stop the next:
#   smoke            python -m mcore_images.smoke (dense and MoE, local and TE specs, the attention check)
#   wgrad            python -m mcore_images.smoke.wgrad_fusion: gradient accumulation fusion through megatron-core's
#                    own layers against the exact sum, timed beside torch's unfused ways
#   apex-wgrad       the same cases on apex's own extension, compiled here from the carried sources (apex-source)
#   trainer-imports  python -m mcore_images.smoke.verl_step.trainer_imports: every package verl's trainer imports
#   verl-step        python -m mcore_images.smoke.verl_step: verl's Megatron engine (flash and fused) and one GRPO step
#   bridge           python -m mcore_images.smoke.bridge --bridges megatron-bridge: HF -> Megatron -> HF round trip
#   megatron-lm      Megatron-LM's pretrain_gpt.py with its defaults, the command docs/megatron-lm.md shows (read from
#                    that page), in the carried checkout of the stack's release
# This is a replica: the host's Python, torch build and driver are the host's, and its certificate says so.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
REPLICA_SH="$ROOT/.ci/image-env-replica.sh"
STEPS=(install smoke wgrad apex-wgrad trainer-imports verl-step bridge megatron-lm)
APEX_SOURCES=(csrc/type_shim.h csrc/megatron/fused_weight_gradient_dense.cpp
  csrc/megatron/fused_weight_gradient_dense_cuda.cu csrc/megatron/fused_weight_gradient_dense_16bit_prec_cuda.cu)

die() { printf '[replica-gpu] error: %s\n' "$*" >&2; exit 2; }

step() {
  local name="$1" out="$2"; shift 2
  local started=$SECONDS rc=0
  printf '[replica-gpu] %s: %s\n' "$name" "$*"
  "$@" >"$out/$name.log" 2>&1 || rc=$?
  printf '%s rc=%s %ss\n' "$name" "$rc" "$((SECONDS - started))" | tee -a "$out/summary.txt"
  tail -n 5 "$out/$name.log"
}

# apex's gradient accumulation extension as apex builds it (its CUDAExtension's sources and nvcc flags, setup.py at
# the stack's commit), compiled with torch's JIT loader, then the wgrad check's cases run on it.
apex_wgrad() {
  local sources="$1" home
  # nvcc is the host's toolkit, as the cuda image's is its base's (the replica's PATH holds only the image's commands)
  for home in "${CUDA_HOME:-}" /usr/local/cuda /usr/local/cuda-13.0; do
    [[ -n "$home" && -x "$home/bin/nvcc" ]] && { export CUDA_HOME="$home"; break; }
  done
  python - "$sources" <<'PY'
import json, sys
from pathlib import Path
import torch
from torch.utils import cpp_extension

src = Path(sys.argv[1])
module = cpp_extension.load(
    name="fused_weight_gradient_mlp_cuda", build_directory=str(Path("/tmp/apex-wgrad-build").resolve()),
    sources=[str(src / f) for f in ("csrc/megatron/fused_weight_gradient_dense.cpp",
                                    "csrc/megatron/fused_weight_gradient_dense_cuda.cu",
                                    "csrc/megatron/fused_weight_gradient_dense_16bit_prec_cuda.cu")],
    extra_include_paths=[str(src / "csrc")], extra_cflags=["-O3"],
    extra_cuda_cflags=["-O3", "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
                       "--expt-relaxed-constexpr", "--expt-extended-lambda", "--use_fast_math"])
# Before megatron-core loads: its layers take this module, not the replica's own.
sys.modules["fused_weight_gradient_mlp_cuda"] = module
from megatron.core.tensor_parallel import layers
from mcore_images.smoke.kit import bootstrap
from mcore_images.smoke.wgrad_fusion import check

assert layers.fused_weight_gradient_mlp_cuda is module, "megatron-core took another fused_weight_gradient_mlp_cuda"
bootstrap.init_process_group(False, timeout_s=120)
bootstrap.init_parallel(cpu=False, timeout_s=120, seed=0)
device, rows = torch.device("cuda"), []
for case in check.cases(gpu=True):
    row = check.run_case(case, torch, device, 1234)
    row.update(check.time_case(case, torch, device, module))
    rows.append(row)
    print(f"{row['case']}: {row['max_error_over_limit']:.3g} of its limit, fused {row['fused_ms']:.3f} ms",
          file=sys.stderr)
bootstrap.teardown()
print(json.dumps({"provider": "apex (its extension compiled here from its sources)", "module": module.__file__,
                  "commit": (src / "COMMIT").read_text().strip(), "rows": rows,
                  "passed": all(r["passed"] for r in rows)}, indent=2))
sys.exit(0 if all(r["passed"] for r in rows) else 1)
PY
}

# The command docs/megatron-lm.md shows for Megatron-LM's defaults: the fenced block after its marker line.
megatron_lm_command() {
  awk '/<!-- megatron-lm-defaults/ {found=1; next} found && /^```bash/ {inside=1; next}
       inside && /^```/ {exit} inside {print}' "$ROOT/docs/megatron-lm.md"
}

megatron_lm() {  # ARCHIVE: Megatron-LM's release unpacked here, as a checkout beside the replica (not inside it)
  local checkout
  checkout="$(mktemp -d -t megatron-lm.XXXXXX)"
  tar -C "$checkout" -xf "$1"
  printf '[replica-gpu] Megatron-LM %s at %s\n' "$(cat "$checkout/.release")" "$checkout" >&2
  printf '%s\n' "$checkout"
}

megatron_lm_source() {
  local checkout="$1" dir="$2" stack mcore tag
  [[ -f "$dir/image-env.json" ]] || die "$dir has no image-env.json: make the replica first (image-env-replica.sh locks)"
  stack="$(python3 -c 'import json, sys; print(next(v.split("=", 1)[1] for v in json.load(open(sys.argv[1])) if v.startswith("MCORE_IMAGES_STACK=")))' "$dir/image-env.json")"
  mcore="$(PYTHONPATH="$ROOT/src" python3 -c 'import sys; from mcore_images.catalogue.stacks import get_stack; print(get_stack(sys.argv[1]).mcore)' "$stack")"
  tag="core_v$mcore"
  git -C "$checkout" rev-parse -q --verify "refs/tags/$tag" >/dev/null 2>&1 || die "$checkout has no tag $tag (the $stack stack's megatron-core)"
  [[ ! -e "$dir/megatron-lm.tar" ]] || die "$dir/megatron-lm.tar exists: remove it first (megatron-lm-source creates it)"
  local staging
  staging="$(mktemp -d)"
  git -C "$checkout" archive "$tag" | tar -C "$staging" -x
  printf '%s\n' "$tag" >"$staging/.release"
  tar -C "$staging" -cf "$dir/megatron-lm.tar" .
  rm -rf "$staging"
  printf '[replica-gpu] Megatron-LM %s: %s\n' "$tag" "$(du -h "$dir/megatron-lm.tar" | cut -f1)"
}

apex_source() {
  local checkout="$1" dir="$2" commit file
  commit="$(PYTHONPATH="$ROOT/src" python3 -c 'from mcore_images.catalogue.stacks import get_stack; print(get_stack("cuda").apex)')"
  git -C "$checkout" cat-file -e "$commit^{commit}" 2>/dev/null || die "$checkout has no commit $commit (the cuda stack's apex)"
  [[ ! -e "$dir/apex-csrc" ]] || die "$dir/apex-csrc exists: remove it first (apex-source creates it)"
  for file in "${APEX_SOURCES[@]}"; do
    mkdir -p "$dir/apex-csrc/$(dirname "$file")"
    git -C "$checkout" show "$commit:$file" >"$dir/apex-csrc/$file"
  done
  printf '%s\n' "$commit" >"$dir/apex-csrc/COMMIT"
  printf '[replica-gpu] apex %s: %s files in %s/apex-csrc\n' "$commit" "${#APEX_SOURCES[@]}" "$dir"
}

all() {
  local dir="$1" out="$2"; shift 2
  local -a steps=("$@")
  [[ ${#steps[@]} -gt 0 ]] || steps=("${STEPS[@]}")
  local name
  for name in "${steps[@]}"; do
    [[ " ${STEPS[*]} " == *" $name "* ]] || die "unknown step $name: use ${STEPS[*]}"
  done
  [[ -f "$dir/image-env.json" ]] || die "$dir has no image-env.json: make it with \`.ci/image-env-replica.sh locks STACK $dir\`"
  # Create, never clobber: the summary and logs go into a folder this run makes or finds empty.
  if [[ -e "$out" ]] && [[ ! -d "$out" || -n "$(ls -A "$out")" ]]; then
    die "$out is not an empty folder: give a new one (the steps write their logs and summary.txt there)"
  fi
  mkdir -p "$out"
  for name in "${steps[@]}"; do
    case "$name" in
      install)
        step install "$out" bash "$REPLICA_SH" install "$dir"
        grep -q '^install rc=0' "$out/summary.txt" || die "the replica did not install ($out/install.log)" ;;
      smoke) step smoke "$out" bash "$REPLICA_SH" run "$dir" python -m mcore_images.smoke --out "$out/smoke" ;;
      wgrad) step wgrad "$out" bash "$REPLICA_SH" run "$dir" python -m mcore_images.smoke.wgrad_fusion --json ;;
      apex-wgrad)
        [[ -d "$dir/apex-csrc" ]] || die "apex-wgrad needs $dir/apex-csrc (\`$0 apex-source CHECKOUT $dir\` here)"
        step apex-wgrad "$out" bash "$REPLICA_SH" run "$dir" bash -c "$(declare -f apex_wgrad); apex_wgrad '$dir/apex-csrc'" ;;
      trainer-imports)
        step trainer-imports "$out" bash "$REPLICA_SH" run "$dir" python -m mcore_images.smoke.verl_step.trainer_imports ;;
      verl-step)
        step verl-step "$out" bash "$REPLICA_SH" run "$dir" python -m mcore_images.smoke.verl_step \
          --keep "$(mktemp -u -t replica-verl-step.XXXXXX)" --out "$out/verl-step" ;;
      bridge) step bridge "$out" bash "$REPLICA_SH" run "$dir" python -m mcore_images.smoke.bridge --bridges megatron-bridge ;;
      megatron-lm)
        [[ -f "$dir/megatron-lm.tar" ]] || die "megatron-lm needs $dir/megatron-lm.tar (\`$0 megatron-lm-source CHECKOUT $dir\` here)"
        local command
        command="$(megatron_lm_command)"
        [[ -n "$command" ]] || die "docs/megatron-lm.md has no megatron-lm-defaults block"
        local checkout
        checkout="$(megatron_lm "$dir/megatron-lm.tar")"
        # The page's command, in the replica, with the checkout on PYTHONPATH (Megatron-LM's own modules).
        # shellcheck disable=SC2016  # expanded by the inner shell
        step megatron-lm "$out" bash "$REPLICA_SH" run "$dir" bash -c \
          'export MEGATRON_LM_CHECKOUT="$1" PYTHONPATH="$1:${PYTHONPATH:-}"; exec bash -c "$2"' _ "$checkout" "$command" ;;
    esac
  done
  cat "$out/summary.txt"
}

case "${1:-}" in
  freeze) [[ $# -eq 1 ]] || die "usage: $0 freeze"
    python3 --version; python3 -m pip freeze; nvidia-smi --query-gpu=name,driver_version --format=csv ;;
  apex-source) shift; [[ $# -eq 2 ]] || die "usage: $0 apex-source APEX_CHECKOUT DIR"; apex_source "$@" ;;
  megatron-lm-source) shift; [[ $# -eq 2 ]] || die "usage: $0 megatron-lm-source MEGATRON_LM_CHECKOUT DIR"
    megatron_lm_source "$@" ;;
  all) shift; [[ $# -ge 2 ]] || die "usage: $0 all DIR OUT [STEP…]"; all "$@" ;;
  *) die "usage: $0 freeze | apex-source APEX_CHECKOUT DIR | megatron-lm-source MEGATRON_LM_CHECKOUT DIR | all DIR OUT [STEP…] (steps: ${STEPS[*]}; all by default)" ;;
esac
