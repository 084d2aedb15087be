# mcore-images bake definition: stacks × layers.
#
# The stacks and every version come from env/stacks.json (variable STACKS), which bake reads
# through the docker-bake.json link next to this file. Nothing here pins a version.
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

# Parallel compile jobs for TE / apex; empty: set by `mcore-images jobs` (make build does this).
variable "MAX_JOBS" {
  default = "1"
}

# nvcc --threads per compile job (TE's NVTE_BUILD_THREADS_PER_JOB); helps only with several archs.
variable "NVCC_THREADS" {
  default = "1"
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
# Tag scheme: the tag tells the contents. Mirrored by src/mcore_images/tags.py (a test compares them).

# ngc26.06 / cuda13.0.2 / debian-trixie: where the base comes from.
function "origin" {
  params = [s]
  result = (s.flavor == "ngc"
    ? "ngc${regex(":([0-9]+[.][0-9]+)", s.base_image)[0]}"
    : (s.flavor == "cuda"
      ? "cuda${regex(":([0-9]+[.][0-9]+[.][0-9]+)", s.base_image)[0]}"
  : "debian-${s.debian_suite}"))
}

function "platform" {
  params = [s]
  result = "torch${s.torch}-cu${s.cuda}-py${s.python}-${origin(s)}"
}

function "apex_short" {
  params = [s]
  result = length(regexall("^[0-9a-f]{40}$", s.apex)) > 0 ? substr(s.apex, 0, 8) : s.apex
}

function "layer_tag" {
  params = [layer, s]
  result = (layer == "base" ? "base-${platform(s)}"
    : (layer == "kernels" ? "kernels-te${s.te}-apex${apex_short(s)}-${platform(s)}"
      : (layer == "runtime" ? "runtime-mcore${s.mcore}-te${s.te}-${platform(s)}"
  : "app-verl${s.verl}-mcore${s.mcore}-te${s.te}-${platform(s)}")))
}

function "image" {
  params = [tag]
  result = REGISTRY == "" ? "${IMAGE_REPO}:${tag}" : "${REGISTRY}/${IMAGE_REPO}:${tag}"
}

function "tags" {
  params = [layer, s]
  result = [image(layer_tag(layer, s)), image("${layer}-${s.name}")]
}

# Versions each layer adds, as labels (children inherit their parents' labels).
function "layer_labels" {
  params = [layer, s]
  result = merge(
    {
      "io.mcore-images.layer"  = layer
      "io.mcore-images.stack"  = s.name
      "io.mcore-images.flavor" = s.flavor
      "io.mcore-images.base"   = s.base_image
      "io.mcore-images.python" = s.python
      "io.mcore-images.cuda"   = s.cuda
      "io.mcore-images.torch"  = s.torch
      "io.mcore-images.size-budget-gb" = "${s.size_budget_gb[layer]}"
      "org.opencontainers.image.title"       = "mcore-images ${layer} (${s.name})"
      "org.opencontainers.image.description" = s.description
      "org.opencontainers.image.version"     = layer_tag(layer, s)
      "org.opencontainers.image.revision"    = GIT_SHA
      "org.opencontainers.image.base.name"   = s.base_image
    },
    layer == "base" ? {} : {
      "io.mcore-images.te"   = s.te
      "io.mcore-images.apex" = s.apex
    },
    layer == "base" || layer == "kernels" ? {} : {
      "io.mcore-images.mcore"           = s.mcore
      "io.mcore-images.mbridge"         = s.mbridge
      "io.mcore-images.megatron-bridge" = s.megatron_bridge
    },
    layer == "app" ? { "io.mcore-images.verl" = s.verl } : {},
  )
}

# ---------------------------------------------------------------------------------------------
target "_common" {
  dockerfile = "Dockerfile"
  context    = "."
  secret = compact([
    CA_BUNDLE == "" ? "" : "id=ca_bundle,src=${CA_BUNDLE}",
    PIP_INDEX_URL_FILE == "" ? "" : "id=pip_index_url,src=${PIP_INDEX_URL_FILE}",
  ])
  cache-from = compact([CACHE_FROM])
  cache-to   = compact([CACHE_TO])
}

function "stack_args" {
  params = [s]
  result = {
    STACK          = s.name
    FLAVOR         = s.flavor
    BASE_IMAGE     = s.base_digest == "" ? s.base_image : "${s.base_image}@${s.base_digest}"
    PYTHON_VERSION = s.python
    CUDA_VERSION   = s.cuda
    TORCH_VERSION  = s.torch
    TE_VERSION     = s.te
    TE_SOURCE      = s.te_source
    APEX_COMMIT    = s.apex
    CUDA_ARCHS     = s.cuda_archs
    MAX_JOBS       = MAX_JOBS
    NVCC_THREADS   = NVCC_THREADS
    MCORE_VERSION  = s.mcore
    VERL_VERSION   = s.verl
  }
}

# The apex source: its git repository at the pinned commit, or an empty folder.
function "apex_context" {
  params = [s]
  result = length(regexall("^[0-9a-f]{40}$", s.apex)) > 0 ? "https://github.com/NVIDIA/apex.git#${s.apex}" : "docker/empty"
}

target "base" {
  inherits = ["_common"]
  matrix   = { s = STACKS }
  name     = "base-${s.name}"
  target   = "base"
  args     = stack_args(s)
  contexts = { apex = apex_context(s), locks = LOCKS }
  tags     = tags("base", s)
  labels   = layer_labels("base", s)
}

target "kernels" {
  inherits = ["_common"]
  matrix   = { s = STACKS }
  name     = "kernels-${s.name}"
  target   = "kernels"
  args     = stack_args(s)
  contexts = { base = "target:base-${s.name}", apex = apex_context(s), locks = LOCKS }
  tags     = tags("kernels", s)
  labels   = layer_labels("kernels", s)
}

target "runtime" {
  inherits = ["_common"]
  matrix   = { s = STACKS }
  name     = "runtime-${s.name}"
  target   = "runtime"
  args     = stack_args(s)
  contexts = { kernels = "target:kernels-${s.name}", apex = apex_context(s), locks = LOCKS }
  tags     = tags("runtime", s)
  labels   = layer_labels("runtime", s)
}

target "app" {
  inherits = ["_common"]
  matrix   = { s = [for s in STACKS : s if s.verl != "none"] }
  name     = "app-${s.name}"
  target   = "app"
  args     = stack_args(s)
  contexts = { runtime = "target:runtime-${s.name}", apex = apex_context(s), locks = LOCKS }
  tags     = tags("app", s)
  labels   = layer_labels("app", s)
}

# ---------------------------------------------------------------------------------------------
# Groups. `default` and `ci` build the runtime layer (with its parents) of their stacks;
# `release` builds every layer of the release stacks; `all` every layer of every stack.
function "layer_targets" {
  params = [s]
  result = concat(["base-${s.name}", "kernels-${s.name}", "runtime-${s.name}"],
  s.verl == "none" ? [] : ["app-${s.name}"])
}

group "default" {
  targets = [for s in STACKS : "runtime-${s.name}" if contains(s.groups, "default")]
}

group "ci" {
  targets = [for s in STACKS : "runtime-${s.name}" if contains(s.groups, "ci")]
}

group "release" {
  targets = flatten([for s in STACKS : layer_targets(s) if contains(s.groups, "release")])
}

group "all" {
  targets = flatten([for s in STACKS : layer_targets(s)])
}
