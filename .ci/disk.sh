#!/usr/bin/env bash
# Make room for a CI run on the disk that CI's own Docker Engine (.ci/docker-engine.sh) and local
# registry (.ci/registry.sh) write to. A machine that runs CI again and again keeps their state, and a
# build that runs out of space fails late, while unpacking a layer. This deletes only what those two
# made, cheapest loss first, and stops as soon as enough is free:
#
#   1. the CI registry's images in the engine other than this commit's candidates (earlier commits'
#      candidates, the public tags an earlier run pulled back) and untagged images: the run rebuilds or
#      pulls what it needs;
#   2. the other layer images this project's builds tagged in the engine (every stack and platform,
#      the image tests' pins of them), known by their io.mcore-images.layer label: a rebuild of one
#      exports it again from its build records;
#   3. build records of the engine that were not used recently, down to $MCORE_CI_KEEP_CACHE_GIB
#      (cache mounts such as ccache and pip stay, so a rebuild stays cheap);
#   4. every build record, cache mounts still kept (a rebuild runs every step, with ccache's hits);
#   5. the cache mounts too (the next build is cold);
#   6. the local registry's storage (the release path pushes it again);
#   7. the debootstrap bases and the images made from them but not by a build (the report test's
#      browser), known by the io.mcore-images.base-recipe label (debootstrap runs again).
#
#   .ci/disk.sh [ensure]   free at least $MCORE_CI_FREE_GIB GiB (default 40) on the engine's filesystem
#   .ci/disk.sh show       print what is free, what the engine holds and which tags steps 1, 2 and 7 remove
#
# Still short after step 7, it exits 2 with what is free and what is needed: the rest of the disk is
# not this project's to delete (an image without the project's labels is never touched).
set -euo pipefail
# shellcheck source=.ci/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" disk  # log, die, install_host_packages
cd "$(dirname "$0")/.."

NEED_GIB="${MCORE_CI_FREE_GIB:-40}"
KEEP_CACHE_GIB="${MCORE_CI_KEEP_CACHE_GIB:-30}"
ENGINE_STATE="${MCORE_DOCKER_STATE:-/var/lib/mcore-images-docker}"
REGISTRY="127.0.0.1:${MCORE_REGISTRY_PORT:-5000}"
REPO="${IMAGE_REPO:-mcore-images}"


[[ "$NEED_GIB" =~ ^[0-9]+$ && "$KEEP_CACHE_GIB" =~ ^[0-9]+$ ]] || {
  log "error: MCORE_CI_FREE_GIB and MCORE_CI_KEEP_CACHE_GIB take whole GiB, e.g. MCORE_CI_FREE_GIB=40"
  exit 2
}

# Free GiB on the filesystem that holds the engine's data (the directory exists once the engine ran).
free_gib() {
  local dir="$ENGINE_STATE"
  [[ -d "$dir" ]] || dir=/
  df -P -B1G "$dir" | awk 'NR == 2 {print $4}'
}

enough() {
  local free
  free="$(free_gib)"
  if ((free >= NEED_GIB)); then
    log "$free GiB free (need $NEED_GIB) after: $1"
    return 0
  fi
  return 1
}

LAYER_LABEL=io.mcore-images.layer
RECIPE_LABEL=io.mcore-images.base-recipe
HEAD_SHA="$(git rev-parse HEAD)"

# References of the engine's images that match the docker filter "$1", but for this commit's
# candidates: repo:tag for a tagged image, repo@digest for one pulled by digest and never tagged.
tags_but_candidates() {
  docker image ls --digests --format '{{.Repository}} {{.Tag}} {{.Digest}}' --filter "$1" \
    | awk '$1 != "<none>" && $2 != "<none>" {print $1 ":" $2; next}
           $1 != "<none>" && $3 != "<none>" {print $1 "@" $3}' \
    | grep -v -e "^$REGISTRY/$REPO:candidate-$HEAD_SHA-" || true
}

# Each step's picks leave out the earlier steps' (an old candidate carries the layer label too).
stale_images() { tags_but_candidates "reference=$REGISTRY/$REPO"; }
layer_images() { tags_but_candidates "label=$LAYER_LABEL" | grep -v -x -F -f <(stale_images) || true; }
base_images() {
  tags_but_candidates "label=$RECIPE_LABEL" | grep -v -x -F -f <(stale_images; layer_images) || true
}

# Remove the references that "$1" lists (an image goes with its last tag), then the untagged images.
# One that a container still uses is kept and named: removing it would need --force, and the container
# is not this script's.
remove_tags() {
  local lister="$1" what="$2" tags ref kept=()
  mapfile -t tags < <("$lister")
  if ((${#tags[@]})); then
    log "removing ${#tags[@]} $what"
    for ref in "${tags[@]}"; do
      docker image rm "$ref" >/dev/null 2>&1 || kept+=("$ref")
    done
    ((${#kept[@]} == 0)) || log "kept ${#kept[@]} that a container uses: ${kept[*]}"
  fi
  docker image prune -f >/dev/null
}

ensure() {
  enough "nothing (no deletion needed)" && return 0
  docker info >/dev/null 2>&1 || {
    log "error: $(free_gib) GiB free, $NEED_GIB needed, and the CI engine does not answer; start it with .ci/docker-engine.sh"
    exit 2
  }
  remove_tags stale_images "image tag(s) of $REGISTRY/$REPO from earlier runs"
  enough "removing earlier runs' images and untagged images" && return 0

  remove_tags layer_images "other layer image tag(s) this project's builds made (label $LAYER_LABEL)"
  enough "removing the other layer images" && return 0

  log "pruning build records down to $KEEP_CACHE_GIB GiB (cache mounts stay)"
  docker builder prune -f --filter type=regular --keep-storage "${KEEP_CACHE_GIB}GB" >/dev/null
  enough "pruning build records to $KEEP_CACHE_GIB GiB" && return 0

  log "pruning every build record (cache mounts stay)"
  docker builder prune -f --filter type=regular >/dev/null
  enough "pruning every build record" && return 0

  log "pruning the cache mounts too (the next build is cold)"
  docker builder prune -af >/dev/null
  enough "pruning the whole build cache" && return 0

  log "purging the local registry's storage"
  bash .ci/registry.sh stop --purge
  enough "purging the local registry" && return 0

  remove_tags base_images "debootstrap base tag(s) and images made from them (label $RECIPE_LABEL)"
  enough "removing the debootstrap bases" && return 0

  log "error: $(free_gib) GiB free on the disk of $ENGINE_STATE, $NEED_GIB needed, and nothing of this project's is left to delete; free space outside it or set MCORE_CI_FREE_GIB"
  exit 2
}

show() {
  log "$(free_gib) GiB free on the disk of $ENGINE_STATE (a run needs $NEED_GIB)"
  docker system df 2>/dev/null || { log "the CI engine does not answer"; return 0; }
  local step lister
  for step in "1 stale_images" "2 layer_images" "7 base_images"; do
    lister="${step#* }"
    "$lister" | sed "s/^/[disk] step ${step%% *} removes /" >&2
  done
}

case "${1:-ensure}" in
  ensure) ensure ;;
  show) show ;;
  *) log "error: unknown command '$1'; use ensure or show"; exit 2 ;;
esac
