#!/usr/bin/env bash
# Let this Debian host build and run linux/arm64 images (GH200/GB200/GB300 are Grace, aarch64, hosts): a QEMU at
# MIN_QEMU or newer registered with binfmt_misc with the F flag, which containers need (the kernel opens the
# interpreter at registration, so an image without QEMU in it runs aarch64 programs).
#
# Why MIN_QEMU (src/mcore_images/launch/emulation.py's QEMU_FAULTS says the same, per version):
#   - QEMU 7.2 (bookworm's own) emulates the pointer authentication Debian's arm64 programs use with the architected
#     QARMA5 cipher: a pure-Python loop in an arm64 trixie root took 58.7 s under 7.2, 6.7 s under 10.0, 0.48 s natively.
#   - QEMU 10.0.2 deadlocks, now and then, in a child forked from a many-threaded program, inside QEMU itself before
#     the child runs a guest instruction (its host thread waits in pthread_mutex_lock): megatron-core's background
#     checkpoint writer, forked from a 120-thread training rank, hung in 3 of 7 runs of the smoke's full-folder test.
#     Under 11.1.3, 0 of 8.
#
# Where it comes from: Debian's qemu-user (statically linked, no dependencies) of QEMU_SUITE. When this host's own
# qemu-user is older, the package is fetched from that suite (apt verifies it against the signed index; the suite's
# source is added as a file of this script's own when no source names it) and its qemu-aarch64 is copied to OWN. No
# installed package is changed: on bookworm, the suite's qemu-user-binfmt needs a dpkg that provides
# native-architecture, and replacing qemu-user would remove an installed qemu-user-binfmt.
#
# Idempotent: an enabled registration with the F flag of a QEMU at MIN_QEMU or newer is left as it is. An older one
# is registered again: with the F flag the kernel keeps the interpreter it opened, so an upgraded QEMU alone changes
# nothing until then.
#
#   .ci/emulation.sh          fetch if needed, register, check (exit 0: `mcore-images build --platform linux/arm64`
#                             and `mcore-images base --platform linux/arm64` can run)
#   .ci/emulation.sh status   exit 0 when aarch64 programs run here through QEMU >= MIN_QEMU, 2 otherwise (one line
#                             saying why)
set -euo pipefail

MIN_QEMU=11.1  # src/mcore_images/launch/emulation.py's MIN_QEMU; tests/unit/repo/test_emulation_script.py holds them equal
PACKAGE=qemu-user
QEMU_SUITE=trixie-backports  # Debian's suite with qemu-user >= MIN_QEMU (1:11.1.3+ds-2~bpo13+1)
OWN=/usr/local/libexec/mcore-images  # the qemu-aarch64 this script fetched; nothing else is written there
BINFMT=/proc/sys/fs/binfmt_misc
ENTRY="$BINFMT/qemu-aarch64"
# ELF, 64-bit, little-endian, executable or shared object, machine EM_AARCH64 (0xb7): QEMU's own aarch64 entry
MAGIC='\x7f\x45\x4c\x46\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00'
MASK='\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff'

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
    || die "QEMU $version is registered for aarch64 and $MIN_QEMU or newer is needed (older ones run Debian's arm64 programs slowly or deadlock forked children; see this script's header); run .ci/emulation.sh (make emulation)"
  log "aarch64 programs run here through QEMU $version, $(sed -n 's/^interpreter //p' "$ENTRY") (flags $(sed -n 's/^flags: //p' "$ENTRY"))"
}

# The QEMU version a qemu-aarch64 binary reports, or nothing.
binary_version() {
  [[ -x "$1" ]] || return 0
  "$1" --version 2>/dev/null | sed -n 's/^qemu-aarch64 version \([0-9][0-9.]*\).*/\1/p' | head -n 1
}

# Adds QEMU_SUITE to apt's sources in a file of this script's own when no source names it (nothing existing is
# edited).
use_suite() {
  local file
  grep -rqs -- "$QEMU_SUITE" /etc/apt/sources.list /etc/apt/sources.list.d/ && return 0
  file="/etc/apt/sources.list.d/mcore-images-$QEMU_SUITE.sources"
  [[ ! -e "$file" ]] || die "$file exists but names no $QEMU_SUITE; remove it or add $QEMU_SUITE to it"
  log "adding $QEMU_SUITE to apt's sources ($file): $PACKAGE $MIN_QEMU or newer comes from there"
  printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: %s\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "$QEMU_SUITE" >"$file"
}

# The qemu-aarch64 to register: this host's own when it is new enough, else the one in OWN, fetched there first
# when it is missing or older.
interpreter() {
  local host own version scratch
  host="$(binary_version /usr/bin/qemu-aarch64)"
  if [[ -n "$host" ]] && at_least "$host" "$MIN_QEMU"; then
    printf '%s' /usr/bin/qemu-aarch64
    return 0
  fi
  own="$(binary_version "$OWN/qemu-aarch64")"
  if [[ -n "$own" ]] && at_least "$own" "$MIN_QEMU"; then
    printf '%s' "$OWN/qemu-aarch64"
    return 0
  fi
  use_suite
  apt-get update -qq >&2
  scratch="$(mktemp -d)"
  log "fetching $PACKAGE from $QEMU_SUITE (this host has QEMU ${host:-none}, $MIN_QEMU or newer is needed)"
  (cd "$scratch" && apt-get download -qq -o APT::Sandbox::User=root "$PACKAGE/$QEMU_SUITE" >&2) \
    || { rm -rf "$scratch"; die "apt could not download $PACKAGE from $QEMU_SUITE; check that deb.debian.org is reachable"; }
  dpkg-deb -x "$scratch"/"$PACKAGE"_*.deb "$scratch/root"
  version="$(binary_version "$scratch/root/usr/bin/qemu-aarch64")"
  if [[ -z "$version" ]] || ! at_least "$version" "$MIN_QEMU"; then
    rm -rf "$scratch"
    die "$QEMU_SUITE's $PACKAGE has QEMU ${version:-of no version}, and $MIN_QEMU or newer is needed; set QEMU_SUITE in $0 to a suite that has it"
  fi
  mkdir -p "$OWN"
  install -m 0755 "$scratch/root/usr/bin/qemu-aarch64" "$OWN/qemu-aarch64.new"
  mv -f "$OWN/qemu-aarch64.new" "$OWN/qemu-aarch64"
  rm -rf "$scratch"
  log "QEMU $version is $OWN/qemu-aarch64"
  printf '%s' "$OWN/qemu-aarch64"
}

register() {
  if [[ ! -e "$BINFMT/register" ]]; then
    log "mounting binfmt_misc on $BINFMT"
    mount -t binfmt_misc binfmt_misc "$BINFMT" || die "cannot mount binfmt_misc (a container needs --privileged)"
  fi
  local version interp
  if [[ -e "$ENTRY" ]]; then
    version="$(registered_version)"
    if registered && [[ -n "$version" ]] && at_least "$version" "$MIN_QEMU"; then
      return 0
    fi
  fi
  interp="$(interpreter)"
  if [[ -e "$ENTRY" ]]; then
    log "registering qemu-aarch64 again (it held QEMU ${version:-of an unknown version}, flags $(sed -n 's/^flags: //p' "$ENTRY"))"
    echo -1 >"$ENTRY"
  fi
  # P: argv[0] as the program was given it (QEMU reads that from the kernel's AT_FLAGS); O: the kernel opens the
  # program for QEMU (unreadable ones run too); F: the kernel opens QEMU now, so containers need no QEMU of their own.
  printf ':qemu-aarch64:M::%s:%s:%s:POF\n' "$MAGIC" "$MASK" "$interp" >"$BINFMT/register"
}

main() {
  if [[ "$(uname -m)" == aarch64 ]]; then
    status
    return 0
  fi
  [[ "$(id -u)" == 0 ]] || die "installing and registering QEMU needs root; run it as root (or with sudo)"
  register
  status
}

case "${1:-}" in
  "") main ;;
  status) status ;;
  *) die "unknown argument '$1'; use no argument (install and register) or 'status'" ;;
esac
