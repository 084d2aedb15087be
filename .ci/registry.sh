#!/usr/bin/env bash
# Provision and run a local OCI registry (CNCF distribution 2.8) with oras and cosign on a
# Debian bookworm host, for pushing, attaching and signing images without outside registries.
#
# docker-registry 2.8.3, oras 1.2 and cosign 2.5 are taken from Debian trixie's packages and
# unpacked into a prefix (they need glibc >= 2.34; bookworm has 2.36). Should trixie's registry
# not run here, bookworm's docker-registry 2.8.2 is unpacked instead (MCORE_REGISTRY_SUITE=bookworm
# forces it). The registry listens on 127.0.0.1 only, over plain HTTP, without auth, with deletion
# enabled. Distribution 2.8 has no referrers API: oras falls back to the referrers tag schema
# (sha256-<digest> tags) and cosign stores signatures as sha256-<digest>.sig tags.
# Idempotent: installed tools are reused, and so is a registry that already answers.
#
#   .ci/registry.sh [start]      install if needed, start the registry if not running, wait until ready
#   .ci/registry.sh stop         stop the registry this script started (by its pid file)
#   .ci/registry.sh stop --purge stop it and delete its storage ($MCORE_REGISTRY_STATE/storage) and the release
#                                authority that signed what it held ($MCORE_REGISTRY_STATE/release: key pair, its
#                                record of its last ledger write, ledger versions seen; .ci/release-local.sh makes it)
#   .ci/registry.sh status       exit 0 when http://127.0.0.1:$MCORE_REGISTRY_PORT/v2/ answers
#   .ci/registry.sh tools        install oras and cosign only; print their paths and versions
#   .ci/registry.sh env          print shell assignments for callers: eval "$(.ci/registry.sh env)"
#
# Environment: MCORE_REGISTRY_PREFIX (default /opt/mcore-images/registry), MCORE_REGISTRY_STATE
# (default /var/lib/mcore-images-registry), MCORE_REGISTRY_PORT (default 5000),
# MCORE_REGISTRY_BINDIR (default /usr/local/bin: oras and cosign are linked there unless another
# copy is already on PATH; either way $MCORE_REGISTRY_PREFIX/usr/bin has them).
#
# Flags that work against this plain-HTTP registry with no network (oras 1.2, cosign 2.5):
#   oras attach|discover|pull|manifest ... --plain-http   (needed for 127.0.0.1:PORT; localhost:PORT is
#     plain HTTP by default). Leave --distribution-spec unset (auto: tag schema here) or pass
#     v1.1-referrers-tag; v1.1-referrers-api attaches without indexing the referrer on 2.8.
#   cosign sign --key cosign.key --tlog-upload=false --yes IMAGE@DIGEST
#   cosign verify --key cosign.pub --insecure-ignore-tlog IMAGE@DIGEST
#   cosign sign-blob --key cosign.key --tlog-upload=false --bundle F.bundle --yes FILE
#   cosign verify-blob --key cosign.pub --bundle F.bundle --insecure-ignore-tlog FILE
#   (--new-bundle-format bundles also need --trusted-root with a trusted-root JSON on verify).
# cosign treats 127.0.0.1 and localhost as HTTP by itself; --allow-http-registry is accepted and
# needed only for other host names.
set -euo pipefail
# shellcheck source=.ci/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" registry  # log, die, install_host_packages

PREFIX="${MCORE_REGISTRY_PREFIX:-/opt/mcore-images/registry}"
STATE="${MCORE_REGISTRY_STATE:-/var/lib/mcore-images-registry}"
PORT="${MCORE_REGISTRY_PORT:-5000}"
BINDIR="${MCORE_REGISTRY_BINDIR:-/usr/local/bin}"
REGISTRY_SUITE="${MCORE_REGISTRY_SUITE:-trixie}"
PIDFILE="$STATE/registry.pid"
LOG="$STATE/registry.log"
CONFIG="$STATE/config.yml"
RELEASE="$STATE/release"
URL="http://127.0.0.1:$PORT/v2/"
REGISTRY_BIN="$PREFIX/usr/bin/docker-registry"
ORAS_BIN="$PREFIX/usr/bin/oras"
COSIGN_BIN="$PREFIX/usr/bin/cosign"
# Package name and version of each .deb unpacked into the prefix (dpkg -x registers nothing).
VERSIONS="$PREFIX/versions.txt"


registry_answers() { curl -fsS -o /dev/null --max-time 2 "$URL" 2>/dev/null; }
pkg_version() { awk -v p="$1" '$1 == p {v = $2} END {print v}' "$VERSIONS" 2>/dev/null; }


# fetch_debs SUITE PACKAGE...: download the packages of Debian SUITE with a temporary sources
# list (the host's apt state is untouched) and unpack them into $PREFIX.
fetch_debs() {
  local suite="$1"
  shift
  log "downloading $* from Debian $suite"
  local tmp
  tmp="$(mktemp -d)"
  mkdir -p "$tmp/lists/partial" "$tmp/parts" "$tmp/debs"
  cat >"$tmp/parts/$suite.sources" <<SRC
Types: deb
URIs: http://deb.debian.org/debian
Suites: $suite
Components: main
Signed-By: /usr/share/keyrings/debian-archive-$suite-stable.gpg
SRC
  local opts=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$tmp/parts"
    -o "Dir::State::Lists=$tmp/lists" -o "Dir::Cache::pkgcache=$tmp/pkgcache.bin"
    -o "Dir::Cache::srcpkgcache=$tmp/srcpkgcache.bin" -o "APT::Sandbox::User=root")
  apt-get "${opts[@]}" update -qq || { rm -rf "$tmp"; die "apt-get update for Debian $suite failed"; }
  (cd "$tmp/debs" && apt-get "${opts[@]}" download "$@" >/dev/null) \
    || { rm -rf "$tmp"; die "apt-get download $* from Debian $suite failed"; }
  mkdir -p "$PREFIX"
  local deb
  for deb in "$tmp"/debs/*.deb; do
    dpkg -x "$deb" "$PREFIX"
    # Keep one line per package: the last unpacked version wins.
    local name
    name="$(dpkg-deb -f "$deb" Package)"
    { grep -v "^$name " "$VERSIONS" 2>/dev/null || true; printf '%s %s\n' "$name" "$(dpkg-deb -f "$deb" Version)"; } \
      >"$VERSIONS.new"
    mv "$VERSIONS.new" "$VERSIONS"
  done
  rm -rf "$tmp"
}

# install_packages [docker-registry]: fetch what is missing of oras, cosign and (when asked)
# docker-registry, with one download per Debian suite.
install_packages() {
  local trixie=() registry=()
  [[ -x "$ORAS_BIN" ]] || trixie+=(oras)
  [[ -x "$COSIGN_BIN" ]] || trixie+=(cosign)
  if [[ "${1:-}" == docker-registry ]] && ! { [[ -x "$REGISTRY_BIN" ]] && "$REGISTRY_BIN" --version >/dev/null 2>&1; }; then
    if [[ "$REGISTRY_SUITE" == trixie ]]; then trixie+=(docker-registry); else registry+=(docker-registry); fi
  fi
  if ((${#trixie[@]})); then fetch_debs trixie "${trixie[@]}"; fi
  if ((${#registry[@]})); then fetch_debs "$REGISTRY_SUITE" "${registry[@]}"; fi
}

check_registry() {
  if ! "$REGISTRY_BIN" --version >/dev/null 2>&1; then
    [[ "$REGISTRY_SUITE" != bookworm ]] || die "$REGISTRY_BIN does not run: $("$REGISTRY_BIN" --version 2>&1 | head -n 1)"
    log "$REGISTRY_SUITE's docker-registry does not run here ($("$REGISTRY_BIN" --version 2>&1 | head -n 1)); using bookworm's"
    fetch_debs bookworm docker-registry
    "$REGISTRY_BIN" --version >/dev/null 2>&1 || die "bookworm's docker-registry does not run either; check $REGISTRY_BIN"
  fi
}

check_tools() {
  "$ORAS_BIN" version >/dev/null 2>&1 || die "$ORAS_BIN does not run: $("$ORAS_BIN" version 2>&1 | head -n 1)"
  "$COSIGN_BIN" version >/dev/null 2>&1 || die "$COSIGN_BIN does not run: $("$COSIGN_BIN" version 2>&1 | head -n 1)"
  local tool
  for tool in oras cosign; do
    # Link into BINDIR unless another copy is already found on PATH (that one is left alone).
    if ! command -v "$tool" >/dev/null || [[ "$(readlink -f "$(command -v "$tool")")" == "$PREFIX/usr/bin/$tool" ]]; then
      mkdir -p "$BINDIR" && ln -sf "$PREFIX/usr/bin/$tool" "$BINDIR/$tool"
    fi
  done
}

print_tools() {
  # cosign built by Debian reports GitVersion "devel"; the package version is the useful one.
  log "oras:   $ORAS_BIN (oras version: $("$ORAS_BIN" version | awk '/^Version:/ {print $2}'), Debian package $(pkg_version oras))"
  log "cosign: $COSIGN_BIN (cosign version: GitVersion $("$COSIGN_BIN" version 2>/dev/null | awk '/^GitVersion:/ {print $2}'), Debian package $(pkg_version cosign))"
  local tool
  for tool in oras cosign; do
    [[ "$(readlink -f "$(command -v "$tool" || true)")" == "$PREFIX/usr/bin/$tool" ]] \
      || log "note: '$tool' on PATH is $(command -v "$tool" || echo 'missing'), not $PREFIX/usr/bin/$tool"
  done
}

registry_version() { "$REGISTRY_BIN" --version | awk '{print $NF}'; }

write_config() {
  mkdir -p "$STATE/storage"
  cat >"$CONFIG" <<YAML
# Written by .ci/registry.sh; rewritten on each start.
version: 0.1
log:
  level: info
  fields:
    service: registry
storage:
  cache:
    blobdescriptor: inmemory
  filesystem:
    rootdirectory: $STATE/storage
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$PORT
  headers:
    X-Content-Type-Options: [nosniff]
health:
  storagedriver:
    enabled: true
    interval: 10s
    threshold: 3
YAML
}

start_registry() {
  if registry_answers; then
    if [[ -f "$PIDFILE" ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
      log "docker-registry $(registry_version) already running at 127.0.0.1:$PORT (pid $(cat "$PIDFILE"))"
    else
      log "a registry not started by this script already answers at $URL; reusing it"
    fi
    return 0
  fi
  if [[ -f "$PIDFILE" ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
    die "registry (pid $(cat "$PIDFILE")) runs but $URL does not answer; see $LOG or run '$0 stop'"
  fi
  rm -f "$PIDFILE"
  write_config
  log "starting docker-registry $(registry_version) (Debian package $(pkg_version docker-registry)) on 127.0.0.1:$PORT, storage $STATE/storage"
  # The registry has no pid-file option: the background job's pid is the registry's own
  # (setsid does not fork when its caller is not a process-group leader, as here).
  setsid "$REGISTRY_BIN" serve "$CONFIG" >"$LOG" 2>&1 </dev/null &
  local pid=$!
  echo "$pid" >"$PIDFILE"
  local i
  for i in $(seq 1 30); do
    registry_answers && { log "registry ready after ${i}s: $URL (pid $pid)"; return 0; }
    kill -0 "$pid" 2>/dev/null || break
    sleep 1
  done
  tail -n 20 "$LOG" >&2 || true
  rm -f "$PIDFILE"
  kill -0 "$pid" 2>/dev/null || die "registry exited before $URL answered; the log above names the cause ($LOG)"
  kill "$pid" 2>/dev/null || true
  die "registry did not answer at $URL within 30 s; the log above names the cause ($LOG)"
}

stop_registry() {
  local purge="${1:-}"
  [[ -z "$purge" || "$purge" == --purge ]] || die "unknown option '$purge' for stop; use --purge"
  if [[ -f "$PIDFILE" ]]; then
    local pid
    pid="$(cat "$PIDFILE")"
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid"
      for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
      kill -0 "$pid" 2>/dev/null && die "registry (pid $pid) still runs 30 s after SIGTERM"
    fi
    rm -f "$PIDFILE"
    log "stopped registry (pid $pid)"
  else
    log "no pid file at $PIDFILE: nothing to stop"
  fi
  if [[ "$purge" == --purge ]]; then
    rm -rf "$STATE/storage" "$RELEASE"
    log "removed storage $STATE/storage and its release key and ledger record $RELEASE"
  fi
}

print_env() {
  printf 'MCORE_REGISTRY=%q\n' "127.0.0.1:$PORT"
  printf 'MCORE_ORAS=%q\n' "$ORAS_BIN"
  printf 'MCORE_COSIGN=%q\n' "$COSIGN_BIN"
  printf 'MCORE_REGISTRY_RELEASE=%q\n' "$RELEASE"
}

case "${1:-start}" in
  start)
    install_host_packages curl ca-certificates
    install_packages docker-registry
    check_registry
    check_tools
    print_tools
    start_registry
    ;;
  stop) stop_registry "${2:-}" ;;
  status) registry_answers ;;
  tools)
    install_host_packages curl ca-certificates
    install_packages
    check_tools
    print_tools 2>&1 | sed 's/^\[registry\] //'
    ;;
  env) print_env ;;
  *) die "unknown command '$1'; use start, stop [--purge], status, tools or env" ;;
esac
