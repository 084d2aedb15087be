#!/usr/bin/env bash
# Let this Debian host build and run linux/arm64 images (GH200/GB200/GB300 are Grace, aarch64, hosts): Debian's
# qemu-user-static at MIN_QEMU or newer, registered with binfmt_misc from the package's own binfmt.d entry, which
# carries the F flag that containers need (the kernel opens the interpreter at registration, so an image without
# QEMU in it runs aarch64 programs).
#
# Why MIN_QEMU: Debian's arm64 programs sign their return addresses (pointer authentication), and QEMU 7.2
# (bookworm's own) emulates each signature with the architected QARMA5 cipher. A pure-Python loop in an arm64
# trixie root took 58.7 s under 7.2, 6.7 s under 10.0 and 0.48 s natively. trixie's suite has 10.0; on bookworm it
# comes from bookworm-backports, whose source this script adds (a file of its own) when no source names it.
#
# Idempotent: an enabled registration with the F flag of a QEMU at MIN_QEMU or newer is left as it is. An older one
# is registered again: with the F flag the kernel keeps the interpreter it opened, so an upgraded package alone
# changes nothing until then.
#
#   .ci/emulation.sh          install if needed, register, check (exit 0: `mcore-images build --platform linux/arm64`
#                             and `mcore-images base --platform linux/arm64` can run)
#   .ci/emulation.sh status   exit 0 when aarch64 programs run here through QEMU >= MIN_QEMU, 2 otherwise (one line
#                             saying why)
set -euo pipefail

MIN_QEMU=10.0  # src/mcore_images/emulation.py's MIN_QEMU; tests/unit/repo/test_emulation_script.py holds them equal
PACKAGE=qemu-user-static
BINFMT=/proc/sys/fs/binfmt_misc
ENTRY="$BINFMT/qemu-aarch64"
BINFMT_D=/usr/lib/binfmt.d/qemu-aarch64.conf

log() { printf '[emulation] %s\n' "$*" >&2; }
die() { printf '[emulation] error: %s\n' "$*" >&2; exit 2; }

at_least() { dpkg --compare-versions "$1" ge "$2"; }

registered() {
  [[ -r "$ENTRY" ]] && [[ "$(head -n 1 "$ENTRY")" == enabled ]] && grep -q '^flags:.*F' "$ENTRY"
}

# The version of the QEMU the kernel holds for the entry: a file that is nothing but the entry's magic bytes is
# handed to that interpreter, and QEMU_VERSION makes it print its version and exit before it reads the file.
registered_version() {
  local probe magic offset out
  magic="$(sed -n 's/^magic //p' "$ENTRY")"
  offset="$(sed -n 's/^offset //p' "$ENTRY")"
  [[ "$magic" =~ ^([0-9a-f]{2})+$ && "$offset" =~ ^[0-9]+$ ]] || return 0
  probe="$(mktemp)"
  head -c "$offset" /dev/zero >"$probe"
  # shellcheck disable=SC2001  # every byte as \x.., a regular expression over the hex
  printf '%b' "$(sed 's/\(..\)/\\x\1/g' <<<"$magic")" >>"$probe"
  chmod 700 "$probe"
  out="$(QEMU_VERSION=1 "$probe" 2>/dev/null || true)"
  rm -f "$probe"
  sed -n 's/^qemu-[a-z0-9_]* version \([0-9][0-9.]*\).*/\1/p' <<<"$out" | head -n 1
}

status() {
  if [[ "$(uname -m)" == aarch64 ]]; then
    log "this machine is aarch64: arm64 images build natively"
    return 0
  fi
  registered || die "no enabled qemu-aarch64 entry with the F flag in $BINFMT; run .ci/emulation.sh (make emulation)"
  local version
  version="$(registered_version)"
  [[ -n "$version" ]] || die "the interpreter registered in $ENTRY did not say its QEMU version; run .ci/emulation.sh (make emulation)"
  at_least "$version" "$MIN_QEMU" \
    || die "QEMU $version is registered for aarch64 and $MIN_QEMU or newer is needed (7.2 runs Debian's arm64 programs about 9x slower); run .ci/emulation.sh (make emulation)"
  log "aarch64 programs run here through QEMU $version, $(sed -n 's/^interpreter //p' "$ENTRY") (flags $(sed -n 's/^flags: //p' "$ENTRY"))"
}

installed_version() { dpkg-query -W -f='${Status} ${Version}' "$PACKAGE" 2>/dev/null | sed -n 's/^install ok installed //p'; }

candidate_version() { apt-cache policy "$PACKAGE" | sed -n 's/^ *Candidate: //p' | grep -v '(none)' || true; }

# bookworm's suite has 7.2: take the suite's backports, adding its source in a file of this script's own when no
# source names it (nothing existing is edited).
use_backports() {
  local codename suite file
  codename="$(sed -n 's/^VERSION_CODENAME=//p' /etc/os-release)"
  [[ -n "$codename" ]] || die "cannot read VERSION_CODENAME from /etc/os-release to find a $PACKAGE >= $MIN_QEMU; install one by hand"
  suite="$codename-backports"
  if ! grep -rqs -- "$suite" /etc/apt/sources.list /etc/apt/sources.list.d/; then
    file="/etc/apt/sources.list.d/mcore-images-$suite.sources"
    [[ ! -e "$file" ]] || die "$file exists but names no $suite; remove it or add $suite to it"
    log "adding $suite to apt's sources ($file): $PACKAGE $MIN_QEMU or newer comes from there"
    printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: %s\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
      "$suite" >"$file"
    apt-get update -qq >&2
  fi
  printf '%s' "$suite"
}

install_qemu() {
  local have candidate suite
  have="$(installed_version)"
  if [[ -n "$have" ]] && at_least "$have" "1:$MIN_QEMU"; then
    return 0
  fi
  apt-get update -qq
  candidate="$(candidate_version)"
  local target=()
  if [[ -z "$candidate" ]] || ! at_least "$candidate" "1:$MIN_QEMU"; then
    suite="$(use_backports)"
    target=(-t "$suite")
  fi
  log "installing $PACKAGE >= $MIN_QEMU${target[*]:+ from ${target[1]}}${have:+ (installed: $have)}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${target[@]}" "$PACKAGE" >/dev/null
  have="$(installed_version)"
  if [[ -z "$have" ]] || ! at_least "$have" "1:$MIN_QEMU"; then
    die "apt installed $PACKAGE ${have:-nothing}, and $MIN_QEMU or newer is needed; install it from a suite that has it"
  fi
}

register() {
  if [[ ! -e "$BINFMT/register" ]]; then
    log "mounting binfmt_misc on $BINFMT"
    mount -t binfmt_misc binfmt_misc "$BINFMT" || die "cannot mount binfmt_misc (a container needs --privileged)"
  fi
  if [[ -e "$ENTRY" ]]; then
    local version
    version="$(registered_version)"
    if registered && [[ -n "$version" ]] && at_least "$version" "$MIN_QEMU"; then
      return 0
    fi
    log "registering qemu-aarch64 again (it held QEMU ${version:-of an unknown version}, flags $(sed -n 's/^flags: //p' "$ENTRY"))"
    echo -1 >"$ENTRY"
  fi
  grep -qs '^:qemu-aarch64:.*:[A-Z]*F[A-Z]*$' "$BINFMT_D" \
    || die "$BINFMT_D is missing or has no F flag; reinstall $PACKAGE ($MIN_QEMU or newer)"
  cat "$BINFMT_D" >"$BINFMT/register"
}

main() {
  if [[ "$(uname -m)" == aarch64 ]]; then
    status
    return 0
  fi
  [[ "$(id -u)" == 0 ]] || die "installing and registering QEMU needs root; run it as root (or with sudo)"
  install_qemu
  register
  status
}

case "${1:-}" in
  "") main ;;
  status) status ;;
  *) die "unknown argument '$1'; use no argument (install and register) or 'status'" ;;
esac
