"""A process that imports megatron-core compiles nothing on its way in. megatron-core's inference contexts import
flashinfer where the image has it (a vLLM app image), flashinfer imports apache-tvm-ffi, and tvm-ffi compiles
torch's DLPack exchange addon at import wherever torch lacks it (torch before 2.10) and no prebuilt one is
installed: 26 s of every rank's start on 2 cores, a compiler needed at run time, and ranks that start together
waiting on one build lock (env/locks: torch-c-dlpack-ext, src/mcore_images/resolve/layer_requirements.py)."""

from __future__ import annotations

from typing import Any

import pytest

from mcore_images.resolve.layer_requirements import NATIVE_DLPACK_EXCHANGE_TORCH

PROBE = ("import megatron.core, torch, tvm_ffi; "
         "print('exchange-api', hasattr(torch.Tensor, '__dlpack_c_exchange_api__'))")
IMPORT_IN_AN_EMPTY_CACHE = (f'cache=$(mktemp -d) && TVM_FFI_CACHE_DIR="$cache" python -c "{PROBE}" '
                            '&& echo built: $(ls -A "$cache")')
"""Import megatron-core with tvm-ffi's build cache pointed at a new empty folder; print whether torch has the
exchange API, then what the import built into that folder."""


def test_importing_megatron_core_compiles_no_tvm_ffi_addon(host: Any, facts: dict[str, Any]) -> None:
    """Before: in app-debian-verl (torch 2.9) every `import megatron.core` built
    libtorch_c_dlpack_addon_torch29-cpu.so (31.5 s on 2 cores; 5.7 s with the prebuilt addon)."""
    if "apache-tvm-ffi" not in facts["dists"]:
        pytest.skip("no apache-tvm-ffi in this image: nothing compiles at import")
    done = host.run(IMPORT_IN_AN_EMPTY_CACHE)
    assert done.rc == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert "exchange-api True" in lines, f"torch has no DLPack exchange API after the import:\n{done.stdout}"
    built = next(line for line in lines if line.startswith("built:")).removeprefix("built:").split()
    assert not built, (f"importing megatron.core compiled {built}: install torch-c-dlpack-ext (its prebuilt addon) "
                       f"where torch is older than {NATIVE_DLPACK_EXCHANGE_TORCH}")
