# mcore-images: layered Megatron-Core training images.
#
#   base     OS + Python + PyTorch (from the flavor's base image, or PyPI)
#   kernels  + Transformer Engine (PyTorch extension compiled here) and apex, built as wheels
#   runtime  + megatron-core, mbridge, Megatron-Bridge from a hashed lock; env; the tooling (smoke
#            programs, doctor) as the project's wheel in the venv
#   app      + verl
#
# Every version arrives as a build arg from docker-bake.hcl, which reads env/stacks.json; this file
# holds no version. Python packages come from the hashed locks in env/locks/<stack>/<layer>.txt
# (the named context `locks`), installed with --no-deps so no layer can re-resolve torch.
# Each step mounts only the files it reads, so that changing one layer's lock or helper script
# leaves the cache of the layers below it valid (a megatron-core bump rebuilds only `runtime`).
# The stages below runtime know the stack only as LAYERS_STACK, the stack whose base and kernels they
# build: a stack that takes those layers from another (`layers_from`) shares their cache, builder included.
# Without bake: docker build --build-context locks=env/locks --build-context apex=docker/empty, and the compile
# steps' job planner as the secrets docker-bake.hcl's _common target names (--secret id=compile_jobs,src=...) ...
# Builds with the BuildKit embedded in the Docker Engine: no syntax directive on purpose.

ARG BASE_IMAGE
ARG FLAVOR=debian

# ---------------------------------------------------------------------------------------------
# OS stages, one per flavor: each ends with a Python virtualenv at /opt/venv.
FROM ${BASE_IMAGE} AS os-debian
ARG PYTHON_VERSION
ARG CUDA_VERSION
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# Versions of Debian packages come with the pinned suite of the locally built base.
# hadolint ignore=DL3008
RUN --mount=type=bind,source=docker/install-rdma.sh,target=/mnt/build/install-rdma.sh \
    apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      python3 python3-venv ca-certificates libgomp1 \
 && /mnt/build/install-rdma.sh \
 && rm -rf /var/lib/apt/lists/* \
 && python3 -m venv /opt/venv
# What NVIDIA's CUDA images set: without them the NVIDIA Container Toolkit exposes no GPU to a container
# started without --gpus (enroot/pyxis, --runtime=nvidia), and a driver too old for this CUDA is refused
# at start with a clear message instead of failing at the first kernel.
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    NVIDIA_REQUIRE_CUDA=cuda>=${CUDA_VERSION}

FROM ${BASE_IMAGE} AS os-cuda
ARG PYTHON_VERSION
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# hadolint ignore=DL3008
RUN --mount=type=bind,source=docker/install-rdma.sh,target=/mnt/build/install-rdma.sh \
    apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      "python${PYTHON_VERSION}" "python${PYTHON_VERSION}-venv" ca-certificates \
 && /mnt/build/install-rdma.sh \
 && rm -rf /var/lib/apt/lists/* \
 && "python${PYTHON_VERSION}" -m venv /opt/venv

FROM ${BASE_IMAGE} AS os-ngc
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# NGC ships torch, Transformer Engine and apex in its system Python; the venv sees them.
RUN python3 -m venv --system-site-packages /opt/venv
# NGC (since 25.03) points PIP_CONSTRAINT at /etc/pip/constraint.txt, which pins its system packages for
# every pip install. Our layers install hashed locks with --no-deps that never list what NGC provides
# (the ngc stack's locks are resolved around it: tests/unit/mcore_images/resolve/test_locks_ngc.py), so the
# constraint could only refuse a lock it has not seen; it is turned off here, as Megatron-LM's NGC
# Dockerfile does, until the runtime stage points PIP_CONSTRAINT at the image's own constraints (every flavor's).
ENV PIP_CONSTRAINT=

# The lock installer and the two scripts it calls (docker/install-lock.sh, pip.sh, pip-check.py) as one folder:
# every install step mounts it at /mnt/install instead of three files each. Its content is each such step's
# cache key, as the three mounts were.
FROM scratch AS install-scripts
COPY docker/install-lock.sh docker/pip.sh docker/pip-check.py /

# ---------------------------------------------------------------------------------------------
# The flavor picks one of the OS stages above (a stage name, not a registry image).
# hadolint ignore=DL3006
FROM os-${FLAVOR} AS base
ARG LAYERS_STACK
ARG PYTHON_VERSION
ARG TORCH_VERSION
ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:${PATH} \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN --mount=type=bind,from=install-scripts,target=/mnt/install \
    --mount=type=bind,source=docker/check-version.sh,target=/mnt/build/check-version.sh \
    --mount=type=bind,from=locks,source=${LAYERS_STACK}/base.txt,target=/mnt/lock.txt \
    --mount=type=secret,id=ca_bundle,required=false \
    --mount=type=secret,id=pip_index_url,required=false \
    --mount=type=cache,target=/root/.cache/pip,sharing=locked \
    /mnt/install/install-lock.sh /mnt/lock.txt \
 && /mnt/build/check-version.sh python "${PYTHON_VERSION}" \
 && /mnt/build/check-version.sh torch "${TORCH_VERSION}"

# ---------------------------------------------------------------------------------------------
# Toolchain for the CUDA extensions. Nothing from here reaches a published layer except the
# wheels in /wheels.
FROM base AS builder
ARG LAYERS_STACK
ARG FLAVOR
# hadolint ignore=DL3008
RUN if [ "${FLAVOR}" != ngc ]; then \
      apt-get update \
      && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
           g++ "python3-dev" ninja-build ccache git \
      && rm -rf /var/lib/apt/lists/*; \
    fi
RUN --mount=type=bind,from=install-scripts,target=/mnt/install \
    --mount=type=bind,from=locks,source=${LAYERS_STACK}/builder.txt,target=/mnt/lock.txt \
    --mount=type=secret,id=ca_bundle,required=false \
    --mount=type=secret,id=pip_index_url,required=false \
    --mount=type=cache,target=/root/.cache/pip,sharing=locked \
    /mnt/install/install-lock.sh /mnt/lock.txt

# A C/C++ cross compiler that runs at the build machine's speed, for a builder of another platform that runs
# under QEMU (linux/arm64 made on x86_64): Debian's g++ for aarch64 from the same OS base, so its GCC is the
# target's. The compile step mounts it (docker/cross-compiler.sh); a native builder mounts an empty stage.
# The stage is picked by BuildKit's platform args, so a native build never builds the toolchain.
FROM --platform=${BUILDPLATFORM} ${BASE_IMAGE} AS cross-gxx-toolchain
# hadolint ignore=DL3008
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends g++-aarch64-linux-gnu \
 && rm -rf /var/lib/apt/lists/*
FROM scratch AS cross-gxx-none
FROM cross-gxx-toolchain AS cross-gxx-arm64-on-amd64
FROM cross-gxx-none AS cross-gxx-amd64-on-amd64
FROM cross-gxx-none AS cross-gxx-arm64-on-arm64
FROM cross-gxx-none AS cross-gxx-amd64-on-arm64
# hadolint ignore=DL3006
FROM cross-gxx-${TARGETARCH}-on-${BUILDARCH} AS cross-gxx

# Each compiled component makes its wheels in a stage of its own, FROM builder, that declares only the build args
# of its compile: BuildKit keys a RUN on every ARG its stage declared before it, so an apex bump stays out of
# TE's key. A compile step's inputs are what changes what it makes (tests/unit/repo/test_dockerfile.py holds
# each step's mounts and args to that list); how many jobs compile it is not among them. Those jobs are planned
# inside the step, from the builder's own CPUs, cgroup and memory, per component: docker/compile-jobs.sh runs
# the planner (`mcore-images jobs`: mcore_images/image_build/jobs.py and the modules it imports), all of which
# arrive as build secrets, as an explicit MAX_JOBS / NVCC_THREADS does (it wins over the plan). BuildKit keeps a
# secret out of the step's cache key, so editing, moving or renaming the tooling's code recompiles nothing.
# The stages may start at once; their shared ccache mount (sharing=locked) lets one compile run at a time, so
# each plans its jobs for the whole machine.
FROM builder AS te-build
ARG CUDA_VERSION
ARG TE_VERSION
ARG TE_SOURCE
ARG CUDA_ARCHS
# ccache keys on relative paths below /tmp (pip builds each sdist in a new random folder there) and
# leaves the working folder out of the hash, so a recompile of the same sources hits.
ENV NVTE_CUDA_ARCHS=${CUDA_ARCHS} \
    CCACHE_DIR=/root/.ccache \
    CCACHE_BASEDIR=/tmp \
    CCACHE_NOHASHDIR=1
RUN --mount=type=bind,source=docker/build-te.sh,target=/mnt/build/build-te.sh \
    --mount=type=bind,source=docker/pip.sh,target=/mnt/build/pip.sh \
    --mount=type=bind,source=docker/nvcc-retry.sh,target=/mnt/build/nvcc-retry.sh \
    --mount=type=bind,source=docker/cross-compiler.sh,target=/mnt/build/cross-compiler.sh \
    --mount=type=bind,from=cross-gxx,target=/mnt/cross-gxx \
    --mount=type=secret,id=compile_jobs,target=/mnt/build/compile-jobs.sh,required=true \
    --mount=type=secret,id=planner_errors,target=/mnt/planner/mcore_images/errors.py,required=true \
    --mount=type=secret,id=planner_command,target=/mnt/planner/mcore_images/command.py,required=true \
    --mount=type=secret,id=planner_jobs,target=/mnt/planner/mcore_images/image_build/jobs.py,required=true \
    --mount=type=secret,id=max_jobs,required=false \
    --mount=type=secret,id=nvcc_threads,required=false \
    --mount=type=secret,id=ca_bundle,required=false \
    --mount=type=secret,id=pip_index_url,required=false \
    --mount=type=cache,target=/root/.ccache,sharing=locked \
    mkdir -p /wheels \
 && if [ "${TE_SOURCE}" = build ]; then \
      TE_VERSION="${TE_VERSION}" CUDA_MAJOR="${CUDA_VERSION%%.*}" CROSS_TOOLCHAIN=/mnt/cross-gxx \
        /mnt/build/build-te.sh; \
    fi

# apex from its git source at a pinned commit; an air-gapped site passes the source as the
# named context `apex` (docker buildx bake --set <target>.contexts.apex=<dir>).
FROM builder AS apex-build
ARG CUDA_VERSION
ARG APEX_COMMIT
ARG CUDA_ARCHS
ENV NVTE_CUDA_ARCHS=${CUDA_ARCHS} \
    CCACHE_DIR=/root/.ccache \
    CCACHE_BASEDIR=/tmp \
    CCACHE_NOHASHDIR=1
RUN --mount=type=bind,source=docker/build-apex.sh,target=/mnt/build/build-apex.sh \
    --mount=type=bind,source=docker/pip.sh,target=/mnt/build/pip.sh \
    --mount=type=bind,source=docker/nvcc-retry.sh,target=/mnt/build/nvcc-retry.sh \
    --mount=type=bind,from=apex,target=/src/apex,rw \
    --mount=type=secret,id=compile_jobs,target=/mnt/build/compile-jobs.sh,required=true \
    --mount=type=secret,id=planner_errors,target=/mnt/planner/mcore_images/errors.py,required=true \
    --mount=type=secret,id=planner_command,target=/mnt/planner/mcore_images/command.py,required=true \
    --mount=type=secret,id=planner_jobs,target=/mnt/planner/mcore_images/image_build/jobs.py,required=true \
    --mount=type=secret,id=max_jobs,required=false \
    --mount=type=secret,id=nvcc_threads,required=false \
    --mount=type=cache,target=/root/.ccache,sharing=locked \
    mkdir -p /wheels \
 && if [ "${APEX_COMMIT}" != none ]; then \
      APEX_COMMIT="${APEX_COMMIT}" CUDA_MAJOR="${CUDA_VERSION%%.*}" /mnt/build/build-apex.sh /src/apex; \
    fi

# Gradient accumulation fusion without apex: with it on (Megatron-LM's, Megatron-Bridge's and verl's default),
# megatron-core imports apex's fused_weight_gradient_mlp_cuda; a stack without apex gets that module over TE's GEMM
# (kernels/wgrad-fusion: pure Python, nothing to compile). A stack with apex keeps apex's own. A stage of its own,
# so that apex's compile step keeps its cache key.
FROM builder AS wgrad-fusion-build
ARG APEX_COMMIT
RUN --mount=type=bind,source=kernels/wgrad-fusion,target=/src/wgrad-fusion,rw \
    --mount=type=bind,source=docker/pip.sh,target=/mnt/build/pip.sh \
    mkdir -p /wheels \
 && if [ "${APEX_COMMIT}" = none ]; then \
      sh /mnt/build/pip.sh wheel --no-deps --no-build-isolation --no-index -w /wheels /src/wgrad-fusion; \
    fi

# The compiled wheels, together: what the kernels layer installs.
FROM builder AS kernels-build
COPY --from=te-build /wheels /wheels
COPY --from=apex-build /wheels /wheels
COPY --from=wgrad-fusion-build /wheels /wheels

# The tooling (mcore_images and the smoke programs) as the project's own wheel, for the runtime
# layer's venv: `mcore-images`, `python -m mcore_images.smoke` and `python -m mcore_images doctor` work in the
# image's Python and nowhere else (no global PYTHONPATH).
FROM builder AS tooling-build
RUN --mount=type=bind,source=pyproject.toml,target=/src/pyproject.toml \
    --mount=type=bind,source=README.md,target=/src/README.md \
    --mount=type=bind,source=src/mcore_images,target=/src/src/mcore_images \
    --mount=type=bind,source=docker/pip.sh,target=/mnt/build/pip.sh \
    sh /mnt/build/pip.sh wheel --no-deps --no-build-isolation --no-index -w /tooling /src

# ---------------------------------------------------------------------------------------------
FROM base AS kernels
ARG LAYERS_STACK
ARG TE_VERSION
RUN --mount=type=bind,from=install-scripts,target=/mnt/install \
    --mount=type=bind,source=docker/link-nvidia-libs.sh,target=/mnt/build/link-nvidia-libs.sh \
    --mount=type=bind,source=docker/check-version.sh,target=/mnt/build/check-version.sh \
    --mount=type=bind,from=locks,source=${LAYERS_STACK}/kernels.txt,target=/mnt/lock.txt \
    --mount=type=bind,from=kernels-build,source=/wheels,target=/wheels \
    --mount=type=secret,id=ca_bundle,required=false \
    --mount=type=secret,id=pip_index_url,required=false \
    --mount=type=cache,target=/root/.cache/pip,sharing=locked \
    /mnt/install/install-lock.sh /mnt/lock.txt /wheels \
 && /mnt/build/link-nvidia-libs.sh \
 && /mnt/build/check-version.sh transformer-engine "${TE_VERSION}"

# ---------------------------------------------------------------------------------------------
FROM kernels AS runtime
ARG FLAVOR
ARG PYTHON_VERSION
ARG GCC_VERSION
# The run-time toolchain (a C/C++ compiler, make, the Python headers): Triton compiles its launcher on the
# first kernel launch, torch.compile (megatron-core's jit_fuser fusions) and torch.utils.cpp_extension
# compile at run time. Before the lock, so a megatron-core bump keeps this layer cached: every RUN after an
# ARG has that ARG in its cache key, so the stack and megatron-core are declared below it.
RUN --mount=type=bind,source=docker/install-toolchain.sh,target=/mnt/build/install-toolchain.sh \
    /mnt/build/install-toolchain.sh "${FLAVOR}" "${PYTHON_VERSION}" "${GCC_VERSION}"
ARG STACK
ARG MCORE_VERSION
RUN --mount=type=bind,from=install-scripts,target=/mnt/install \
    --mount=type=bind,source=docker/check-version.sh,target=/mnt/build/check-version.sh \
    --mount=type=bind,source=docker/megatron-datasets.mk,target=/mnt/build/megatron-datasets.mk \
    --mount=type=bind,from=locks,source=${STACK}/runtime.txt,target=/mnt/lock.txt \
    --mount=type=secret,id=ca_bundle,required=false \
    --mount=type=secret,id=pip_index_url,required=false \
    --mount=type=cache,target=/root/.cache/pip,sharing=locked \
    /mnt/install/install-lock.sh /mnt/lock.txt \
 && /mnt/build/check-version.sh megatron-core "${MCORE_VERSION}" \
 && datasets="$(python -c 'import importlib.util as u, os; print(os.path.join(os.path.dirname(u.find_spec("megatron.core").origin), "datasets"))')" \
 && { [ -f "$datasets/Makefile" ] || cp /mnt/build/megatron-datasets.mk "$datasets/Makefile"; }
# Megatron needs one CUDA work queue for TP/CP overlap ordering on pre-Blackwell GPUs; NVLink
# multicast stays off unless a site turns it on (it can take shared hosts' GPUs down).
# MCORE_IMAGES_ROOT holds the data the tooling reads (the pins, the bench baselines).
ENV CUDA_DEVICE_MAX_CONNECTIONS=1 \
    NCCL_NVLS_ENABLE=0 \
    TORCH_SYMM_MEM_DISABLE_MULTICAST=1 \
    NVSHMEM_DISABLE_NVLS=1 \
    TORCH_NCCL_ASYNC_ERROR_HANDLING=3 \
    PYTHONUNBUFFERED=1 \
    MCORE_IMAGES_STACK=${STACK} \
    MCORE_IMAGES_ROOT=/opt/mcore-images
RUN --mount=type=bind,from=tooling-build,source=/tooling,target=/tooling \
    --mount=type=bind,from=install-scripts,target=/mnt/install \
    --mount=type=bind,from=locks,source=${STACK}/runtime.txt,target=/mnt/lock.txt \
    sh /mnt/install/pip.sh install --no-deps --no-index --no-cache-dir /tooling/*.whl \
 && python /mnt/install/pip-check.py /mnt/lock.txt \
 && mkdir -p /opt/mcore-images \
 && python -m mcore_images.catalogue.constraints > /opt/mcore-images/constraints.txt
COPY env/stacks.json env/stacks.schema.json env/bench-baselines.json /opt/mcore-images/env/
# A job's `pip install` on this image cannot move torch, TE, megatron-core or their CUDA libraries.
ENV PIP_CONSTRAINT=/opt/mcore-images/constraints.txt
WORKDIR /workspace

# ---------------------------------------------------------------------------------------------
FROM runtime AS app
# The app lock was resolved on top of the runtime's pins; it installs without the jobs' constraints, then
# writes them again with verl and its rollout engine held too.
ARG STACK
ARG TORCH_VERSION
ARG VERL_VERSION
ARG VLLM_VERSION
ARG SGLANG_VERSION
RUN --mount=type=bind,from=install-scripts,target=/mnt/install \
    --mount=type=bind,source=docker/check-version.sh,target=/mnt/build/check-version.sh \
    --mount=type=bind,from=locks,source=${STACK}/app.txt,target=/mnt/lock.txt \
    --mount=type=secret,id=ca_bundle,required=false \
    --mount=type=secret,id=pip_index_url,required=false \
    --mount=type=cache,target=/root/.cache/pip,sharing=locked \
    PIP_CONSTRAINT='' /mnt/install/install-lock.sh /mnt/lock.txt \
 && /mnt/build/check-version.sh verl "${VERL_VERSION}" \
 && /mnt/build/check-version.sh vllm "${VLLM_VERSION}" \
 && /mnt/build/check-version.sh sglang "${SGLANG_VERSION}" \
 && /mnt/build/check-version.sh torch "${TORCH_VERSION}" \
 && python -m mcore_images.catalogue.constraints > /opt/mcore-images/constraints.txt
