"""Megatron-Core checks that ship inside every image: three programs on one runtime kit.

- ``python -m mcore_images.smoke``: real training steps on every parallel layout that fits, cross-layout parity,
  a certificate (this package's top-level modules);
- ``python -m mcore_images.smoke.bridge``: Hugging Face <-> Megatron through mbridge / Megatron-Bridge
(src/mcore_images/smoke/bridge/);
- ``python -m mcore_images.smoke.bench``: training throughput of reference models, gated
(src/mcore_images/smoke/bench/);
- ``python -m mcore_images.smoke.verl_step``: verl's own Megatron engine and one GRPO step of verl's trainer on a
  tiny model made on the spot (src/mcore_images/smoke/verl_step/; app images, one GPU);
- ``smoke.kit``: what all three stand on (bootstrap, the one GPT builder, tolerances, seeds, environment facts).

They import torch, megatron-core (TE and the bridges when present), the standard library and, from the
tooling, only its standard-library data modules (``mcore_images.catalogue.components``, ``mcore_images.schemas``).
The pure modules (layouts, shards, judge, certificate, kit.errors, kit.numerics, kit.seeds, kit.gpt_builder,
bridge.spec, bench.model, bench.gate) import without torch, so host tests and ``--dry-run`` work anywhere.
"""

__version__ = "0.2.0"
