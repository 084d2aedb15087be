# mcore-images bake definition: stacks × layers.
#
# Every target and group (their tags, labels, build args and contexts) is in docker-bake.json, next to this file,
# which `make update` writes from env/stacks.json and the component catalogue (src/mcore_images/image_build/
# bake_file.py). This file holds what bake sets when it runs: the variables below and the common target.
#
#   docker buildx bake --print            # the default group (runtime of the debian stack)
#   docker buildx bake runtime-debian     # one layer of one stack
#   docker buildx bake release --push     # use `make build GROUP=release`: it checks the rules first
#
# Each variable below can be set from the environment (MAX_JOBS=4 docker buildx bake ...).
# Descriptions are comments because the bake of buildx 0.13 has no `description` attribute.

# Registry prefix for every tag (e.g. ghcr.io/acme); empty: local names only.
variable "REGISTRY" {
  default = ""
}

# Repository name under REGISTRY.
variable "IMAGE_REPO" {
  default = "mcore-images"
}

# Parallel compile jobs for TE / apex; empty: planned inside each compile step from the builder's own
# CPUs and memory. A value given here reaches the step as a build secret (outside its cache key).
variable "MAX_JOBS" {
  default = ""
}

# nvcc --threads per compile job (TE's NVTE_BUILD_THREADS_PER_JOB); empty: planned like MAX_JOBS.
variable "NVCC_THREADS" {
  default = ""
}

# A CA bundle for pip behind a TLS-intercepting proxy, passed as a build secret (never a layer).
variable "CA_BUNDLE" {
  default = ""
}

# A file holding a PyPI index URL (which may carry a token), passed as a build secret.
variable "PIP_INDEX_URL_FILE" {
  default = ""
}

# BuildKit cache import/export, e.g. "type=registry,ref=ghcr.io/acme/mcore-images:cache".
variable "CACHE_FROM" {
  default = ""
}
variable "CACHE_TO" {
  default = ""
}
# Dockerfile stages that run again without the build cache, comma-separated (`mcore-images reproduce` sets it to
# the layer it rebuilds: a digest taken from the cache shows the inputs are the same, a stage run again that its
# steps give the same bytes).
variable "NO_CACHE_FILTER" {
  default = ""
}

# The hashed per-layer locks (a named build context); `mcore-images build --set` points it at
# re-resolved locks for an overridden pin.
variable "LOCKS" {
  default = "env/locks"
}

# Source revision recorded in the OCI labels (CI passes the commit).
variable "GIT_SHA" {
  default = ""
}

# ---------------------------------------------------------------------------------------------
# An image name under REGISTRY and IMAGE_REPO: the one thing of a tag bake computes (the generated targets' tags
# call it; the tag itself is src/mcore_images/catalogue/tags.py's).
function "image" {
  params = [tag]
  result = REGISTRY == "" ? "${IMAGE_REPO}:${tag}" : "${REGISTRY}/${IMAGE_REPO}:${tag}"
}

# ---------------------------------------------------------------------------------------------
target "_common" {
  dockerfile = "Dockerfile"
  context    = "."
  secret = compact([
    # The compile steps' job planner: secrets stay out of a step's cache key, and how many jobs compile TE or apex
    # does not change what they make (the Dockerfile's te-build stage says more).
    "id=compile_jobs,src=docker/compile-jobs.sh",
    "id=planner_errors,src=src/mcore_images/errors.py",
    "id=planner_command,src=src/mcore_images/command.py",
    "id=planner_jobs,src=src/mcore_images/image_build/jobs.py",
    CA_BUNDLE == "" ? "" : "id=ca_bundle,src=${CA_BUNDLE}",
    PIP_INDEX_URL_FILE == "" ? "" : "id=pip_index_url,src=${PIP_INDEX_URL_FILE}",
    MAX_JOBS == "" ? "" : "id=max_jobs,env=MAX_JOBS",
    NVCC_THREADS == "" ? "" : "id=nvcc_threads,env=NVCC_THREADS",
  ])
  cache-from = compact([CACHE_FROM])
  cache-to   = compact([CACHE_TO])
  no-cache-filter = compact(split(",", NO_CACHE_FILTER))
  # No provenance attestation by default: it records the build's start time and a random invocation ID,
  # so the pushed digest would differ on every rebuild of one commit (`mcore-images reproduce` compares
  # them). The release workflow asks for SBOM and provenance explicitly (build.yml).
  attest = ["type=provenance,disabled=true"]
}
