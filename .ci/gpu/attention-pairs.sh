#!/usr/bin/env bash
# Which FlashAttention 4 pair is right on a GPU: ONE table of environment × backend × case × max error (out, dq, dk,
# dv against an fp32 reference; python -m mcore_images.smoke.attention), on one H200, for:
#   te2.20-b36-c4.8.1   TE 2.20.2 + flash-attn-4 4.0.0b36 + nvidia-cutlass-dsl 4.8.1  runtime-debian's former pair
#                                                                                     (measured wrong 2026-12-05)
#   te2.20-b36-c4.6.2   TE 2.20.2 + 4.0.0b36 + 4.6.2    the CuTe DSL b36's METADATA names (>=4.6.2, no upper bound)
#   te2.20-b40-c4.8.1   TE 2.20.2 + 4.0.0b40 + 4.8.1    the newest FA4 on PyPI (checked 2026-12-05) on the newest DSL
#   te2.20-b40-c4.6.2   TE 2.20.2 + 4.0.0b40 + 4.6.2    b40's METADATA floor (>=4.6.2)
#   te2.16-b36-c4.8.1   TE 2.16.0 + 4.0.0b36 + 4.8.1    debian-verl's pair
#   te2.16-b40-c4.8.1   TE 2.16.0 + 4.0.0b40 + 4.8.1
# Each row runs TE's backends under the NVTE variables megatron-core sets (flash, fused, unfused, auto), FlashAttention
# 4 called directly (fa4: tells FA4 from TE's integration) and torch's SDPA (a control). The two pairs the images
# shipped run all 12 cases; the others the 4 shapes of the first measurement (--quick).
#
# What differs from the images, on purpose (the merged table's header repeats it): the host's Python 3.12 and
# torch 2.11.0+cu130 (runtime-debian's torch; debian-verl's is 2.9.0+cu128, whose CUDA 12 libraries are more than a
# session can carry), so debian-verl's TE release runs on cu13 (transformer-engine-cu13 2.16.0, its extension
# compiled against the host's torch). Sites are installed as the replica installs them (pip --target) and their
# .pth files processed as in the image (the replica's sitecustomize, .ci/image-env-replica.sh).
#
# Here (a machine with PyPI):       bash .ci/gpu/attention-pairs.sh prepare
#   downloads every wheel (and TE's two extension sdists) into .whl/attention-pairs/ (git-ignored, ~0.9 GB), packs
#   them into one tar and splits it into .whl/carry/NN/ folders of one ~58 MB part each, and prints the calls.
# The device calls, back to back (the machine goes back after ~30 s idle), one H200:
#   for each NN printed by prepare:   run(kind="nvidia-h200", carry=[".whl/carry/NN"],
#                                         command="bash .ci/gpu/attention-pairs.sh stash .whl/carry/NN")
#   then:                             run(command="bash .ci/gpu/attention-pairs.sh install", timeout_s=600)
#                                     (joins the parts, installs one site per TE release and one per FA4/DSL pair,
#                                     compiles TE 2.20.2's and 2.16.0's extensions at MAX_JOBS=16: ~100 s each)
#   then, one call per pair:          run(command="bash .ci/gpu/attention-pairs.sh check PAIR", timeout_s=600)
#                                     (writes $OUT/PAIR.json and prints its table)
#   last:                             run(command="bash .ci/gpu/attention-pairs.sh table")
#                                     ($OUT/attention-pairs.md: every pair's section joined, ONE table)
# Files under /tmp survive between calls while the machine stays warm; $OUT of each call comes back.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
WHL="$ROOT/.whl/attention-pairs"
CARRY="$ROOT/.whl/carry"
PAIRS="${PAIRS:-/tmp/attention-pairs}"
PART_BYTES=58000000
ALL_PAIRS=(te2.20-b36-c4.8.1 te2.20-b36-c4.6.2 te2.20-b40-c4.8.1 te2.20-b40-c4.6.2 te2.16-b36-c4.8.1 te2.16-b40-c4.8.1)
# PAIR_SET="PAIR PAIR…" (the same value at every step) takes only those pairs: only their wheels are carried, and
# only their TE releases' extensions compiled (~100 s of device time each).
read -r -a PAIR_NAMES <<<"${PAIR_SET:-${ALL_PAIRS[*]}}"
FULL=(te2.20-b36-c4.8.1 te2.16-b36-c4.8.1)
# What the H200's own Python lacks of TE's and FlashAttention 4's run-time needs (its package list: device KINDS.md),
# at the versions the debian kernels lock pins: today's for TE's needs, the last one with FlashAttention 4 (before
# the stacks dropped it) for FlashAttention 4's own.
TE_NEEDS=(pydantic pydantic-core annotated-types typing-inspection nvdlfw-inspect nvidia-cudnn-frontend apache-tvm-ffi)
FA4_NEEDS=(quack-kernels torch-c-dlpack-ext)
LOCK=env/locks/debian/kernels.txt
LOCK_WITH_FA4=6fcf588

die() { printf '[pairs] error: %s\n' "$*" >&2; exit 2; }

# NAME==VERSION of each named distribution as a lock text on stdin pins it.
pins() {
  local text name line
  text="$(cat)"
  for name in "$@"; do
    line="$(grep -E "^${name}==[^ ]+" <<<"$text" | head -n 1 | cut -d' ' -f1)"
    [[ -n "$line" ]] || die "$name is not pinned in the lock read"
    printf '%s\n' "$line"
  done
}

te_of() { case "$1" in te2.20-*) echo 2.20.2 ;; te2.16-*) echo 2.16.0 ;; *) die "unknown pair $1" ;; esac; }
fa4_of() { local b="${1#*-b}"; echo "4.0.0b${b%%-*}"; }
dsl_of() { echo "${1##*-c}"; }
for _pair in "${PAIR_NAMES[@]}"; do
  [[ " ${ALL_PAIRS[*]} " == *" $_pair "* ]] || die "PAIR_SET names $_pair: use pairs of ${ALL_PAIRS[*]}"
done
# The TE releases, FlashAttention 4 and CuTe DSL versions the chosen pairs use, each once.
uniq_of() { local f="$1" p; for p in "${PAIR_NAMES[@]}"; do "$f" "$p"; done | sort -u; }
mapfile -t TE_RELEASES < <(uniq_of te_of)
mapfile -t FA4_RELEASES < <(uniq_of fa4_of)
mapfile -t DSL_RELEASES < <(uniq_of dsl_of)

download() {
  local dest="$1"; shift
  mkdir -p "$dest"
  PIP_CONSTRAINT='' python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$dest" "$@"
}

prepare() {
  local te dsl fa4 n=0 part
  for te in "${TE_RELEASES[@]}"; do
    download "$WHL/te-$te" "transformer-engine==$te" "transformer-engine-cu13==$te"
    # The extension's sdist as PyPI lists it: `pip download` of an sdist would build its metadata (torch and all).
    python3 - "$te" "$WHL/te-$te" <<'PY'
import json, sys, urllib.parse, urllib.request
from pathlib import Path
version, dest, index = sys.argv[1], Path(sys.argv[2]), "https://pypi.org/pypi/transformer-engine-torch/json"
files = json.load(urllib.request.urlopen(index))["releases"][version]
sdist = next(f for f in files if f["packagetype"] == "sdist")
url = urllib.parse.urljoin(index, sdist["url"])
(dest / sdist["filename"]).write_bytes(urllib.request.urlopen(url).read())
PY
  done
  for dsl in "${DSL_RELEASES[@]}"; do
    download "$WHL/dsl-$dsl" "nvidia-cutlass-dsl==$dsl" "nvidia-cutlass-dsl-libs-base==$dsl" \
      "nvidia-cutlass-dsl-libs-core==$dsl" "nvidia-cutlass-dsl-libs-cu12==$dsl" "nvidia-cutlass-dsl-libs-cu13==$dsl"
  done
  for fa4 in "${FA4_RELEASES[@]}"; do download "$WHL/fa4-$fa4" "flash-attn-4==$fa4"; done
  local -a needs
  mapfile -t needs < <(pins "${TE_NEEDS[@]}" <"$ROOT/$LOCK"; git -C "$ROOT" show "$LOCK_WITH_FA4:$LOCK" | pins "${FA4_NEEDS[@]}")
  download "$WHL/common" "${needs[@]}"
  rm -rf "$CARRY" && mkdir -p "$CARRY"
  local -a dirs=(common)
  for te in "${TE_RELEASES[@]}"; do dirs+=("te-$te"); done
  for dsl in "${DSL_RELEASES[@]}"; do dirs+=("dsl-$dsl"); done
  for fa4 in "${FA4_RELEASES[@]}"; do dirs+=("fa4-$fa4"); done
  tar -C "$WHL" -cf "$ROOT/.whl/attention-pairs.tar" "${dirs[@]}"
  split -b "$PART_BYTES" -d -a 2 "$ROOT/.whl/attention-pairs.tar" "$ROOT/.whl/attention-pairs.tar.part."
  for part in "$ROOT"/.whl/attention-pairs.tar.part.*; do
    mkdir -p "$CARRY/$(printf '%02d' "$n")" && mv "$part" "$CARRY/$(printf '%02d' "$n")/"
    n=$((n + 1))
  done
  rm -f "$ROOT/.whl/attention-pairs.tar"
  printf '[pairs] %s parts to carry, one a call: %s\n' "$n" "$(find "$CARRY" -mindepth 1 -maxdepth 1 -printf '%f\n' | sort | paste -sd' ')"
  (cd "$WHL" && du -sh "${dirs[@]}")
}

stash() {
  mkdir -p "$PAIRS/parts"
  cp "$ROOT/$1"/* "$PAIRS/parts/"
  ls -l "$PAIRS/parts"
}

install() {
  local py torch_dir nv te pair
  py="$(command -v python3)"
  mkdir -p "$PAIRS/wheels"
  cat "$PAIRS"/parts/attention-pairs.tar.part.* | tar -C "$PAIRS/wheels" -xf -
  torch_dir="$("$py" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')"
  nv="$(find "$torch_dir/nvidia" -maxdepth 2 -name include -type d | paste -sd:)"
  for te in "${TE_RELEASES[@]}"; do
    # TE's core wheel and its extension, compiled against the host's torch, as the kernels layer compiles it.
    "$py" -m pip install -q --no-deps --target "$PAIRS/build-$te" "$PAIRS"/wheels/te-"$te"/transformer_engine_cu13-*.whl
    PYTHONPATH="$PAIRS/build-$te" CPLUS_INCLUDE_PATH="$nv" NVTE_FRAMEWORK=pytorch NVTE_CUDA_ARCHS=90 \
      MAX_JOBS="${MAX_JOBS:-16}" NVTE_PYTORCH_FORCE_BUILD=TRUE NVTE_NO_LOCAL_VERSION=1 \
      "$py" -m pip wheel -q --no-build-isolation --no-deps -w "$PAIRS/wheels/te-$te" \
      "$PAIRS"/wheels/te-"$te"/transformer_engine_torch-*.tar.gz
    "$py" -m pip install -q --no-deps --target "$PAIRS/te-$te" "$PAIRS"/wheels/te-"$te"/*.whl \
      "$PAIRS"/wheels/common/*.whl
  done
  for pair in "${PAIR_NAMES[@]}"; do
    "$py" -m pip install -q --no-deps --target "$PAIRS/pair-$pair" "$PAIRS"/wheels/fa4-"$(fa4_of "$pair")"/*.whl \
      "$PAIRS"/wheels/dsl-"$(dsl_of "$pair")"/*.whl
  done
  # The replica's sitecustomize: each site's .pth files run (nvidia-cutlass-dsl's puts cutlass on sys.path).
  mkdir -p "$PAIRS/startup"
  sed -n "/^\"\"\"The replica's site/,/^PY\$/p" "$ROOT/.ci/image-env-replica.sh" | sed '$d' >"$PAIRS/startup/sitecustomize.py"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
  ls "$PAIRS"
}

check() {
  local pair="$1" out="${OUT:-/tmp}" torch_dir
  [[ " ${PAIR_NAMES[*]} " == *" $pair "* ]] || die "unknown pair $pair: use one of ${PAIR_NAMES[*]}"
  local te sites
  te="$(te_of "$pair")"
  sites="$PAIRS/pair-$pair:$PAIRS/te-$te"
  local -a quick=(--quick)
  [[ " ${FULL[*]} " == *" $pair "* ]] && quick=()
  torch_dir="$(python3 -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')"
  PYTHONPATH="$PAIRS/startup:$ROOT/src:$sites" MCORE_IMAGES_REPLICA_SITE="$sites" \
    CUDNN_HOME="$torch_dir/nvidia/cudnn" LD_LIBRARY_PATH="$torch_dir/nvidia/cudnn/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    python3 -m mcore_images.smoke.attention --backends flash,fused,unfused,auto,fa4,sdpa "${quick[@]}" \
    --out "$out/$pair.json" || true
  cp "$out/$pair.json" "$PAIRS/$pair.json"
}

table() {
  local out="${OUT:-/tmp}" pair
  local -a found=()
  for pair in "${PAIR_NAMES[@]}"; do [[ -f "$PAIRS/$pair.json" ]] && found+=("$PAIRS/$pair.json"); done
  [[ ${#found[@]} -gt 0 ]] || die "no pair was checked yet: run check PAIR first"
  PYTHONPATH="$ROOT/src" python3 -m mcore_images.smoke.attention.merge "${found[@]}" | tee "$out/attention-pairs.md"
  cp "${found[@]}" "$out/"
}

case "${1:-}" in
  prepare) prepare ;;
  stash) shift; [[ $# -eq 1 ]] || die "usage: $0 stash .whl/carry/NN"; stash "$1" ;;
  install) install ;;
  check) shift; [[ $# -eq 1 ]] || die "usage: $0 check PAIR (one of ${PAIR_NAMES[*]})"; check "$1" ;;
  table) table ;;
  *) die "usage: $0 prepare | stash .whl/carry/NN | install | check PAIR | table" ;;
esac
