#!/usr/bin/env bash
# Run a command as a machine that never ran CI sees it, whatever this one has done before:
#   - PATH without the tools that CI's later phases install (the registry's oras, cosign and docker-registry,
#     skopeo, Slurm's commands, chromium): a test that finds one here would find none on a fresh machine;
#   - /proc/meminfo saying 1 GiB is available (a file bind-mounted over it in a private mount namespace): a test
#     that plans from the host's free memory of the moment fails here, every time, instead of on a busy day;
#   - a HOME, cache and tool state of its own, made empty for this run and removed after it (with docker's CLI
#     plugins, which the docker-engine setup phase installs, and nothing else of docker's configuration).
# `make test-unit` runs the unit tests through it. Needs unshare (util-linux) and mount namespaces: as root, or
# as a user where user namespaces are allowed.
#
#   .ci/clean-host.sh COMMAND [ARG...]
set -euo pipefail
# shellcheck source=.ci/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" clean-host  # log, die

HIDDEN=(oras cosign docker-registry skopeo srun sbatch salloc scancel squeue scontrol sinfo slurmctld
        slurmd munge munged chromium chromedriver)
AVAILABLE_KIB=$((1024 * 1024))

if (($# == 0)); then
  printf '[clean-host] error: %s\n' "give the command to run: .ci/clean-host.sh python3 -m pytest -q tests/unit" >&2
  exit 2
fi
command -v unshare >/dev/null || die "unshare is not installed: apt-get install util-linux"

# Inside the namespace this script made: the variable it passes says so, and the mount namespace is not the one of the
# process that started it (unshare runs this script in place of itself). A variable inherited from a caller (a
# `make test-unit` started from within another clean-host run, a CI step that exports it) is not enough: believing it
# skipped the namespace and bind-mounted over the caller's own /proc/meminfo.
inside() {
  local own parents
  own=$(readlink /proc/self/ns/mnt 2>/dev/null) && parents=$(readlink "/proc/$PPID/ns/mnt" 2>/dev/null) || return 1
  [[ "${MCORE_CLEAN_HOST_INSIDE:-}" == 1 && "$own" != "$parents" ]]
}

if ! inside; then
  work=$(mktemp -d "${TMPDIR:-/tmp}/clean-host.XXXXXX")
  trap 'rm -rf -- "$work"' EXIT
  mkdir -p "$work/home" "$work/state" "$work/shadow"
  # docker's CLI plugins (buildx: .ci/docker-engine.sh links it into the docker config folder, a setup phase
  # before the tests) without the rest of that folder (its config.json may hold registry credentials).
  plugins="${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins"
  if [[ -d "$plugins" ]]; then
    mkdir -p "$work/home/.docker"
    ln -s "$plugins" "$work/home/.docker/cli-plugins"
  fi
  # PATH: each folder that holds a hidden tool is replaced by a folder of links to everything else it holds.
  path=() i=0
  IFS=: read -r -a dirs <<<"$PATH"
  for dir in "${dirs[@]}"; do
    [[ -d "$dir" ]] || continue
    hides=0
    for tool in "${HIDDEN[@]}"; do [[ -e "$dir/$tool" ]] && hides=1; done
    if ((hides)); then
      i=$((i + 1))
      mkdir "$work/shadow/$i"
      for entry in "$dir"/*; do
        name=${entry##*/}
        [[ " ${HIDDEN[*]} " == *" $name "* ]] || ln -s "$entry" "$work/shadow/$i/$name"
      done
      path+=("$work/shadow/$i")
    else
      path+=("$dir")
    fi
  done
  printf 'MemTotal:       %d kB\nMemFree:        %d kB\nMemAvailable:   %d kB\n' \
    $((64 * 1024 * 1024)) "$AVAILABLE_KIB" "$AVAILABLE_KIB" >"$work/meminfo"
  joined=$(IFS=:; echo "${path[*]}")
  log "PATH without ${HIDDEN[*]}; /proc/meminfo: $((AVAILABLE_KIB / 1024)) MiB available; HOME=$work/home"
  userns=()
  ((EUID == 0)) || userns=(--user --map-root-user)
  rc=0
  env -u MCORE_IMAGES_STATE -u XDG_CACHE_HOME -u XDG_CONFIG_HOME -u DOCKER_CONFIG PATH="$joined" HOME="$work/home" \
    MCORE_CLEAN_HOST_INSIDE=1 MCORE_CLEAN_HOST_MEMINFO="$work/meminfo" \
    unshare "${userns[@]}" --mount --propagation private -- bash "$0" "$@" || rc=$?
  exit "$rc"
fi

# Inside the private mount namespace: the mount is gone with the namespace.
mount --bind "$MCORE_CLEAN_HOST_MEMINFO" /proc/meminfo || die "could not bind-mount over /proc/meminfo"
unset MCORE_CLEAN_HOST_INSIDE MCORE_CLEAN_HOST_MEMINFO
exec "$@"
