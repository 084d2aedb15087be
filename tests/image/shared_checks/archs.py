"""The GPU architectures an image declares against the device code its kernel binaries carry.

The declared list is the image's ``io.mcore-images.cuda-archs`` label; an image built before bake set that label
(it has none) is judged by its stack's ``cuda_archs`` in env/stacks.json, which is what the label is made from.
The binaries are read inside the image by the doctor's fatbin reader (mcore_images/doctor/fatbin.py, standard
library only, run as a script: a kernels image has no tooling installed), and judged here by two rules:

- compiled in this image's build (apex from its source; TE's PyTorch extension where ``te_source`` is build):
  exactly the declared architectures, since the build is given that list (TORCH_CUDA_ARCH_LIST) and nothing else.
  TE's extension is host C++ only (a CppExtension of .cpp files), so it may carry no device code at all; apex's
  CUDA extensions must carry some.
- prebuilt (TE's core library from its transformer-engine-cuXX wheel, anything from the NGC base): at least the
  declared architectures, each with a cubin that runs on it. Its builder chose a wider list (TE's wheels carry
  sm_70/75 to sm_120), which costs only size; what matters is that no declared GPU lacks code.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mcore_images.catalogue import gpu_archs, images
from mcore_images.catalogue.components import FROM_BASE, NONE
from mcore_images.catalogue.stacks import Stack
from mcore_images.doctor import fatbin
from tests.image.utils.docker import ImageInfo

HOST_ONLY = {"te-torch"}
"""Kinds of binary that may carry no device code: TE's PyTorch extension has no .cu sources (its sdist's
build_tools/pytorch.py builds a CppExtension), whatever NVTE_CUDA_ARCHS says."""


def declared(image: ImageInfo, stack: Stack) -> tuple[list[str], str]:
    """The architectures the image declares, and where they were read."""
    text = image.label(gpu_archs.LABEL)
    if text is not None:
        return gpu_archs.parse(text), f"label {images.label(gpu_archs.LABEL)}"
    return gpu_archs.parse(stack.cuda_archs), (f"env/stacks.json's cuda_archs of stack {stack.name} (the image has no "
                                              f"{images.label(gpu_archs.LABEL)} label)")


def compiled_here(stack: Stack) -> set[str]:
    """The kinds of kernel binary the stack's own build compiles (the others come prebuilt)."""
    kinds = {"te-torch"} if stack.te_source == "build" else set()
    return kinds | ({"apex"} if stack.apex not in (NONE, FROM_BASE) else set())


def scan(run: Any) -> list[dict[str, Any]]:
    """Every kernel binary of the image with its architectures: fatbin.py run in the image (`run` is a testinfra
    host's run)."""
    result = run("timeout 600 python -c %s", Path(fatbin.__file__).read_text())
    if result.rc != 0:
        raise AssertionError(f"the fatbin reader failed in the image (exit {result.rc}): "
                             f"{result.stderr.strip()[-1500:]}")
    return list(json.loads(result.stdout)["binaries"])


def problems(binaries: Sequence[dict[str, Any]], archs: Sequence[str], compiled: set[str]) -> list[str]:
    """Each binary whose device code breaks its rule against the declared architectures, one line each."""
    out = []
    if not binaries:
        out.append("no kernel binary found (neither TE's library nor apex's extensions): nothing serves a GPU")
    listed = ";".join(archs)
    for entry in binaries:
        kind, name, found = entry["kind"], Path(entry["path"]).name, fatbin.from_scan(entry)
        if kind in compiled:
            if found.empty:
                if kind not in HOST_ONLY:
                    out.append(f"{name} ({kind}, compiled here) carries no device code; the build was given {listed}")
                continue
            wrong = [f"lacks {a}" for a in fatbin.missing(found, archs)]
            wrong += [f"has undeclared {a}" for a in fatbin.undeclared(found, archs)]
            if wrong:
                out.append(f"{name} ({kind}, compiled here: exactly {listed}) {', '.join(wrong)}; "
                           f"it carries {found.describe()}")
        elif lacking := fatbin.missing(found, archs):
            out.append(f"{name} ({kind}, prebuilt: at least {listed}) has no cubin for {', '.join(lacking)}; "
                       f"it carries {found.describe()}")
    return out


def unserved(binaries: Sequence[dict[str, Any]]) -> str | None:
    """The first architecture of the table that some binary with device code carries no cubin for: what a wrong
    declaration adds to make the check fail (None when every binary serves every known architecture)."""
    carrying = [fatbin.from_scan(e) for e in binaries if not fatbin.from_scan(e).empty]
    return next((str(a.sm) for a in gpu_archs.TABLE if any(fatbin.missing(found, [str(a.sm)]) for found in carrying)),
                None)
