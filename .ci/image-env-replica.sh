#!/usr/bin/env bash
# An image's run-time environment, reproduced on a GPU host that has no container runtime, so that the smoke,
# the bridge check and the bench run there with the image's settings rather than the host's:
#
#   .ci/image-env-replica.sh export IMAGE DIR   (where Docker runs) DIR/image-env.json: the image config's Env;
#                                               DIR/constraints.txt: its PIP_CONSTRAINT file; DIR/path-tools.txt:
#                                               every command on the image's PATH
#   .ci/image-env-replica.sh locks STACK DIR [FREEZE]
#                                               (where PyPI is reachable; REPLICA_PYTHON=3.12 for a GPU host whose
#                                               Python is not the stack's) the same DIR from a stack's locks
#                                               instead of a built image (a release stack whose base cannot be
#                                               pulled here): the kernels, runtime and app locks' wheels, hash-
#                                               checked, less what FREEZE (`pip freeze` of the GPU host) already
#                                               has at the locked version (the base layer is the host's torch),
#                                               TE's extension sdist, in DIR/parts of 58 MB to carry
#                                               (.ci/gpu/replica-stack.sh runs it there)
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
#                                               NCCL_DEBUG, NCCL_DEBUG_SUBSYS and NCCL_DEBUG_FILE pass through
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

# A field of a stack (env/stacks.json); an unknown stack is one line that names the known ones.
stack_field() {
  PYTHONPATH="$ROOT/src" python3 - "$@" <<'PY' || exit 2
import sys
from mcore_images.catalogue.stacks import get_stack
from mcore_images.errors import InputError
try:
    print(getattr(get_stack(sys.argv[1]), sys.argv[2]))
except InputError as exc:
    sys.exit(f"[replica] error: {exc}")
PY
}

# DIR as `export` or `locks` makes it, before a step on the GPU host reads it; the replica as the step before made it.
replica_dir() {
  local file
  for file in image-env.json constraints.txt path-tools.txt; do
    [[ -f "$1/$file" ]] || die "$1 has no $file: make DIR with \`$0 export IMAGE DIR\` or \`$0 locks STACK DIR\`"
  done
}
stashed() { compgen -G "$REPLICA/parts/*" >/dev/null || die "nothing stashed in $REPLICA/parts: \`$0 stash FILE…\` first"; }
installed() { [[ -x "$REPLICA/bin/python" ]] || die "no replica installed in $REPLICA: \`$0 install DIR\` first"; }

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

# A stack's locks as the replica's input, for a stack no machine here can build (its base is on a registry these
# machines cannot reach). The image's variables are the runtime stage's ENV lines of the Dockerfile; its
# PIP_CONSTRAINT file is what the runtime image writes (mcore_images.catalogue.constraints over the locked
# versions); its PATH cannot be listed without the image, so path-tools.txt names the run-time toolchain the
# runtime stage installs (docker/install-toolchain.sh) and the commands a launcher calls.
from_locks() {
  local stack="$1" dir="$2" freeze="${3:-}" python
  [[ -z "$freeze" || -f "$freeze" ]] || die "$freeze is not a file: give what \`pip freeze\` printed on the GPU host"
  # REPLICA_LAYERS: the layers whose wheels travel; "kernels runtime" is enough for the smoke and the bench (no
  # vLLM, no verl), a quarter of the cuda stack's parts. The constraints stay the whole image's.
  local known="kernels runtime app"
  local layers="${REPLICA_LAYERS:-$known}" layer
  for layer in $layers; do
    [[ " $known " == *" $layer "* ]] || die "REPLICA_LAYERS has $layer: use some of $known"
  done
  [[ -n "${layers// /}" ]] || die "REPLICA_LAYERS is empty: use some of $known (all by default)"
  python="$(stack_field "$stack" python)"
  mkdir -p "$dir/wheels" "$dir/parts"
  PYTHONPATH="$ROOT/src" python3 - "$stack" "$dir" "$freeze" "$layers" <<'PY'
import json, re, sys
from pathlib import Path
from mcore_images.catalogue import constraints
from mcore_images.catalogue.stacks import get_stack, repo_root
from mcore_images.resolve import lock_files

stack, out, freeze, carry_layers = get_stack(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4].split()
have = {}
for line in (Path(freeze).read_text().splitlines() if freeze else []):
    name, sep, version = line.partition("==")
    if sep:
        have[re.sub(r"[-_.]+", "-", name).lower()] = version.strip()
installed, carried = {}, []
for layer in ("base", "kernels", "runtime", "app"):
    path = lock_files.lock_path(stack, layer)
    text = path.read_text() if path.is_file() else ""
    installed.update(lock_files.pins(text))
    if layer not in carry_layers:
        continue  # base: the host's torch and its CUDA wheels; a layer REPLICA_LAYERS leaves out
    keep, block = [], []
    for line in text.splitlines():
        match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==(\S+)", line)
        if match or not line.startswith(" "):
            if block:
                keep += block
            block = []
            if match and have.get(re.sub(r"[-_.]+", "-", match[1]).lower()) != match[3]:
                block = [line]
                carried.append(f"{match[1]}=={match[3]}")
        elif block and line.strip().startswith("--hash"):
            block.append(line)
    keep += block
    (out / f"{layer}.carry.txt").write_text("\n".join(keep) + "\n")
(out / "constraints.txt").write_text("\n".join(constraints.constraints(installed)) + "\n")
env, stage = [], False
for line in (repo_root() / "Dockerfile").read_text().replace("\\\n", " ").splitlines():
    if line.startswith("FROM "):
        stage = line.rstrip().endswith(" AS runtime")
    elif stage and line.startswith("ENV "):
        env += [item.replace("${STACK}", stack.name) for item in line[4:].split()]
(out / "image-env.json").write_text(json.dumps(env) + "\n")
# gcc runs binutils' as and ld by PATH, and Triton finds libcuda through ldconfig: its kernels compile with them.
(out / "path-tools.txt").write_text("\n".join(["as", "bash", "cat", "cc", "c++", "env", "g++", "gcc", "git", "ld",
                                              "ldconfig", "ls", "make", "mkdir", "mktemp", "nvidia-smi",
                                              "python3-config", "sh", "tar", "torchrun", "uname", "which"]) + "\n")
print(f"[replica] {stack.name}: {len(carried)} wheels to carry, {len(env)} image variables")
PY
  local python
  python="$(PYTHONPATH="$ROOT/src" python3 -c 'import sys; from mcore_images.catalogue.stacks import get_stack; print(get_stack(sys.argv[1]).python)' "$stack")"
  # REPLICA_PYTHON: the GPU host's Python where it is not the stack's (the debian stacks have 3.13, the H200 3.12):
  # the wheels must install there; the certificate lists the difference.
  python="${REPLICA_PYTHON:-$python}"
  # Wheels for the stack's Python and platform, hash-checked; a release with no wheel (antlr4-python3-runtime, wget)
  # comes as its sdist, fetched by its index URL and checked against the lock's hashes (building its metadata
  # here could need torch), and is built on the GPU host, offline: `lock` refuses a locked sdist whose build reaches
  # for the network (src/mcore_images/resolve/sdist_builds.py), and the stack's left_out keeps one out of the locks.
  PYTHONPATH="$ROOT/src" python3 - "$dir" "$python" "$layers" <<'PY'
import hashlib, re, subprocess, sys, urllib.request
from pathlib import Path
from mcore_images.resolve import pypi

out, python = Path(sys.argv[1]), sys.argv[2]
tags = [*pypi.wheel_platforms("x86_64"), "--platform", "linux_x86_64", "--platform", "any"]  # every manylinux tag
for layer in sys.argv[3].split():
    carry = out / f"{layer}.carry.txt"
    for _ in range(20):
        if not carry.read_text().strip():
            break
        done = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--require-hashes",
                               "--only-binary", ":all:", "--dest", str(out / "wheels"), "--python-version", python,
                               "--implementation", "cp", *tags, "-r", str(carry)], capture_output=True, text=True)
        if done.returncode == 0:
            break
        missing = re.search(r"No matching distribution found for ([A-Za-z0-9._-]+)==(\S+)", done.stderr)
        if not missing:
            sys.exit(f"[replica] pip download failed: {done.stderr.strip().splitlines()[-1]}")
        name, version = missing[1], missing[2]
        lines, keep, hashes, skipping = carry.read_text().splitlines(), [], [], False
        for line in lines:
            if re.match(r"^[A-Za-z0-9]", line):
                skipping = line.split("==")[0].lower() == name.lower()
            if skipping:
                hashes += re.findall(r"sha256:([0-9a-f]{64})", line)
            else:
                keep.append(line)
        carry.write_text("\n".join(keep) + "\n")
        stem = re.sub(r"[-_.]+", "[-_.]", name)
        sdist = next((f for f in pypi.index_files(name) if re.fullmatch(f"(?i){stem}-{re.escape(version)}\\.(?:tar\\.gz|zip)",
                                                                         f["filename"])), None)
        if sdist is None:
            sys.exit(f"[replica] {name} {version}: no wheel for Python {python} on x86_64 and no sdist on the index")
        data = urllib.request.urlopen(sdist["url"], timeout=600).read()
        if hashlib.sha256(data).hexdigest() not in hashes:
            sys.exit(f"[replica] {sdist['filename']}: sha256 not among the lock's hashes")
        (out / "parts" / sdist["filename"]).write_bytes(data)
        print(f"[replica] {name} {version}: no wheel, its sdist is carried (built on the GPU host)")
PY
  local te
  te="$(PYTHONPATH="$ROOT/src" python3 -c 'import sys; from mcore_images.catalogue.stacks import get_stack; print(get_stack(sys.argv[1]).te)' "$stack")"
  # The sdist file itself, checked against the index's sha256 (pip download would build its metadata first, under
  # whatever pip configuration this machine has).
  PYTHONPATH="$ROOT/src" python3 - "$te" "$dir/parts" <<'PY'
import hashlib, sys, urllib.request
from pathlib import Path
from mcore_images.resolve import pypi
version, parts = sys.argv[1], Path(sys.argv[2])
name = f"transformer_engine_torch-{version}.tar.gz"
found = next((f for f in pypi.index_files("transformer-engine-torch") if f["filename"] == name), None)
if found is None:
    sys.exit(f"[replica] {name} is not on the index")
data = urllib.request.urlopen(found["url"], timeout=600).read()
if hashlib.sha256(data).hexdigest() != found["hashes"].get("sha256"):
    sys.exit(f"[replica] {name}: sha256 differs from the index's")
(parts / name).write_bytes(data)
PY
  tar -C "$dir/wheels" -cf "$dir/$stack-wheels.tar" .
  split -b 58000000 -d -a 3 "$dir/$stack-wheels.tar" "$dir/parts/$stack-wheels.tar.part."
  rm "$dir/$stack-wheels.tar"
  printf '[replica] %s: %s in %s parts under %s/parts\n' "$stack" "$(du -sh "$dir/wheels" | cut -f1)" \
    "$(find "$dir/parts" -name '*.part.*' | wc -l)" "$dir"
}

stash() {
  local f
  for f in "$@"; do [[ -f "$f" ]] || die "$f is not a file: give the carried parts (DIR/parts/NAME.part.NN)"; done
  mkdir -p "$REPLICA/parts"
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
  local other
  for other in "$REPLICA"/parts/*.tar.gz "$REPLICA"/parts/*.zip; do  # a locked release with no wheel (from `locks`)
    [[ -e "$other" && "$other" != "$sdist" ]] || continue
    MAX_JOBS="${MAX_JOBS:-16}" "$py" -m pip wheel -q --no-build-isolation --no-deps -w "$REPLICA/wheels" "$other"
  done
  # megatron-core's gradient accumulation fusion (on by default in Megatron-LM, Megatron-Bridge and verl): the image
  # has apex's extension where the stack has apex (compiled from its git source, which is not carried) and this
  # project's module (kernels/wgrad-fusion) where it has none; the replica has this project's, and `differences`
  # says so where the image's is apex's.
  "$py" -m pip wheel -q --no-deps --no-build-isolation --no-index -w "$REPLICA/wheels" "$ROOT/kernels/wgrad-fusion"
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
  # torch's console script in the image's venv: the host's torch, through the same interpreter
  rm -f "$REPLICA/bin/torchrun"  # a link to the host's would be written through
  printf '#!/bin/sh\nexec %s -m torch.distributed.run "$@"\n' "$py" >"$REPLICA/bin/torchrun"
  chmod +x "$REPLICA/bin/torchrun"
  printf '[replica] %s wheels in %s; %s commands in %s\n' "$(find "$REPLICA/wheels" -name '*.whl' | wc -l)" "$REPLICA/site" \
    "$(find "$REPLICA/bin" -mindepth 1 | wc -l)" "$REPLICA/bin"
  differences "$dir"
}

differences() {
  local dir="$1" tool
  printf '[replica] differences from the image:\n'
  # The host's interpreter and every pinned version that is not the image's (the smoke's own comparison).
  ( run "$dir" python -c 'import os
from mcore_images.catalogue import stacks, wgrad_fusion
from mcore_images.smoke.kit import envinfo
for line in envinfo.source()["differences"]:
    print("[replica]   " + line)
image, here = wgrad_fusion.expected_provider(stacks.get_stack(os.environ["MCORE_IMAGES_STACK"])), wgrad_fusion.provider()
if image != here:
    print(f"[replica]   {wgrad_fusion.MODULE}: {here} here, {image} in the image")
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
  # NCCL's diagnostics pass through from the caller: they change what NCCL prints, not what it does.
  local name
  for name in NCCL_DEBUG NCCL_DEBUG_SUBSYS NCCL_DEBUG_FILE; do
    [[ -z "${!name:-}" ]] || vars+=("$name=${!name}")
  done
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
  locks) shift; [[ $# -ge 2 && $# -le 3 ]] || die "usage: $0 locks STACK DIR [FREEZE]"; from_locks "$@" ;;
  stash) shift; [[ $# -ge 1 ]] || die "usage: $0 stash FILE…"; stash "$@" ;;
  install) shift; [[ $# -eq 1 ]] || die "usage: $0 install DIR"; replica_dir "$1"; stashed; install "$@" ;;
  run) shift; [[ $# -ge 2 ]] || die "usage: $0 run DIR CMD…"; replica_dir "$1"; installed; run "$@" ;;
  differences) shift; [[ $# -eq 1 ]] || die "usage: $0 differences DIR"; replica_dir "$1"; installed; differences "$@" ;;
  *) die "usage: $0 export IMAGE DIR | locks STACK DIR [FREEZE] | stash FILE… | install DIR | run DIR CMD… | differences DIR" ;;
esac
