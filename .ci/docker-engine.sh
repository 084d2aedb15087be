#!/usr/bin/env bash
# Provision and start a Docker Engine with BuildKit and buildx on a Debian bookworm host.
#
# Bookworm's own docker.io (engine 20.10, BuildKit v0.8) cannot build `target:` named
# contexts, which docker-bake.hcl uses to chain layers. dockerd 26 and buildx 0.13
# are taken from Debian trixie's packages and run with bookworm's containerd and runc
# (trixie's runc needs a newer glibc). Idempotent: a running engine is reused.
#
#   .ci/docker-engine.sh          install if needed, start if not running, wait until ready
#   .ci/docker-engine.sh stop     stop the engine this script started (by its pid file)
#   .ci/docker-engine.sh status   exit 0 when the engine answers
set -euo pipefail
# shellcheck source=.ci/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" docker-engine  # log, die, install_host_packages

PREFIX="${MCORE_DOCKER_PREFIX:-/opt/mcore-images/docker}"
STATE="${MCORE_DOCKER_STATE:-/var/lib/mcore-images-docker}"
PIDFILE="$STATE/dockerd.pid"
LOG="$STATE/dockerd.log"
SOCK="unix:///var/run/docker.sock"
# trixie split the docker CLI out of docker.io into docker-cli.
TRIXIE_PACKAGES=(docker.io docker-cli docker-buildx)


engine_answers() { DOCKER_HOST="$SOCK" docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }


install_trixie_engine() {
  [[ -x "$PREFIX/usr/sbin/dockerd" && -x "$PREFIX/usr/bin/docker" \
    && -x "$PREFIX/usr/libexec/docker/cli-plugins/docker-buildx" ]] && return 0
  log "downloading ${TRIXIE_PACKAGES[*]} from Debian trixie"
  local tmp
  tmp="$(mktemp -d)"
  mkdir -p "$tmp/lists/partial" "$tmp/debs"
  cat >"$tmp/trixie.sources" <<SRC
Types: deb
URIs: http://deb.debian.org/debian
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-trixie-stable.gpg
SRC
  local opts=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$tmp/parts"
    -o "Dir::State::Lists=$tmp/lists" -o "Dir::Cache::pkgcache=$tmp/pkgcache.bin"
    -o "Dir::Cache::srcpkgcache=$tmp/srcpkgcache.bin")
  mkdir -p "$tmp/parts" && cp "$tmp/trixie.sources" "$tmp/parts/"
  opts+=(-o "APT::Sandbox::User=root")
  apt-get "${opts[@]}" update -qq
  (cd "$tmp/debs" && apt-get "${opts[@]}" download "${TRIXIE_PACKAGES[@]}" >/dev/null)
  mkdir -p "$PREFIX"
  for deb in "$tmp"/debs/*.deb; do dpkg -x "$deb" "$PREFIX"; done
  rm -rf "$tmp"
  [[ -x "$PREFIX/usr/sbin/dockerd" ]] || die "dockerd missing after unpacking trixie's docker.io; check $PREFIX"
}

install_cli_plugin() {
  local dir="${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins"
  mkdir -p "$dir"
  ln -sf "$PREFIX/usr/libexec/docker/cli-plugins/docker-buildx" "$dir/docker-buildx"
  command -v docker >/dev/null || ln -sf "$PREFIX/usr/bin/docker" /usr/local/bin/docker
}

start_engine() {
  if engine_answers; then log "engine already running: $(docker version --format '{{.Server.Version}}')"; return 0; fi
  if [[ -f "$PIDFILE" ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
    die "dockerd (pid $(cat "$PIDFILE")) runs but does not answer; see $LOG or run '$0 stop'"
  fi
  mkdir -p "$STATE/data" "$STATE/exec"
  cat >"$STATE/daemon.json" <<JSON
{"features": {"containerd-snapshotter": true}, "storage-driver": "overlayfs"}
JSON
  log "starting dockerd $("$PREFIX/usr/sbin/dockerd" --version | awk '{print $3}' | tr -d ,)"
  # dockerd finds containerd, runc and docker-proxy on PATH: bookworm's first, trixie's unpacked tree for the rest.
  PATH="/usr/bin:/usr/sbin:$PATH:$PREFIX/usr/bin:$PREFIX/usr/sbin:$PREFIX/usr/libexec/docker" \
    setsid "$PREFIX/usr/sbin/dockerd" --config-file "$STATE/daemon.json" --data-root "$STATE/data" \
    --exec-root "$STATE/exec" --pidfile "$PIDFILE" -H "$SOCK" >"$LOG" 2>&1 </dev/null &
  local i
  for i in $(seq 1 60); do
    engine_answers && { log "engine ready after ${i}s"; return 0; }
    sleep 1
  done
  tail -n 20 "$LOG" >&2 || true
  die "dockerd did not answer within 60 s; the log above names the cause ($LOG)"
}

stop_engine() {
  [[ -f "$PIDFILE" ]] || { log "no pid file at $PIDFILE: nothing to stop"; return 0; }
  local pid
  pid="$(cat "$PIDFILE")"
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  fi
  rm -f "$PIDFILE"
  log "stopped dockerd (pid $pid)"
}

case "${1:-start}" in
  start)
    install_host_packages containerd runc iptables debootstrap
    install_trixie_engine
    install_cli_plugin
    start_engine
    docker buildx version >/dev/null || die "buildx plugin not found; expected it under ${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins"
    ;;
  stop) stop_engine ;;
  status) engine_answers ;;
  *) die "unknown command '$1'; use start, stop or status" ;;
esac
