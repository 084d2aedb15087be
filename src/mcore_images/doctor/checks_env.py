"""Environment variables and pip settings that megatron-core trips over at run or install time."""

from __future__ import annotations

import re
from pathlib import Path

from mcore_images.catalogue.flash_attention import MEGATRON_SETS, NVTE_VARIABLES
from mcore_images.doctor import probes
from mcore_images.doctor.model import Context, Outcome, Status, check, ok, skip, trip, warn

BLACKWELL = 100  # from sm_100 on, megatron-core no longer needs CUDA_DEVICE_MAX_CONNECTIONS=1


@check(
    "env.cuda-max-connections",
    Status.WARN,
    "export CUDA_DEVICE_MAX_CONNECTIONS=1 for TP > 1 or CP > 1 on Hopper and older (leave it unset for FSDP)",
    isolated=True,  # asks the driver for the GPUs
)
def cuda_max_connections(ctx: Context) -> Outcome:
    """CUDA_DEVICE_MAX_CONNECTIONS=1 for TP/CP on pre-Blackwell GPUs (megatron.training asserts on it)."""
    value = ctx.environ.get("CUDA_DEVICE_MAX_CONNECTIONS")
    gpus = probes.gpu_info(ctx).gpus
    if not gpus:
        return skip(f"no GPU here (CUDA_DEVICE_MAX_CONNECTIONS={value})")
    if all(g.cc >= BLACKWELL for g in gpus):
        if value == "1":
            return warn(
                "CUDA_DEVICE_MAX_CONNECTIONS=1 on Blackwell: not needed there, and it serialises FSDP "
                "communication",
                "unset CUDA_DEVICE_MAX_CONNECTIONS on Blackwell",
                value=value,
            )
        return ok(f"Blackwell GPUs: CUDA_DEVICE_MAX_CONNECTIONS={value} is fine", value=value)
    if value != "1":
        return trip(
            f"CUDA_DEVICE_MAX_CONNECTIONS={value} on sm_{min(g.cc for g in gpus)}: TP/CP runs assert "
            "(megatron.training) or lose comm/compute overlap ordering",
            value=value,
        )
    return ok("CUDA_DEVICE_MAX_CONNECTIONS=1 for TP/CP on pre-Blackwell GPUs", value=value)


@check(
    "env.nvte-attn",
    Status.FAIL,
    "unset NVTE_FLASH_ATTN NVTE_FUSED_ATTN NVTE_UNFUSED_ATTN and choose the "
    "backend with attention_backend (--attention-backend)",
)
def nvte_attention(ctx: Context) -> Outcome:
    """No stale NVTE_*_ATTN values: megatron-core asserts they match attention_backend (default auto)."""
    values = {name: ctx.environ.get(name) for name in NVTE_VARIABLES}
    set_values = {k: v for k, v in values.items() if v is not None}
    if not set_values:
        return ok("NVTE_FLASH_ATTN / NVTE_FUSED_ATTN / NVTE_UNFUSED_ATTN unset", **values)
    fits = [
        name
        for name, expected in MEGATRON_SETS.items()
        if all(v is None or v == str(e) for v, e in zip(values.values(), expected, strict=True))
    ]
    shown = " ".join(f"{k}={v}" for k, v in set_values.items())
    if "auto" in fits:
        return ok(f"{shown} agrees with the default attention_backend=auto", **values)
    if fits:
        return warn(
            f"{shown}: megatron-core asserts unless attention_backend is {' or '.join(fits)} "
            "(the default, auto, fails)",
            **values,
        )
    return trip(
        f"{shown} matches no attention_backend: megatron-core's assertion fails for every backend", **values
    )


STACK = re.compile(
    r"(torch|transformer[-_]engine\S*|megatron[-_]core|apex|flash[-_]attn|nvidia-\S+|triton)"
    r"\s*(==|<=|<|~=|>=)",
    re.IGNORECASE,
)


def constraint_files(ctx: Context) -> list[Path]:
    """PIP_CONSTRAINT (space-separated) plus NGC's /etc/pip/constraint.txt."""
    files = [Path(p) for p in ctx.environ.get("PIP_CONSTRAINT", "").split() if p]
    ngc = ctx.etc / "pip" / "constraint.txt"
    return [f for f in dict.fromkeys([*files, ngc]) if f.is_file()]


@check(
    "pip.constraint",
    Status.WARN,
    "install past the pins on purpose: PIP_CONSTRAINT= pip install ... "
    "(and keep the pinned torch unless you rebuild everything against a new one)",
)
def pip_constraint(ctx: Context) -> Outcome:
    """No pip constraint file (NGC's /etc/pip/constraint.txt) silently pins the training stack."""
    files = constraint_files(ctx)
    if not files:
        return ok("no pip constraint file (PIP_CONSTRAINT unset, no /etc/pip/constraint.txt)")
    pins: dict[str, list[str]] = {}
    for path in files:
        lines = [line.split("#")[0].strip() for line in path.read_text(errors="replace").splitlines()]
        pins[str(path)] = [line for line in lines if line and STACK.match(line)]
    pinned = [pin for found in pins.values() for pin in found]
    if not pinned:
        return ok(f"{', '.join(pins)} pins nothing in the training stack", pins=pins)
    return trip(
        f"{', '.join(pins)} pins {len(pinned)} stack packages ({', '.join(pinned[:4])}"
        f"{', ...' if len(pinned) > 4 else ''}): pip refuses or quietly keeps other versions",
        pins=pins,
    )
