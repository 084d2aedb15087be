#!/bin/sh
# pip (install, wheel, ...) inside a build step, with the optional build secrets applied for this call only.
#   /run/secrets/ca_bundle      a CA bundle for TLS-intercepting proxies (PIP_CERT)
#   /run/secrets/pip_index_url  an index URL that may carry a token (PIP_INDEX_URL)
# Secrets are mounted by `RUN --mount=type=secret`; they never reach a layer.
set -eu
if [ -s /run/secrets/ca_bundle ]; then
  PIP_CERT=/run/secrets/ca_bundle
  export PIP_CERT
fi
if [ -s /run/secrets/pip_index_url ]; then
  PIP_INDEX_URL="$(cat /run/secrets/pip_index_url)"
  export PIP_INDEX_URL
fi
exec python -m pip --disable-pip-version-check --no-input "$@"
