"""The runtime kit the smoke's programs stand on (the smoke, its attention check, the bench, the bridge check, the
verl step and the wgrad-fusion check).

- ``errors``: exit codes and CouldNotRun;
- ``numerics``: which math a run uses (fp32, TF32, bf16) and the tolerances built on its unit roundoff;
- ``seeds``: the base seed, and from it one seed per tensor name or named kind of data;
- ``envinfo``: the software and hardware a run used (packages from the component catalogue);
- ``gpus``: how many GPUs the machine shows;
- ``transformer_engine``: whether TE is usable here, and what it chose;
- ``accumulation``: whether megatron-core's gradient accumulation fusion is on, and who provides it;
- ``releases``: keyword arguments filtered to what this megatron-core (or torch) release takes;
- ``bootstrap``: the one Megatron bootstrap (process group, parallel state, DDP + optimizer, a step);
- ``model_size`` and ``gpt_builder``: the one GPT builder (config, decoder spec, model chunks) of the smoke and the
  bench;
- ``cpu_shim``: megatron-core's CUDA device picks redirected to the CPU, for CI's gloo runs;
- ``collectives``, ``determinism``, ``lifetime``, ``stdout``: collectives watched for hangs, deterministic settings,
  helper processes tied to their parent, one JSON report on stdout;
- ``checkpointing``: megatron-core's distributed checkpoints (save, verify, load);
- ``folders``: the folders checkpoints go to: checked writable at start, held by one job at a time;
- ``sections``: the certificate's sections, each registered by its program.

``errors``, ``numerics``, ``seeds``, ``folders``, ``releases``, ``model_size``, ``gpt_builder`` and ``sections``
import without torch (host tests and dry runs use them).
"""
