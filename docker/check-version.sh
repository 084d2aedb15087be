#!/bin/sh
# Fail the build step when what is installed differs from the pin: check-version.sh DIST PIN.
# DIST 'python' compares the interpreter's major.minor; PIN 'none' asserts DIST is absent.
set -eu
python - "$1" "$2" <<'PY'
import re
import sys
from importlib import metadata

dist, pin = sys.argv[1], sys.argv[2]


def release(version: str) -> str:
    return re.match(r"\d+(\.\d+)*", version).group(0)


if dist == "python":
    have = f"{sys.version_info.major}.{sys.version_info.minor}"
else:
    try:
        have = metadata.version(dist)
    except metadata.PackageNotFoundError:
        have = "none"
if pin == "none":
    ok = have == "none"
else:
    ok = have != "none" and release(have) == release(pin)
print(f"check-version: {dist} installed {have}, pinned {pin}: {'ok' if ok else 'MISMATCH'}")
sys.exit(0 if ok else 1)
PY
