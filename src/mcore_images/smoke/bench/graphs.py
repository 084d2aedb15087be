"""CUDA graphs in a bench row: capture after the warm-up, say what was captured, release it for the next row.

megatron-core offers two captures (``cuda_graph_impl``, model.py GRAPH_IMPLS). Its own (``local``) records each layer
in the first training step and captures at that step's end, inside the schedule; Transformer Engine's
(``transformer_engine``) is driven by the training loop, as Megatron-LM's ``train`` does: a ``TECudaGraphHelper``
over the model chunks, ``create_cudagraphs()`` once the warm-up steps ran, then ``cuda_graph_set_manual_hooks()``.
Both keep process-wide state (megatron's global graph record, the micro-batch calculator TE's capture reads), so a
row releases what it captured before the next row builds. Imported on GPU runs only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

WARMUP_NEEDED = 2
"""Untimed steps a graphed row needs: one that records (megatron's capture) or runs eager before TE's capture, and
one that replays, so that no capture falls into the timed steps."""


@dataclass
class Capture:
    """One row's graphs: which capture, and TE's helper once it ran."""

    impl: str
    helper: Any = None
    calculator: bool = False
    notes: list[str] = field(default_factory=list)


def after_first_step(capture: Capture, chunks: list[Any], config: Any, opt: Any, *, seq: int, micro_batch: int,
                     micro_batches: int, dp: int) -> None:
    """Transformer Engine's capture, once eager steps have run (megatron's own has captured by now by itself)."""
    if capture.impl != "transformer_engine":
        return
    import torch
    from megatron.core import num_microbatches_calculator as calculator
    from megatron.core.transformer.cuda_graphs import TECudaGraphHelper

    # TE's capture reads how many micro-batches a step has from megatron's calculator, which megatron.training sets.
    calculator.unset_num_microbatches_calculator()
    calculator.init_num_microbatches_calculator(torch.distributed.get_rank(), None, micro_batch * micro_batches * dp,
                                                micro_batch, dp)
    capture.calculator = True
    capture.helper = TECudaGraphHelper(model=chunks, config=config, seq_length=seq, micro_batch_size=micro_batch,
                                       optimizers=[opt])
    capture.helper.create_cudagraphs()
    capture.helper.cuda_graph_set_manual_hooks()


def captured(capture: Capture, chunks: list[Any]) -> dict[str, Any]:
    """What was captured: ``captured`` (at least one graph), ``graphs`` (their number) and how that was read."""
    if capture.impl == "transformer_engine":
        layers = [m for chunk in chunks for m in chunk.modules() if getattr(m, "cuda_graphs", None)]
        count = sum(len(m.cuda_graphs) for m in layers)
        return {"captured": count > 0, "graphs": count, "layers": len(layers),
                "how": "TE's make_graphed_callables: graphs held by the layers (TransformerLayer.cuda_graphs)"}
    runners = [r for chunk in chunks for m in chunk.modules()
               for manager in (getattr(m, name, None) for name in ("cudagraph_manager", "cudagraph_manager_router",
                                                                   "cudagraph_manager_postprocess"))
               if manager is not None for r in manager.cudagraph_runners]
    made = [r for r in runners if getattr(r, "fwd_graph", None) is not None]
    return {"captured": bool(made), "graphs": len(made) + sum(getattr(r, "bwd_graph", None) is not None for r in made),
            "layers": len(made), "how": "megatron-core's CudaGraphManager: runners with a captured forward graph"}


def release(capture: Capture) -> None:
    """Free this row's graphs and the process-wide state their capture set."""
    if capture.impl == "transformer_engine":
        if capture.helper is not None and capture.helper.graphs_created():
            capture.helper.delete_cuda_graphs()
    else:
        from megatron.core.transformer import cuda_graphs

        cuda_graphs.delete_cuda_graphs()
    if capture.calculator:
        from megatron.core import num_microbatches_calculator as calculator

        calculator.unset_num_microbatches_calculator()
