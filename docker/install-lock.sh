#!/bin/sh
# Install one layer's hashed lock (env/locks/<stack>/<layer>.txt) with --no-deps, then the
# wheels this build compiled (optional second argument: a folder of wheels).
# A lock is a complete closure computed ahead of time, so nothing is resolved here and no
# package installed by a lower layer (torch above all) can be replaced.
set -eu
lock="$1"
wheels="${2:-}"
here="$(dirname "$0")"
stack_dir="$(dirname "$lock")"
if [ ! -d "$stack_dir" ] || [ "$(basename "$stack_dir")" = locks ]; then
  echo "install-lock: no locks at ${stack_dir}: is the STACK build arg set, and env/locks/<stack>/ committed?" >&2
  exit 1
fi
if [ -s "$lock" ]; then
  echo "install-lock: $(grep -c '==' "$lock") pinned packages from ${lock#/mnt/}"
  sh "$here/pip.sh" install --no-deps --require-hashes -r "$lock"
else
  echo "install-lock: no lock at ${lock#/mnt/}: this layer installs nothing from PyPI"
fi
if [ -n "$wheels" ] && ls "$wheels"/*.whl >/dev/null 2>&1; then
  echo "install-lock: local wheels:" "$wheels"/*.whl
  sh "$here/pip.sh" install --no-deps --no-index --no-cache-dir "$wheels"/*.whl
fi
python -m pip check || { echo "install-lock: pip check found broken requirements (above)" >&2; exit 1; }
