"""Megatron-Core checks that ship inside every image: six programs on one runtime kit.

- ``python -m mcore_images.smoke``: real training steps on every parallel layout that fits, cross-layout parity,
  a certificate (this package's top-level modules);
- ``python -m mcore_images.smoke.bridge``: Hugging Face <-> Megatron through mbridge / Megatron-Bridge
(src/mcore_images/smoke/bridge/);
- ``python -m mcore_images.smoke.bench``: training throughput of reference models, gated
(src/mcore_images/smoke/bench/);
- ``python -m mcore_images.smoke.attention``: every attention backend against an fp32 reference, forward and backward
(src/mcore_images/smoke/attention/; the smoke's launcher runs it after the runs, the doctor its probe);
- ``python -m mcore_images.smoke.verl_step``: verl's own Megatron engine and one GRPO step of verl's trainer on a
  tiny model made on the spot (src/mcore_images/smoke/verl_step/; app images, one GPU); its ``trainer_imports``
  checks that every package verl's trainer imports is installed;
- ``python -m mcore_images.smoke.wgrad_fusion``: megatron-core's gradient accumulation fusion through its own layers
  against the exact sum (src/mcore_images/smoke/wgrad_fusion/);
- ``smoke.kit``: what they all stand on (bootstrap, the one GPT builder, tolerances, seeds, environment facts, the
  GPU count, and the registry of the certificate's sections).

The smoke writes the certificate (``certificate``: data/certificate.schema.json's smoke document, checked with
jsonschema); the attention check, the bench, the bridge check and the verl step each add a section to it through a
``section`` module in their package that registers with ``kit.sections`` (its key, its schema identifier, its
Markdown), so the certificate names no program and any program renders it whole.

They import torch, megatron-core (TE and the bridges when present), the standard library and, from the
tooling, only modules that stand on the standard library (packaging aside, through versions):
``mcore_images.catalogue.components``, ``mcore_images.catalogue.gpu_archs``, ``mcore_images.catalogue.platforms``,
``mcore_images.catalogue.flash_attention``, ``mcore_images.catalogue.versions``,
``mcore_images.catalogue.wgrad_fusion``, ``mcore_images.schemas``, ``mcore_images.errors``,
``mcore_images.create_only``, ``mcore_images.reading`` and ``mcore_images.options`` (tests/unit/repo/test_layout.py
keeps the list).

The pure modules (layouts, shards, judge, certificate, kit.errors, kit.numerics, kit.seeds, kit.model_size,
kit.gpt_builder, kit.sections and every program's section, bridge.spec, bench.model, bench.gate, attention.cases,
attention.table, verl_step.spec) import without torch, so host tests and ``--dry-run`` work anywhere.
"""
