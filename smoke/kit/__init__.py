"""The runtime kit the three programs stand on (the smoke, smoke.bridge, smoke.bench).

- ``errors``: exit codes and CouldNotRun;
- ``numerics``: which math a run uses (fp32, TF32, bf16) and the tolerances built on its unit roundoff;
- ``seeds``: one name-seeded generator for every tensor a check draws;
- ``envinfo``: the software and hardware a run used (packages from the component catalogue);
- ``transformer_engine``: whether TE is usable here, and what it chose;
- ``bootstrap``: the one Megatron bootstrap (process group, parallel state, model, DDP + optimizer, a step);
- ``cpu_shim``: megatron-core's CUDA device picks redirected to the CPU, for CI's gloo runs;
- ``checkpointing``: megatron-core's distributed checkpoints (save, verify, load);
- ``folders``: the folders checkpoints go to: checked writable at start, held by one job at a time.

``errors``, ``numerics``, ``seeds`` and ``folders`` import without torch (host tests and dry runs use them).
"""
