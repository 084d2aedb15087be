#!/bin/sh
# Compile Transformer Engine's PyTorch extension (sdist transformer-engine-torch) into /wheels.
# The core library comes as the transformer-engine-cuXX wheel; only the extension is built here,
# against the torch of this image, so the two always share one ABI.
# Inputs (env): TE_VERSION, CUDA_MAJOR, NVTE_CUDA_ARCHS, and CROSS_TOOLCHAIN where the Dockerfile mounts a cross
# compiler; the compile jobs are planned here (compile-jobs.sh: this builder's CPUs and memory, or the build's
# explicit values).
set -eu
: "${TE_VERSION:?}" "${CUDA_MAJOR:?}" "${NVTE_CUDA_ARCHS:?}"
plan="$(sh "$(dirname "$0")/compile-jobs.sh" te)"
eval "$plan"
export MAX_JOBS NVCC_THREADS NVTE_BUILD_THREADS_PER_JOB
echo "build-te: $(echo "$plan" | grep '^#' | cut -c3-)"
site="$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
# CUDA headers and libraries from torch's pip packages and the nvcc/cccl packages of the builder.
# CUDA 13's wheels share nvidia/cu13, nvcc included. CUDA 12's nvcc wheel (nvidia/cuda_nvcc) holds the
# compiler's headers (crt/) and ptxas but no nvcc driver; TE's extension is C++ only (no .cu sources), so
# that folder serves as CUDA_HOME there. Else an nvcc on PATH (the cuda flavor's toolkit).
cuda_home="$site/nvidia/cu${CUDA_MAJOR}"
[ -x "$cuda_home/bin/nvcc" ] || [ ! -d "$site/nvidia/cuda_nvcc/include/crt" ] || cuda_home="$site/nvidia/cuda_nvcc"
[ -d "$cuda_home" ] || cuda_home="$(dirname "$(dirname "$(command -v nvcc)")")"
# Sorted: ccache hashes CPLUS_INCLUDE_PATH, and find's order may change when the builder is rebuilt.
includes="$(find "$site/nvidia" -mindepth 2 -maxdepth 3 -type d -name include | sort | tr '\n' ':')"
libs="$(find "$site/nvidia" -mindepth 2 -maxdepth 3 -type d -name lib | sort | tr '\n' ':')"
export CUDA_HOME="$cuda_home" CUDA_PATH="$cuda_home"
export CPLUS_INCLUDE_PATH="${includes}${CPLUS_INCLUDE_PATH:-}" LIBRARY_PATH="${libs}${LIBRARY_PATH:-}"
export LD_LIBRARY_PATH="${libs}${LD_LIBRARY_PATH:-}"
# The link step asks for -lcudart and friends; CUDA 12's wheels ship only versioned names (libcudart.so.12).
# Unversioned links to them, in a scratch folder of this build step, let the linker find them.
links="$(mktemp -d)"
for lib in $(echo "$libs" | tr ':' ' '); do
  for versioned in "$lib"/lib*.so.[0-9]*; do
    [ -e "$versioned" ] || continue
    plain="$links/$(basename "$versioned" | sed 's/\.so\..*/.so/')"
    [ -e "$lib/$(basename "$plain")" ] || [ -e "$plain" ] || ln -s "$versioned" "$plain"
  done
done
export LIBRARY_PATH="${links}:${LIBRARY_PATH}"
# An emulated builder (another platform's image made under QEMU) compiles with the native cross compiler
# of the stage mounted at CROSS_TOOLCHAIN when it has one (the Dockerfile's cross-gxx); else with its g++.
if [ -n "${CROSS_TOOLCHAIN:-}" ]; then
  cross_bin="$(mktemp -d)"
  cross="$(sh "$(dirname "$0")/cross-compiler.sh" "$CROSS_TOOLCHAIN" "$cross_bin")"
  if [ -n "$cross" ]; then
    echo "build-te: $cross"
    export PATH="$cross_bin:$PATH"
  fi
fi
# The extension's C++ is what takes the time: compile it through ccache. torch's ninja build calls $CXX
# (default `c++`, which Debian's ccache does not link), so name g++, whose ccache link is first on
# PATH. CCACHE_BASEDIR (the Dockerfile's ENV) makes pip's random build folder under /tmp relative.
[ -d /usr/lib/ccache ] && export PATH="/usr/lib/ccache:$PATH"
export CC=gcc CXX=g++
ccache --zero-stats >/dev/null 2>&1 || true
export CUDNN_HOME="$site/nvidia/cudnn" NVTE_FRAMEWORK=pytorch NVTE_PYTORCH_FORCE_BUILD=TRUE NVTE_NO_LOCAL_VERSION=1
MCORE_REAL_NVCC="$cuda_home/bin/nvcc"
PYTORCH_NVCC="$(dirname "$0")/nvcc-retry.sh"
export MCORE_REAL_NVCC PYTORCH_NVCC
export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-}"
echo "build-te: TE ${TE_VERSION}, CUDA_HOME=${cuda_home}, MAX_JOBS=${MAX_JOBS}," \
  "NVTE_BUILD_THREADS_PER_JOB=${NVTE_BUILD_THREADS_PER_JOB:-1}, NVTE_CUDA_ARCHS=${NVTE_CUDA_ARCHS}"
start=$(date +%s)
sh "$(dirname "$0")/pip.sh" wheel --no-build-isolation --no-deps --no-cache-dir -w /wheels \
  "transformer-engine-torch==${TE_VERSION}"
echo "build-te: built in $(( $(date +%s) - start )) s"
ccache --show-stats 2>/dev/null | sed 's/^/build-te: ccache: /' || true
