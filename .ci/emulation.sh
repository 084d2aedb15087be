#!/usr/bin/env bash
# Let this Debian host build and run linux/arm64 images (GH200/GB200/GB300 are Grace, aarch64, hosts): QEMU from
# bookworm's qemu-user-static, registered with binfmt_misc by binfmt-support, with the F flag that containers need
# (the kernel opens the interpreter at registration, so an image without qemu-aarch64-static runs aarch64 programs).
# Idempotent: an enabled registration with the F flag is left as it is.
#
#   .ci/emulation.sh          install if needed, register, check (exit 0: `mcore-images build --platform linux/arm64`
#                             and `mcore-images base --platform linux/arm64` can run)
#   .ci/emulation.sh status   exit 0 when aarch64 programs can run here, 2 otherwise (one line saying why)
set -euo pipefail

BINFMT=/proc/sys/fs/binfmt_misc
ENTRY="$BINFMT/qemu-aarch64"

log() { printf '[emulation] %s\n' "$*" >&2; }
die() { printf '[emulation] error: %s\n' "$*" >&2; exit 2; }

registered() {
  [[ -r "$ENTRY" ]] && [[ "$(head -n 1 "$ENTRY")" == enabled ]] && grep -q '^flags:.*F' "$ENTRY"
}

status() {
  if [[ "$(uname -m)" == aarch64 ]]; then
    log "this machine is aarch64: arm64 images build natively"
    return 0
  fi
  registered || die "no enabled qemu-aarch64 entry with the F flag in $BINFMT; run .ci/emulation.sh (make emulation)"
  log "aarch64 programs run here through $(sed -n 's/^interpreter //p' "$ENTRY") (flags $(sed -n 's/^flags: //p' "$ENTRY"))"
}

install_packages() {
  local missing=()
  for pkg in qemu-user-static binfmt-support; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
  done
  if ((${#missing[@]})); then
    log "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

# Hex as binfmt_misc's register file takes it: each byte as \x.. (the kernel prints magic and mask as plain hex).
# shellcheck disable=SC2001  # a regular expression over the bytes, which ${var//…} cannot write
hex_escaped() { sed 's/\(..\)/\\x\1/g' <<<"$1"; }

# The entry again with the F flag, from the magic and mask the kernel holds.
register_with_fix_binary() {
  local magic mask interpreter
  magic="$(hex_escaped "$(sed -n 's/^magic //p' "$ENTRY")")"
  mask="$(hex_escaped "$(sed -n 's/^mask //p' "$ENTRY")")"
  interpreter="$(sed -n 's/^interpreter //p' "$ENTRY")"
  [[ "$magic" == *x* && "$mask" == *x* && -x "$interpreter" ]] \
    || die "cannot read $ENTRY to register it again with the F flag"
  log "registering qemu-aarch64 again with the F flag (it had flags: $(sed -n 's/^flags: //p' "$ENTRY"))"
  echo -1 >"$ENTRY"
  printf ':qemu-aarch64:M::%s:%s:%s:F\n' "$magic" "$mask" "$interpreter" >"$BINFMT/register"
}

main() {
  if [[ "$(uname -m)" == aarch64 ]]; then
    status
    return 0
  fi
  [[ "$(id -u)" == 0 ]] || die "installing and registering QEMU needs root; run it as root (or with sudo)"
  install_packages
  if [[ ! -e "$BINFMT/register" ]]; then
    log "mounting binfmt_misc on $BINFMT"
    mount -t binfmt_misc binfmt_misc "$BINFMT" || die "cannot mount binfmt_misc (a container needs --privileged)"
  fi
  [[ -e "$ENTRY" ]] || update-binfmts --enable qemu-aarch64 || die "update-binfmts --enable qemu-aarch64 failed"
  [[ "$(head -n 1 "$ENTRY")" == enabled ]] || echo 1 >"$ENTRY"
  grep -q '^flags:.*F' "$ENTRY" || register_with_fix_binary
  status
}

case "${1:-}" in
  "") main ;;
  status) status ;;
  *) die "unknown argument '$1'; use no argument (install and register) or 'status'" ;;
esac
