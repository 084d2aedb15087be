#!/usr/bin/env bash
# An image's run-time environment, reproduced on a GPU host that has no container runtime, so that the smoke,
# the bridge check and the bench run there with the image's settings rather than the host's:
#
#   .ci/image-env-replica.sh export IMAGE DIR   (where Docker runs) DIR/image-env.json: the image config's Env;
#                                               DIR/constraints.txt: its PIP_CONSTRAINT file; DIR/path-tools.txt:
#                                               every command on the image's PATH
#   .ci/image-env-replica.sh stash FILE…        (GPU host) keep carried files under $REPLICA/parts across calls
#   .ci/image-env-replica.sh install DIR        (GPU host) join the parts, install every wheel in one
#                                               `pip install --no-deps --target $REPLICA/site`, compile TE's
#                                               PyTorch extension there if its sdist was carried, and make
#                                               $REPLICA/bin: links to the host's commands that the image has too
#   .ci/image-env-replica.sh run DIR CMD…       (GPU host) CMD under `env -i` with the image's variables, PATH =
#                                               $REPLICA/bin only, PIP_CONSTRAINT = the image's file, this
#                                               checkout's src/ and the installed wheels first on
#                                               PYTHONPATH, over the host's torch; the site's .pth files are
#                                               processed as the image's interpreter processes its site-packages
#                                               ($REPLICA/startup/sitecustomize.py calls site.addsitedir on it:
#                                               nvidia-cutlass-dsl puts its cutlass package on sys.path so)
#   .ci/image-env-replica.sh differences DIR    (GPU host) every remaining difference from the image, one a line
#                                               (install prints them too)
#
# What cannot be the image's is left visible, not hidden: the host's Python and torch build, its driver and
# any host package the image lacks. The smoke's certificate lists what differs (environment.source) and calls
# the run "machine's tree" unless every pinned version matches. nvidia-smi is linked in as the NVIDIA container
# runtime injects it into a container; the driver version is read from /proc/driver/nvidia/version where it is not.
set -euo pipefail
REPLICA="${REPLICA:-/tmp/mcore-images-replica}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"

die() { printf '[replica] error: %s\n' "$*" >&2; exit 2; }

host_python() { command -v python3.12 || command -v python3 || die "no python3 on this host"; }

export_image() {
  local image="$1" dir="$2"
  mkdir -p "$dir"
  docker image inspect "$image" --format '{{json .Config.Env}}' >"$dir/image-env.json"
  docker run --rm --entrypoint sh "$image" -c 'cat "$PIP_CONSTRAINT"' >"$dir/constraints.txt"
  # shellcheck disable=SC2016  # expanded inside the image
  docker run --rm --entrypoint sh "$image" -c \
    'for d in $(echo "$PATH" | tr : " "); do ls "$d" 2>/dev/null; done | sort -u' >"$dir/path-tools.txt"
  printf '[replica] %s: %s variables, %s pins, %s commands on PATH\n' "$image" \
    "$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))))' "$dir/image-env.json")" \
    "$(grep -c '==' "$dir/constraints.txt")" "$(wc -l <"$dir/path-tools.txt")"
}

stash() {
  mkdir -p "$REPLICA/parts"
  local f
  for f in "$@"; do cp "$f" "$REPLICA/parts/"; done
  ls -l "$REPLICA/parts"
}

install() {
  local dir="$1" py
  py="$(host_python)"
  mkdir -p "$REPLICA/wheels" "$REPLICA/bin"
  # Parts are NAME.part.NN, split with `split -b`: a tar of wheels (NAME.tar) or one wheel (NAME.whl).
  local name
  for name in $(find "$REPLICA/parts" -maxdepth 1 -name '*.part.*' -printf '%f\n' | sed 's/\.part\.[0-9]*$//' | sort -u); do
    cat "$REPLICA/parts/$name".part.* >"$REPLICA/joined-$(basename "$name")"
    case "$name" in
      *.tar) tar -C "$REPLICA/wheels" -xf "$REPLICA/joined-$(basename "$name")" ;;
      *.whl) cp "$REPLICA/joined-$(basename "$name")" "$REPLICA/wheels/$(basename "$name")" ;;
      *) die "part $name is neither NAME.tar.part.NN nor NAME.whl.part.NN" ;;
    esac
  done
  cp "$REPLICA"/parts/*.whl "$REPLICA/wheels/" 2>/dev/null || true
  local sdist
  sdist="$(find "$REPLICA/parts" -maxdepth 1 -name 'transformer_engine_torch-*.tar.gz' | head -n 1)"
  if [[ -n "$sdist" ]]; then
    local torch_dir nv
    torch_dir="$("$py" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')"
    nv="$(find "$torch_dir/nvidia" -maxdepth 2 -name include -type d | paste -sd:)"
    # The extension builds against the host's torch and the carried TE core, as the kernels layer builds it.
    "$py" -m pip install -q --no-deps --target "$REPLICA/build-deps" "$REPLICA"/wheels/transformer_engine_cu13-*.whl \
      "$REPLICA"/wheels/pybind11-*.whl "$REPLICA"/wheels/ninja-*.whl
    PYTHONPATH="$REPLICA/build-deps" PATH="$REPLICA/build-deps/bin:$PATH" CPLUS_INCLUDE_PATH="$nv" \
      NVTE_FRAMEWORK=pytorch NVTE_CUDA_ARCHS="${NVTE_CUDA_ARCHS:-90}" MAX_JOBS="${MAX_JOBS:-16}" \
      NVTE_PYTORCH_FORCE_BUILD=TRUE NVTE_NO_LOCAL_VERSION=1 \
      "$py" -m pip wheel -q --no-build-isolation --no-deps -w "$REPLICA/wheels" "$sdist"
  fi
  "$py" -m pip install -q --no-deps --target "$REPLICA/site" "$REPLICA"/wheels/*.whl
  local tool path
  while read -r tool; do
    [[ -z "$tool" || "$tool" == python* ]] && continue
    path="$(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin command -v "$tool" || true)"
    [[ -n "$path" ]] && ln -sf "$path" "$REPLICA/bin/$tool"
  done <"$dir/path-tools.txt"
  [[ -x "$REPLICA/site/bin/ninja" ]] && ln -sf "$REPLICA/site/bin/ninja" "$REPLICA/bin/ninja"
  # The NVIDIA container runtime injects nvidia-smi into every GPU container; the image's own PATH list lacks it.
  path="$(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin command -v nvidia-smi || true)"
  [[ -n "$path" ]] && ln -sf "$path" "$REPLICA/bin/nvidia-smi"
  # pip --target skips .pth files; the image's interpreter processes them in its site-packages. The site's path
  # reaches this file as data (MCORE_IMAGES_REPLICA_SITE, set by `run`).
  mkdir -p "$REPLICA/startup"
  cat >"$REPLICA/startup/sitecustomize.py" <<'PY'
"""The replica's site(s), processed as the image's interpreter processes its site-packages (.pth files run)."""
import os
import site

for folder in filter(None, os.environ.get("MCORE_IMAGES_REPLICA_SITE", "").split(os.pathsep)):
    site.addsitedir(folder)
PY
  # A wrapper, not a link: a linked venv interpreter would lose its venv (and the host's torch).
  printf '#!/bin/sh\nexec %s "$@"\n' "$py" >"$REPLICA/bin/python"
  chmod +x "$REPLICA/bin/python"
  ln -sf python "$REPLICA/bin/python3"
  printf '[replica] %s wheels in %s; %s commands in %s\n' "$(find "$REPLICA/wheels" -name '*.whl' | wc -l)" "$REPLICA/site" \
    "$(find "$REPLICA/bin" -mindepth 1 | wc -l)" "$REPLICA/bin"
  differences "$dir"
}

differences() {
  local dir="$1" tool
  printf '[replica] differences from the image:\n'
  # The host's interpreter and every pinned version that is not the image's (the smoke's own comparison).
  ( run "$dir" python -c 'from mcore_images.smoke.kit import envinfo
for line in envinfo.source()["differences"]:
    print("[replica]   " + line)
print("[replica]   interpreter: the host'"'"'s Python (the image'"'"'s own is not carried)")' )
  while read -r tool; do
    [[ -z "$tool" || "$tool" == python* || -e "$REPLICA/bin/$tool" ]] && continue
    printf '[replica]   command %s: on the image'"'"'s PATH, not on this host\n' "$tool"
  done <"$dir/path-tools.txt"
  printf '[replica]   variables: PATH is %s/bin, VIRTUAL_ENV is unset (the image'"'"'s are replaced)\n' "$REPLICA"
}

run() {
  local dir="$1"; shift
  local -a vars=()
  mapfile -t vars < <(python3 -c '
import json, sys
for item in json.load(open(sys.argv[1])):
    name = item.split("=", 1)[0]
    if name not in ("PATH", "VIRTUAL_ENV", "PIP_CONSTRAINT", "MCORE_IMAGES_ROOT"):
        print(item)' "$dir/image-env.json")
  local torch_dir
  torch_dir="$("$(host_python)" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')"
  # The image finds cuDNN in its own pip package; a host with a system cuDNN must be pointed at torch's. The
  # driver's libraries stay where the host keeps them (a container runtime injects them into the image too).
  exec env -i HOME="${HOME:-/root}" TERM=dumb "${vars[@]}" \
    PATH="$REPLICA/bin" PIP_CONSTRAINT="$dir/constraints.txt" MCORE_IMAGES_ROOT="$ROOT" \
    PYTHONPATH="$REPLICA/startup:$ROOT/src:$REPLICA/site" MCORE_IMAGES_REPLICA_SITE="$REPLICA/site" \
    CUDNN_HOME="$torch_dir/nvidia/cudnn" \
    LD_LIBRARY_PATH="$torch_dir/nvidia/cudnn/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"
}

case "${1:-}" in
  export) shift; [[ $# -eq 2 ]] || die "usage: $0 export IMAGE DIR"; export_image "$@" ;;
  stash) shift; [[ $# -ge 1 ]] || die "usage: $0 stash FILE…"; stash "$@" ;;
  install) shift; [[ $# -eq 1 ]] || die "usage: $0 install DIR"; install "$@" ;;
  run) shift; [[ $# -ge 2 ]] || die "usage: $0 run DIR CMD…"; run "$@" ;;
  differences) shift; [[ $# -eq 1 ]] || die "usage: $0 differences DIR"; differences "$@" ;;
  *) die "usage: $0 export IMAGE DIR | stash FILE… | install DIR | run DIR CMD… | differences DIR" ;;
esac
