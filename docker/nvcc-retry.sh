#!/bin/sh
# nvcc wrapper: runs nvcc through ccache and retries a compile that the kernel's OOM killer
# ended (exit 137 = SIGKILL), after a back-off that lets sibling jobs finish and free memory.
# Any other failure is a real compile error and is returned at once.
set -u
real="${MCORE_REAL_NVCC:?set MCORE_REAL_NVCC to the nvcc this wrapper calls}"
attempts="${MCORE_NVCC_RETRIES:-3}"
delay=10
i=1
while :; do
  if command -v ccache >/dev/null 2>&1; then
    ccache "$real" "$@"
  else
    "$real" "$@"
  fi
  rc=$?
  if [ "$rc" -ne 137 ] || [ "$i" -ge "$attempts" ]; then
    exit "$rc"
  fi
  echo "nvcc-retry: compile killed (likely out of memory), attempt $i of $attempts; retrying in ${delay}s" >&2
  sleep "$delay"
  i=$((i + 1))
  delay=$((delay * 2))
done
