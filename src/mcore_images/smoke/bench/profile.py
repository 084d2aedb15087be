"""Where a bench step's time goes: a few steps under torch.profiler, device time grouped by kind of kernel.

On GPUs the groups sum the CUDA kernels' own durations (memcpy/memset included) per step, and
``idle`` is what is left of the median step time: time the GPU waited for the host (launch overhead,
host-device synchronisation such as MoE's token counts) or on a collective. On CPU runs (tests) the
groups sum the operators' self CPU time. ``KINDS`` is first-match-wins on the lower-cased name.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

KINDS: tuple[tuple[str, str], ...] = (
    ("communication", r"nccl|all_?reduce|all_?gather|reduce_?scatter|alltoall|all_to_all|c10d|gloo"),
    ("attention", r"flash|fmha|fused_attn|attn|sdpa|scaled_dot_product|cudnn"),
    ("gemm", r"gemm|cutlass|cublas|nvjet|xmma|wgmma|matmul|aten::mm|aten::bmm|aten::addmm|aten::linear|gemv"),
    ("moe routing/permute", r"permut|moe|topk|sort|radix|histc|bincount|cumsum|index_add|scatter|gather|nonzero"
                            r"|unique|index_select|masked_select|router"),
    ("optimizer", r"adam|multi_tensor|l2norm|optimizer"),
    ("norm", r"norm"),
    ("cross-entropy/softmax", r"cross_entropy|softmax|log_softmax|nll_loss"),
    ("memcpy/memset", r"memcpy|memset|copy_|aten::to\b|aten::_to_copy"),
    ("elementwise", r"elementwise|vectorized|unrolled|reduce_kernel|fill|silu|swiglu|gelu|rope|rotary|cast|dropout"
                    r"|aten::(add|mul|sub|div|sum|mean|cat|neg|exp|pow|fill|zero)"),
)


def kind_of(name: str) -> str:
    lowered = name.lower()
    for kind, pattern in KINDS:
        if re.search(pattern, lowered):
            return kind
    return "other"


def _device_events(prof: Any) -> list[tuple[str, float]]:
    """(kernel name, microseconds) for every device-side event of the profile."""
    from torch.autograd import DeviceType

    out = []
    for evt in prof.events():
        if getattr(evt, "device_type", None) == DeviceType.CUDA:
            out.append((evt.name, float(evt.time_range.elapsed_us())))
    return out


def _cpu_ops(prof: Any) -> list[tuple[str, float]]:
    """(operator, self CPU microseconds), summed over calls."""
    return [(e.key, float(e.self_cpu_time_total)) for e in prof.key_averages() if e.self_cpu_time_total > 0]


def summarise(events: list[tuple[str, float]], steps: int, step_ms: float, top: int = 8) -> dict[str, Any]:
    """Per-step milliseconds by kind and for the heaviest kernels; ``idle`` = step time not covered."""
    kinds: dict[str, float] = {}
    names: dict[str, float] = {}
    for name, us in events:
        kinds[kind_of(name)] = kinds.get(kind_of(name), 0.0) + us
        names[name] = names.get(name, 0.0) + us
    per_step = {k: v / 1000.0 / steps for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])}
    busy = sum(per_step.values())
    heaviest = sorted(names.items(), key=lambda kv: -kv[1])[:top]
    return {
        "steps": steps, "step_ms": step_ms, "busy_ms": busy, "idle_ms": max(step_ms - busy, 0.0),
        "kinds_ms": per_step,
        "top": [{"name": n[:120], "kind": kind_of(n), "ms": us / 1000.0 / steps} for n, us in heaviest],
    }


def steps(step: Callable[[], Any], *, steps: int, cpu: bool, step_ms: float) -> dict[str, Any]:
    """Profile ``steps`` more training steps; their summary against the median step time measured before
    (the profiler's own overhead does not count against the step)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] if cpu else [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    with profile(activities=activities) as prof:
        for _ in range(steps):
            step()
        if not cpu:
            torch.cuda.synchronize()
    events = _cpu_ops(prof) if cpu else _device_events(prof)
    summary = summarise(events, steps, step_ms)
    summary["source"] = "operators' self CPU time" if cpu else "CUDA kernel durations"
    return summary


def render(summary: dict[str, Any]) -> str:
    """A Markdown table: each kind's ms per step and share of the step, then the heaviest kernels."""
    step = summary["step_ms"] or 1.0
    lines = [f"| kind ({summary['source']}) | ms/step | share of step |", "|---|---|---|"]
    for kind, ms in summary["kinds_ms"].items():
        lines.append(f"| {kind} | {ms:.1f} | {ms / step:.1%} |")
    lines.append(f"| not covered by a kernel (idle) | {summary['idle_ms']:.1f} | {summary['idle_ms'] / step:.1%} |")
    lines += ["", "| heaviest | kind | ms/step |", "|---|---|---|"]
    lines += [f"| `{t['name']}` | {t['kind']} | {t['ms']:.1f} |" for t in summary["top"]]
    return "\n".join(lines)
