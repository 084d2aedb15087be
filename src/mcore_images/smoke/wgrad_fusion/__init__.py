"""``python -m mcore_images.smoke.wgrad_fusion``: megatron-core's gradient accumulation fusion, checked through
megatron-core's own ColumnParallelLinear and RowParallelLinear (their backward is the contract the module serves),
against the exact sum; on a GPU also timed beside torch's unfused alternatives."""
