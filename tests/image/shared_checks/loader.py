"""The dynamic loader: Transformer Engine dlopens libnccl / libcudnn by soname, and must get torch's copies."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

LOADER_PROBE = r"""
import ctypes, glob, json, os, re, sysconfig
site = sysconfig.get_paths()["purelib"]
pip_libs = {}
for path in glob.glob(os.path.join(site, "nvidia", "*", "lib", "lib*.so.*")):
    if re.match(r"^lib(nccl|cudnn)\.so\.\d+$", os.path.basename(path)):
        pip_libs[os.path.basename(path)] = os.path.realpath(path)
loaded = {}
for soname in sorted(pip_libs):
    try:
        ctypes.CDLL(soname)
    except OSError as error:
        loaded[soname] = "dlopen failed: %s" % error
maps = [line.split()[-1] for line in open("/proc/self/maps") if "/" in line]
for soname in pip_libs:
    if soname not in loaded:
        loaded[soname] = sorted({p for p in maps if os.path.basename(p).startswith(soname)})
print(json.dumps({"pip_libs": pip_libs, "loaded": loaded}))
"""


def loader_problems(found: Mapping[str, Any]) -> list[str]:
    """Each soname that torch's pip packages ship loads from exactly that file, and no other copy."""
    problems = []
    for soname, pip_path in sorted(found["pip_libs"].items()):
        got = found["loaded"].get(soname)
        if isinstance(got, str):
            problems.append(f"{soname}: {got} (the loader does not know torch's copy; see docker/link-nvidia-libs.sh)")
        elif pip_path not in got:
            problems.append(f"{soname} loads from {got}, not from torch's pip package {pip_path}")
        elif len(got) > 1:
            problems.append(f"{soname}: two copies mapped: {got}")
    return problems
