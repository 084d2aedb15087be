"""Every seed a program draws with: the base seed (``--seed``), and from it one seed per tensor or per kind of data.

A seed is never written as arithmetic on another (``seed + 1``, ``7 + rank``): two such seeds collide as soon as
someone adds a third, and nobody can tell what a number was for. Tensors are seeded by their names, data by a
named purpose in DATA; both go through one hash, so the same name gives the same values on every machine,
process and run.
"""

from __future__ import annotations

import hashlib

DEFAULT_SEED = 1234
"""The base seed of the smoke, the bench and the bridge check when ``--seed`` is not given."""

SEEDS = 2**32
"""Base seeds are 0 … SEEDS - 1, well inside the 64 bits torch takes once megatron-core adds its per-rank offsets
(a seed beyond them failed in every rank, with a traceback)."""

DATA: dict[str, str] = {
    "smoke-batch": "the fixed global batch every smoke layout trains on",
    "bench-tokens": "the bench's training tokens, one stream per data-parallel rank (the same for every row)",
    "bridge-tokens": "the tokens the bridge check feeds both Megatron and transformers",
    "attention-fault": "the noise a planted `perturb` fault adds to an attention output (the same in every run)",
}
"""The kinds of data the programs draw, and what each is for."""


def seed_for(name: str, base_seed: int) -> int:
    """A 63-bit seed from a tensor's name (a global parameter name, a checkpoint tensor name) and a base seed."""
    digest = hashlib.sha256(f"{base_seed}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def data_seed(purpose: str, base_seed: int, stream: int = 0) -> int:
    """The seed of one kind of data in DATA (``stream``: one per data-parallel rank where each draws its own).
    Its name, ``data/<purpose>/<stream>``, holds a '/', which no parameter or checkpoint tensor name does."""
    if purpose not in DATA:
        raise KeyError(f"unknown data purpose {purpose!r}: add it to smoke.kit.seeds.DATA with what it is for")
    return seed_for(f"data/{purpose}/{stream}", base_seed)


def seed_problem(seed: int) -> str | None:
    """Why ``--seed`` cannot be a base seed, as one line with the fix (None when it can)."""
    return None if 0 <= seed < SEEDS else f"--seed {seed} is out of range: give 0 … {SEEDS - 1}"
