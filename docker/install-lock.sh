#!/bin/sh
# Install one layer's hashed lock (env/locks/<stack>/<layer>.txt, mounted as the first argument)
# with --no-deps, then the wheels this build compiled (optional second argument: a folder).
# A lock is a complete closure computed ahead of time, so nothing is resolved here and no
# package installed by a lower layer (torch above all) can be replaced. pip check ends it, judged by
# pip-check.py (mounted beside this script) with the lock's declared overrides.
set -eu
lock="$1"
wheels="${2:-}"
here="$(dirname "$0")"
[ -f "$lock" ] || { echo "install-lock: $lock is missing; run \`mcore-images lock\`" >&2; exit 1; }
head -n 1 "$lock"
count="$(grep -c '^[A-Za-z0-9].*==' "$lock" || true)"
if [ "$count" -gt 0 ]; then
  echo "install-lock: $count pinned packages"
  sh "$here/pip.sh" install --no-deps --require-hashes -r "$lock"
else
  echo "install-lock: this layer installs nothing from PyPI"
fi
if [ -n "$wheels" ] && ls "$wheels"/*.whl >/dev/null 2>&1; then
  echo "install-lock: local wheels:" "$wheels"/*.whl
  sh "$here/pip.sh" install --no-deps --no-index --no-cache-dir "$wheels"/*.whl
fi
# The lock's header names the stack's declared overrides: pip-check.py excepts those requirements alone.
python "$here/pip-check.py" "$lock" || { echo "install-lock: pip check found broken requirements (above)" >&2; exit 1; }
