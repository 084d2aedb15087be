# shellcheck shell=bash
# What the .ci scripts share; each sources this file with its name for the messages:
#   source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" registry
CI_TAG="${1:?lib.sh needs the name of the script that sources it}"

log() { printf '[%s] %s\n' "$CI_TAG" "$*" >&2; }
die() { printf '[%s] error: %s\n' "$CI_TAG" "$*" >&2; exit 1; }

# install_host_packages PACKAGE...: apt-get install the Debian packages of this host that are missing. Their
# maintainer scripts may not start daemons through init scripts (policy-rc.d): the scripts start what they
# need themselves, with their own configuration.
install_host_packages() {
  local missing=() pkg
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
  done
  ((${#missing[@]})) || return 0
  log "installing host packages: ${missing[*]}"
  local policy=/usr/sbin/policy-rc.d made_policy=0 rc=0
  if [[ ! -e "$policy" ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && made_policy=1
  fi
  apt-get update -qq || rc=$?
  ((rc)) || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
    || rc=$?
  ((made_policy)) && rm -f "$policy"
  ((rc == 0)) || die "apt-get failed (exit $rc) installing ${missing[*]}"
}
