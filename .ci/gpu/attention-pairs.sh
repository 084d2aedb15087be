#!/usr/bin/env bash
# Is TE's flash backend right with FlashAttention 4 on a GPU? ONE table of environment × backend × case × max error
# (out, dq, dk, dv against an fp32 reference; python -m mcore_images.smoke.attention) for the pairs PAIR_SET names,
# each a TE release and a FlashAttention 4 / CuTe DSL pair, by name:
#   te<TE>-<FA4>-c<DSL>   te2.21.0-b40-c4.8.1   TE 2.21.0 + flash-attn-4 4.0.0b40 + nvidia-cutlass-dsl 4.8.1
#                         te2.20-b36-c4.8.1     the newest TE 2.20.x on PyPI (when prepare runs) + 4.0.0b36 + 4.8.1
#                         te2.21.0-fa4.1.0-c4.9.0  any flash-attn-4 release: fa<VERSION>
# Default: the pairs measured on 2026-12-06 (src/mcore_images/catalogue/flash_attention.py MEASURED). `mcore-images
# outdated` prints the command for a TE release newer than the measured one.
# Each pair runs TE's backends under the NVTE variables megatron-core sets (flash, fused, unfused, auto), FlashAttention
# 4 called directly (fa4: tells FA4 from TE's integration) and torch's SDPA (a control), every case (QUICK=1: the four
# shapes of the first measurement).
#
# What differs from the images, on purpose (the merged table's header repeats it): the host's Python 3.12 and torch
# (HOST_TORCH), against which each TE release's extension is compiled. Sites are installed as the replica installs
# them (pip --target) and their .pth files processed as in the image (the replica's sitecustomize,
# .ci/image-env-replica.sh). Each TE release gets its own run-time needs and each pair FlashAttention 4's, resolved
# for it with uv against HOST_TORCH (what the host's Python lacks: TE_NEEDS, FA4_NEEDS).
#
# Here (a machine with PyPI and uv):  PAIR_SET="…" bash .ci/gpu/attention-pairs.sh prepare
#   downloads every wheel (and each TE release's extension sdist) into .whl/attention-pairs/ (git-ignored), packs
#   them into one tar, splits it into .whl/carry/NN/ folders of one part each, and prints the device calls.
# The device calls, back to back (the machine goes back after ~30 s idle), one H200, PAIR_SET the same at every step:
#   for each NN printed by prepare:   run(kind="nvidia-h200", carry=[".whl/carry/NN"],
#                                         command="PAIR_SET=… bash .ci/gpu/attention-pairs.sh stash .whl/carry/NN")
#   then:                             run(command="PAIR_SET=… bash .ci/gpu/attention-pairs.sh install", timeout_s=600)
#                                     (joins the parts, installs one site per TE release and one per pair, compiles
#                                     each TE release's extension at MAX_JOBS=16: ~150 s each)
#   then, one call per pair:          run(command="PAIR_SET=… bash .ci/gpu/attention-pairs.sh check PAIR",
#                                         timeout_s=600)   (writes $OUT/PAIR.json and prints its table)
#   last:                             run(command="PAIR_SET=… bash .ci/gpu/attention-pairs.sh table")
#                                     ($OUT/attention-pairs.md: every pair's section joined, ONE table)
# Files under /tmp survive between calls while the machine stays warm; $OUT of each call comes back.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
WHL="$ROOT/.whl/attention-pairs"
CARRY="$ROOT/.whl/carry"
PAIRS="${PAIRS:-/tmp/attention-pairs}"
# A call carries at most 64 MiB with the working tree: parts of 58,000,000 bytes leave it room.
PART_BYTES=58000000
MEASURED_PAIRS="te2.20-b36-c4.8.1 te2.20-b40-c4.8.1"
read -r -a PAIR_NAMES <<<"${PAIR_SET:-$MEASURED_PAIRS}"
# The device host's torch (its package list: device KINDS.md): what the needs are resolved against and each TE
# extension compiled against. What the host's Python lacks of TE's and FlashAttention 4's run-time needs:
HOST_TORCH=2.11.0
TE_NEEDS=(pydantic pydantic-core annotated-types typing-inspection nvdlfw-inspect nvidia-cudnn-frontend apache-tvm-ffi)
FA4_NEEDS=(quack-kernels torch-c-dlpack-ext apache-tvm-ffi)
FORM='^te([0-9]+\.[0-9]+(\.[0-9]+)?)-(b[0-9]+|fa[0-9][0-9a-z.]*)-c([0-9][0-9a-z.]*)$'

die() { printf '[pairs] error: %s\n' "$*" >&2; exit 2; }

# The parts of a pair's name: its TE release (or release series), flash-attn-4 release and CuTe DSL release.
parts() {
  [[ "$1" =~ $FORM ]] || die "pair '$1' is not te<TE>-b<N>-c<DSL> or te<TE>-fa<VERSION>-c<DSL> (e.g. te2.21.0-b40-c4.8.1)"
}
te_of() { parts "$1"; echo "${BASH_REMATCH[1]}"; }
fa4_of() { parts "$1"; local f="${BASH_REMATCH[3]}"; if [[ "$f" == b* ]]; then echo "4.0.0$f"; else echo "${f#fa}"; fi; }
dsl_of() { parts "$1"; echo "${BASH_REMATCH[4]}"; }
# te2.20.2 is that release; te2.20 the newest of its series.
te_spec() { if [[ "$1" == *.*.* ]]; then echo "==$1"; else echo "==$1.*"; fi; }
[[ ${#PAIR_NAMES[@]} -gt 0 ]] || die "PAIR_SET names no pair: give one or more, e.g. PAIR_SET=\"te2.21.0-b40-c4.8.1\""
for _pair in "${PAIR_NAMES[@]}"; do parts "$_pair"; done
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

# NAME==VERSION of the distributions each pattern (an extended regex) names, as uv resolves the requirements on stdin
# for the host's Python and torch; $1 says whose they are.
resolved() {
  local text name
  text="$( (cat; echo "torch==$HOST_TORCH") | PIP_CONSTRAINT='' python3 -m uv pip compile -q --no-header --no-annotate \
    --python-version 3.12 --python-platform x86_64-manylinux_2_28 -)" || die "uv finds no solution for $1"
  for name in "${@:2}"; do
    grep -E "^(${name})==[^ ]+$" <<<"$text" || die "$1 needs no $name: take it out of the needs"
  done
}

prepare() {
  local te dsl fa4 pair version text n=0 part
  local -a dirs=() needs
  python3 -m uv --version >/dev/null 2>&1 || die "prepare resolves each pair's needs with uv: pip install uv"
  for te in "${TE_RELEASES[@]}"; do
    rm -rf "${WHL:?}/te-$te"  # te2.20 may name a newer release than last time
    download "$WHL/te-$te" "transformer-engine-cu13$(te_spec "$te")"
    version="$(find "$WHL/te-$te" -name 'transformer_engine_cu13-*.whl' -printf '%f\n' | cut -d- -f2)"
    download "$WHL/te-$te" "transformer-engine==$version"
    # The extension's sdist as PyPI lists it: `pip download` of an sdist would build its metadata (torch and all).
    python3 - "$version" "$WHL/te-$te" <<'PY'
import json, sys, urllib.parse, urllib.request
from pathlib import Path
version, dest, index = sys.argv[1], Path(sys.argv[2]), "https://pypi.org/pypi/transformer-engine-torch/json"
files = json.load(urllib.request.urlopen(index))["releases"][version]
sdist = next(f for f in files if f["packagetype"] == "sdist")
url = urllib.parse.urljoin(index, sdist["url"])
(dest / sdist["filename"]).write_bytes(urllib.request.urlopen(url).read())
PY
    # TE's needs as its extension declares them (the sdist's PKG-INFO), resolved for this release.
    text="$(tar -xzOf "$WHL/te-$te"/transformer_engine_torch-*.tar.gz --wildcards '*/PKG-INFO' \
      | sed -n 's/^Requires-Dist: //p' | sort -u | resolved "TE $version" "${TE_NEEDS[@]}")"
    mapfile -t needs <<<"$text"
    download "$WHL/te-$te" "${needs[@]}"
    printf '[pairs] te%s: TE %s; needs %s\n' "$te" "$version" "${needs[*]}"
    dirs+=("te-$te")
  done
  for dsl in "${DSL_RELEASES[@]}"; do
    # The CuTe DSL and every library wheel of it its cu13 extra installs.
    text="$(echo "nvidia-cutlass-dsl[cu13]==$dsl" | resolved "nvidia-cutlass-dsl $dsl" 'nvidia-cutlass-dsl(-libs-[a-z0-9]+)?')"
    mapfile -t needs <<<"$text"
    download "$WHL/dsl-$dsl" "${needs[@]}"
    dirs+=("dsl-$dsl")
  done
  for fa4 in "${FA4_RELEASES[@]}"; do download "$WHL/fa4-$fa4" "flash-attn-4==$fa4"; dirs+=("fa4-$fa4"); done
  for pair in "${PAIR_NAMES[@]}"; do
    # FlashAttention 4's needs resolved for this pair: a quack-kernels made for another CuTe DSL does not import.
    text="$(printf '%s\n' "flash-attn-4==$(fa4_of "$pair")" "nvidia-cutlass-dsl[cu13]==$(dsl_of "$pair")" \
      | resolved "$pair" "${FA4_NEEDS[@]}")"
    mapfile -t needs <<<"$text"
    rm -rf "${WHL:?}/needs-$pair" && download "$WHL/needs-$pair" "${needs[@]}"
    printf '[pairs] %s: needs %s\n' "$pair" "${needs[*]}"
    dirs+=("needs-$pair")
  done
  rm -rf "$CARRY" && mkdir -p "$CARRY"
  tar -C "$WHL" -cf "$ROOT/.whl/attention-pairs.tar" "${dirs[@]}"
  split -b "$PART_BYTES" -d -a 2 "$ROOT/.whl/attention-pairs.tar" "$ROOT/.whl/attention-pairs.tar.part."
  for part in "$ROOT"/.whl/attention-pairs.tar.part.*; do
    mkdir -p "$CARRY/$(printf '%02d' "$n")" && mv "$part" "$CARRY/$(printf '%02d' "$n")/"
    n=$((n + 1))
  done
  rm -f "$ROOT/.whl/attention-pairs.tar"
  printf '[pairs] %s parts to carry, one a call: %s\n' "$n" "$(find "$CARRY" -mindepth 1 -maxdepth 1 -printf '%f\n' | sort | paste -sd' ')"
  (cd "$WHL" && du -sh "${dirs[@]}")
  local set="PAIR_SET=\"${PAIR_NAMES[*]}\""
  printf '[pairs] then, back to back on one H200:\n'
  find "$CARRY" -mindepth 1 -maxdepth 1 -printf '%f\n' | sort | while read -r part; do
    printf '  run(kind="nvidia-h200", carry=[".whl/carry/%s"], command="%s bash .ci/gpu/attention-pairs.sh stash .whl/carry/%s")\n' \
      "$part" "${set//\"/\\\"}" "$part"
  done
  printf '  run(command="%s bash .ci/gpu/attention-pairs.sh install", timeout_s=600)\n' "${set//\"/\\\"}"
  for pair in "${PAIR_NAMES[@]}"; do
    printf '  run(command="%s bash .ci/gpu/attention-pairs.sh check %s", timeout_s=600)\n' "${set//\"/\\\"}" "$pair"
  done
  printf '  run(command="%s bash .ci/gpu/attention-pairs.sh table")\n' "${set//\"/\\\"}"
}

stash() {
  compgen -G "$ROOT/$1/attention-pairs.tar.part.*" >/dev/null || die "$1 holds no part: give a folder prepare made (.whl/carry/NN)"
  mkdir -p "$PAIRS/parts"
  cp "$ROOT/$1"/* "$PAIRS/parts/"
  ls -l "$PAIRS/parts"
}

install() {
  local py torch_dir nv te pair
  compgen -G "$PAIRS/parts/attention-pairs.tar.part.*" >/dev/null || die "nothing stashed in $PAIRS/parts: stash each .whl/carry/NN first"
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
    "$py" -m pip install -q --no-deps --target "$PAIRS/te-$te" "$PAIRS"/wheels/te-"$te"/*.whl
  done
  for pair in "${PAIR_NAMES[@]}"; do
    "$py" -m pip install -q --no-deps --target "$PAIRS/pair-$pair" "$PAIRS"/wheels/fa4-"$(fa4_of "$pair")"/*.whl \
      "$PAIRS"/wheels/dsl-"$(dsl_of "$pair")"/*.whl "$PAIRS"/wheels/needs-"$pair"/*.whl
  done
  # The replica's sitecustomize: each site's .pth files run (nvidia-cutlass-dsl's puts cutlass on sys.path).
  mkdir -p "$PAIRS/startup"
  sed -n "/^\"\"\"The replica's site/,/^PY\$/p" "$ROOT/.ci/image-env-replica.sh" | sed '$d' >"$PAIRS/startup/sitecustomize.py"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
  ls "$PAIRS"
}

check() {
  local pair="$1" out="${OUT:-/tmp}" torch_dir
  [[ " ${PAIR_NAMES[*]} " == *" $pair "* ]] || die "unknown pair $pair: use one of ${PAIR_NAMES[*]} (PAIR_SET)"
  [[ -d "$PAIRS/pair-$pair" && -d "$PAIRS/te-$(te_of "$pair")" ]] || die "$pair is not installed in $PAIRS: run install first"
  local sites
  sites="$PAIRS/pair-$pair:$PAIRS/te-$(te_of "$pair")"
  local -a quick=()
  [[ -n "${QUICK:-}" ]] && quick=(--quick)
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
  prepare) [[ $# -eq 1 ]] || die "usage: $0 prepare (PAIR_SET names the pairs)"; prepare ;;
  stash) shift; [[ $# -eq 1 ]] || die "usage: $0 stash .whl/carry/NN"; stash "$1" ;;
  install) [[ $# -eq 1 ]] || die "usage: $0 install (PAIR_SET names the pairs)"; install ;;
  check) shift; [[ $# -eq 1 ]] || die "usage: $0 check PAIR (one of ${PAIR_NAMES[*]})"; check "$1" ;;
  table) [[ $# -eq 1 ]] || die "usage: $0 table (PAIR_SET names the pairs)"; table ;;
  *) die "usage: $0 prepare | stash .whl/carry/NN | install | check PAIR | table" ;;
esac
