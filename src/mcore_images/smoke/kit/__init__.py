"""The runtime kit the three programs stand on (the smoke, smoke.bridge, smoke.bench).

- ``errors``: exit codes and CouldNotRun;
- ``numerics``: which math a run uses (fp32, TF32, bf16) and the tolerances built on its unit roundoff;
- ``seeds``: the base seed, and from it one seed per tensor name or named kind of data;
- ``envinfo``: the software and hardware a run used (packages from the component catalogue);
- ``transformer_engine``: whether TE is usable here, and what it chose;
- ``releases``: keyword arguments filtered to what this megatron-core (or torch) release takes;
- ``bootstrap``: the one Megatron bootstrap (process group, parallel state, DDP + optimizer, a step);
- ``gpt_builder``: the one GPT builder (config, decoder spec, model chunks) of the smoke and the bench;
- ``cpu_shim``: megatron-core's CUDA device picks redirected to the CPU, for CI's gloo runs;
- ``checkpointing``: megatron-core's distributed checkpoints (save, verify, load);
- ``folders``: the folders checkpoints go to: checked writable at start, held by one job at a time.

``errors``, ``numerics``, ``seeds``, ``folders``, ``releases`` and ``gpt_builder`` import without torch (host
tests and dry runs use them).
"""
