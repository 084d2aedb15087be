#!/usr/bin/env bash
# Make room for a CI run on the disk that CI's own Docker Engine (.ci/docker-engine.sh) and local
# registry (.ci/registry.sh) write to. A machine that runs CI again and again keeps their state, and a
# build that runs out of space fails late, while unpacking a layer. This deletes only what those two
# made, cheapest loss first, and stops as soon as enough is free:
#
#   1. the CI registry's images in the engine other than this commit's candidates (earlier commits'
#      candidates, the public tags an earlier run pulled back) and untagged images: the run rebuilds or
#      pulls what it needs;
#   2. build records of the engine that were not used recently, down to $MCORE_CI_KEEP_CACHE_GIB
#      (cache mounts such as ccache and pip stay, so a rebuild stays cheap);
#   3. every build record, cache mounts still kept (a rebuild runs every step, with ccache's hits);
#   4. the cache mounts too (the next build is cold);
#   5. the local registry's storage (the release path pushes it again).
#
#   .ci/disk.sh [ensure]   free at least $MCORE_CI_FREE_GIB GiB (default 40) on the engine's filesystem
#   .ci/disk.sh show       print what is free and what the engine holds
#
# Still short after step 5, it exits 2 with what is free and what is needed: the rest of the disk is
# not this project's to delete.
set -euo pipefail
cd "$(dirname "$0")/.."

NEED_GIB="${MCORE_CI_FREE_GIB:-40}"
KEEP_CACHE_GIB="${MCORE_CI_KEEP_CACHE_GIB:-30}"
ENGINE_STATE="${MCORE_DOCKER_STATE:-/var/lib/mcore-images-docker}"
REGISTRY="127.0.0.1:${MCORE_REGISTRY_PORT:-5000}"
REPO="${IMAGE_REPO:-mcore-images}"

log() { printf '[disk] %s\n' "$*" >&2; }

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

# Images this engine holds under the CI registry's repository, but for this commit's candidates.
stale_images() {
  local sha="$1"
  docker image ls --format '{{.Repository}}:{{.Tag}}' --filter "reference=$REGISTRY/$REPO:*" \
    | grep -v -F ":candidate-$sha-" || true
}

ensure() {
  enough "nothing (no deletion needed)" && return 0
  docker info >/dev/null 2>&1 || {
    log "error: $(free_gib) GiB free, $NEED_GIB needed, and the CI engine does not answer; start it with .ci/docker-engine.sh"
    exit 2
  }
  local sha stale
  sha="$(git rev-parse HEAD)"
  mapfile -t stale < <(stale_images "$sha")
  if ((${#stale[@]})); then
    log "removing ${#stale[@]} image tag(s) of $REGISTRY/$REPO from earlier runs"
    docker image rm "${stale[@]}" >/dev/null
  fi
  docker image prune -f >/dev/null
  enough "removing earlier runs' images and untagged images" && return 0

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

  log "error: $(free_gib) GiB free on the disk of $ENGINE_STATE, $NEED_GIB needed, and nothing of this project's is left to delete; free space outside it or set MCORE_CI_FREE_GIB"
  exit 2
}

show() {
  log "$(free_gib) GiB free on the disk of $ENGINE_STATE (a run needs $NEED_GIB)"
  docker system df 2>/dev/null || log "the CI engine does not answer"
}

case "${1:-ensure}" in
  ensure) ensure ;;
  show) show ;;
  *) log "error: unknown command '$1'; use ensure or show"; exit 2 ;;
esac
