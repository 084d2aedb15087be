#!/usr/bin/env bash
# Run one CI phase and print its duration: phase.sh NAME COMMAND...
set -uo pipefail
name="$1"
shift
start=$(date +%s)
echo "::phase ${name}: start $(date -u +%H:%M:%S)"
"$@"
rc=$?
echo "::phase ${name}: $(( $(date +%s) - start )) s (exit ${rc})"
exit "$rc"
