#!/usr/bin/env bash
# Run a command as root on a fresh Debian bookworm — the machine .ci/run is written for — from a
# GitHub-hosted Ubuntu runner, where .ci/docker-engine.sh cannot run on the host (it installs
# Debian's containerd next to the runner's containerd.io and reads Debian trixie's archive keyring).
#
# A privileged debian:bookworm container gets this checkout at /src; inside it .ci/docker-engine.sh
# installs and starts its own dockerd (Docker in Docker), whose state lives on the runner's large
# /mnt disk. Only what a bare Debian image lacks is installed here (git, make, a Python venv);
# everything else is .ci/run's own business, so CI on GitHub and CI on our machines run one script.
#
#   bash .github/scripts/in-debian.sh bash .ci/run
set -euo pipefail
(($#)) || { echo "usage: $0 COMMAND [ARGS...]" >&2; exit 2; }
cd "$(dirname "$0")/../.."
image="${DEBIAN_IMAGE:-debian:bookworm}"
state="${DOCKER_STATE_DIR:-/mnt/mcore-images-docker}"
if ((EUID)); then sudo mkdir -p "$state"; else mkdir -p "$state"; fi

# Runs inside the container, as root. With cgroup v2, this shell first leaves the container's root
# cgroup so the inner dockerd may enable controllers for the containers it starts (what the
# docker:dind image's entrypoint does). Expanded by the container's bash, hence single quotes.
# shellcheck disable=SC2016
prepare='set -euo pipefail
if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
  mkdir -p /sys/fs/cgroup/init
  xargs -rn1 </sys/fs/cgroup/cgroup.procs >/sys/fs/cgroup/init/cgroup.procs || true
  sed -e "s/ / +/g" -e "s/^/+/" </sys/fs/cgroup/cgroup.controllers >/sys/fs/cgroup/cgroup.subtree_control
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
  ca-certificates debian-archive-keyring git make python3 python3-venv >/dev/null
python3 -m venv /opt/venv
export PATH="/opt/venv/bin:$PATH"
git config --global --add safe.directory /src
exec "$@"'

exec docker run --rm --privileged -e CI -e GITHUB_ACTIONS \
  -v "$PWD:/src" -w /src -v "$state:/var/lib/mcore-images-docker" \
  "$image" bash -c "$prepare" in-debian "$@"
