#!/bin/sh
# Plan the compile jobs of one component inside the compile step, from this builder's own CPUs,
# cgroup limits and memory: prints MAX_JOBS=, NVCC_THREADS=, NVTE_BUILD_THREADS_PER_JOB= lines (and
# the planner's reason as a comment) for the caller to eval.
#   compile-jobs.sh COMPONENT        (te, apex: each has its own memory model in mcore_images/image_build/jobs.py)
# Inputs: NVTE_CUDA_ARCHS (its count of architectures); /run/secrets/max_jobs and
# /run/secrets/nvcc_threads, present when the build was given explicit values (they win: `mcore-images
# build` has already judged them against this machine's memory, FORCE included, before bake started).
# This script and the planner's modules below /mnt/planner reach the compile step as build secrets
# (docker-bake.hcl's _common target passes them; the step requires them), so they stay out of its cache key.
set -eu
component="$1"
archs="$(printf '%s\n' "${NVTE_CUDA_ARCHS:-90}" | tr ';' '\n' | grep -c .)"
set -- --component "$component" --archs "$archs" --env --force
if [ -s /run/secrets/max_jobs ]; then set -- "$@" --max-jobs "$(cat /run/secrets/max_jobs)"; fi
if [ -s /run/secrets/nvcc_threads ]; then set -- "$@" --nvcc-threads "$(cat /run/secrets/nvcc_threads)"; fi
PYTHONPATH=/mnt/planner PYTHONDONTWRITEBYTECODE=1 python -m mcore_images.image_build.jobs "$@"
