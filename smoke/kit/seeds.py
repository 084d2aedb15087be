"""One seed function for every tensor a check draws: the same values on every machine, process and run."""

from __future__ import annotations

import hashlib


def seed_for(name: str, base_seed: int) -> int:
    """A 63-bit seed from a tensor's name (a global parameter name, a checkpoint tensor name) and a base seed."""
    digest = hashlib.sha256(f"{base_seed}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)
