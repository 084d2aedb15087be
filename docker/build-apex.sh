#!/bin/sh
# Build apex's C++/CUDA extensions that megatron-core uses (fused layer norm, multi-tensor
# optimizers, gradient-accumulation fusion) as a wheel into /wheels, from the source folder
# given as $1 (the `apex` named build context at the pinned commit).
# Inputs (env): APEX_COMMIT, CUDA_MAJOR, TORCH_CUDA_ARCH_LIST or NVTE_CUDA_ARCHS; the compile jobs are
# planned here for apex's own memory model (compile-jobs.sh), or taken from the build's explicit values.
set -eu
src="$1"
: "${APEX_COMMIT:?}" "${CUDA_MAJOR:?}"
plan="$(sh "$(dirname "$0")/compile-jobs.sh" apex)"
eval "$plan"
export MAX_JOBS NVCC_THREADS
echo "build-apex: $(echo "$plan" | grep '^#' | cut -c3-)"
[ -f "$src/setup.py" ] || { echo "build-apex: no apex source in the 'apex' build context; pass one with --set <target>.contexts.apex=<dir or git URL>" >&2; exit 1; }
if [ -d "$src/.git" ] && command -v git >/dev/null; then
  have="$(git -C "$src" rev-parse HEAD)"
  [ "$have" = "$APEX_COMMIT" ] || { echo "build-apex: source is at $have, the stack pins $APEX_COMMIT" >&2; exit 1; }
fi
site="$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
if [ -x "$site/nvidia/cu${CUDA_MAJOR}/bin/nvcc" ]; then
  export CUDA_HOME="$site/nvidia/cu${CUDA_MAJOR}"
fi
# The stack's SM numbers in torch's spelling: the last digit is the minor (100 -> 10.0, 90a -> 9.0a), as
# mcore_images.catalogue.gpu_archs.torch_arch writes it (a unit test runs this line against it).
arch_list="${TORCH_CUDA_ARCH_LIST:-$(echo "${NVTE_CUDA_ARCHS:-90}" | sed -E 's/([0-9]+)([0-9])([a-z]?)/\1.\2\3/g')}"
export TORCH_CUDA_ARCH_LIST="$arch_list"
# C++ through ccache's compiler links, nvcc through the retry wrapper (which calls ccache too).
[ -d /usr/lib/ccache ] && export PATH="/usr/lib/ccache:$PATH"
export CC=gcc CXX=g++
ccache --zero-stats >/dev/null 2>&1 || true
MCORE_REAL_NVCC="${CUDA_HOME:-/usr/local/cuda}/bin/nvcc"
PYTORCH_NVCC="$(dirname "$0")/nvcc-retry.sh"
export MCORE_REAL_NVCC PYTORCH_NVCC
# apex (since bfb500c8) selects extensions by environment variables: APEX_CPP_EXT builds apex_C,
# APEX_CUDA_EXT builds amp_C, fused_layer_norm_cuda and fused_weight_gradient_mlp_cuda among others.
export APEX_CPP_EXT=1 APEX_CUDA_EXT=1
export APEX_PARALLEL_BUILD="${MAX_JOBS}" NVCC_APPEND_FLAGS="--threads ${NVCC_THREADS:-1}"
echo "build-apex: ${APEX_COMMIT}, TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST}, MAX_JOBS=${MAX_JOBS}"
start=$(date +%s)
sh "$(dirname "$0")/pip.sh" wheel --no-build-isolation --no-deps --no-cache-dir -w /wheels "$src"
echo "build-apex: built in $(( $(date +%s) - start )) s"
ccache --show-stats 2>/dev/null | sed 's/^/build-apex: ccache: /' || true
