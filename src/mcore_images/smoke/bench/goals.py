"""One table of the bench's variant rows against the goals they are run for: `python -m mcore_images.smoke.bench.goals
BENCH.json…` (the bench.json files of one GPU call; .ci/gpu/bench-variants.sh writes them). Pure Python (no torch).

Each row: step ms (median, and the largest step's distance from it), TFLOP/s, MFU, peak memory measured and as
memory.py predicts it, the loss against the row it is compared with (graphs: eager; FP8: bf16), the goal that
applies to it and whether it is met. A goal none of the rows reaches is listed as not measured.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcore_images import reading
from mcore_images.errors import InputError
from mcore_images.options import OneLineParser


def step_spread(row: dict[str, Any]) -> float:
    """The largest distance of one timed step from the median step, relative to it."""
    median = row["step_ms_median"]
    return max(abs(t - median) for t in row["step_ms"]) / median


@dataclass(frozen=True)
class Goal:
    """A target one kind of row is run for: which rows (``applies``), what is measured, and the threshold."""

    name: str
    applies: Callable[[dict[str, Any]], bool]
    measure: Callable[[dict[str, Any]], float | None]
    at_least: float
    shown: str
    also: Callable[[dict[str, Any]], str | None] = lambda row: None
    """A second condition: why the row misses it, or None."""

    def verdict(self, row: dict[str, Any]) -> str:
        value = self.measure(row)
        if value is None:
            return f"{self.shown}: not measured"
        met = value >= self.at_least
        why = self.also(row)
        return f"{self.shown}: {'met' if met and not why else 'MISSED'} ({value:.3g}{'; ' + why if why else ''})"


def _mfu(row: dict[str, Any]) -> float | None:
    return row.get("mfu")


def _spread_problem(row: dict[str, Any]) -> str | None:
    spread = step_spread(row)
    return f"steps within ±{spread:.1%} of the median, over ±5 %" if spread > 0.05 else None


GOALS: tuple[Goal, ...] = (
    Goal("dense-1b 1×8 with graphs",
         lambda r: r["config"] == "dense-1b" and bool(r.get("cuda_graphs")) and r["precision"] == "bf16"
         and (r["micro_batch"], r["micro_batches"]) == (1, 8),
         _mfu, 0.55, "MFU ≥ 55 %, steps within ±5 %", _spread_problem),
    Goal("FP8 on the 8B shape",
         lambda r: r["config"] == "dense-8b" and r["precision"].startswith("fp8"),
         lambda r: (r.get("vs_bf16") or {}).get("speedup"), 1.35, "≥ 1.35× bf16"),
    Goal("dropless MoE",
         lambda r: r["config"] == "moe-olmoe-4l" and r.get("base_variant") == "dropless" and not r.get("cuda_graphs"),
         _mfu, 0.30, "MFU ≥ 30 %"),
    Goal("drop-pad MoE",
         lambda r: r["config"] == "moe-olmoe-4l" and r.get("base_variant") == "fusions+drop-pad"
         and not r.get("cuda_graphs"), _mfu, 0.40, "MFU ≥ 40 %"),
)


def _loss(row: dict[str, Any]) -> str:
    for key, against in (("vs_eager", "eager"), ("vs_bf16", "bf16")):
        if (compared := row.get(key)) is not None:
            return f"{compared['loss_rel']:.2%} vs {against} ({compared['speedup']:.2f}×)"
    return "eager" if not row.get("cuda_graphs") else "no eager row"


def _fmt(value: Any, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)


def table(benches: list[dict[str, Any]]) -> str:
    """The Markdown table of every row of ``benches``, then the goals no row reached."""
    lines = ["| config | variant | precision | micro-batch × count | step ms (max Δ) | TFLOP/s | MFU | peak GiB "
             "(predicted) | graphs captured | loss vs reference | goal |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    reached = set()
    for bench in benches:
        for row in bench.get("results", []):
            head = (f"| {row['config']} | {row['variant']} | {row['precision']} | "
                    f"{row.get('micro_batch')} × {row.get('micro_batches')} |")
            goals = [g for g in GOALS if g.applies(row)]
            reached.update(g.name for g in goals)
            if row.get("status") == "error":
                verdict = "; ".join(f"{g.shown}: MISSED (the row failed)" for g in goals) or "–"
                lines.append(f"{head} failed: {row.get('error')} | | | | | | {verdict} |")
                continue
            graphs = row.get("cuda_graphs_captured")
            captured = "–" if graphs is None else f"{'yes' if graphs['captured'] else 'NO'} ({graphs['graphs']})"
            mfu = row.get("mfu")
            lines.append(
                f"{head} {row['step_ms_median']:.1f} (±{step_spread(row):.1%}) | "
                f"{_fmt(row.get('tflops_per_gpu'), '.1f')} | {'–' if mfu is None else f'{mfu:.1%}'} | "
                f"{_fmt(row.get('peak_mem_gib'), '.1f')} "
                f"({_fmt(row.get('predicted_peak_gib'), '.1f')}) | {captured} | {_loss(row)} | "
                f"{'; '.join(g.verdict(row) for g in goals) or '–'} |")
    missing = [g for g in GOALS if g.name not in reached]
    if missing:
        lines += ["", *(f"- {g.name} ({g.shown}): not measured, no row of it ran" for g in missing)]
    return "\n".join(lines) + "\n"


def build_parser() -> OneLineParser:
    parser = OneLineParser(prog="python -m mcore_images.smoke.bench.goals", prefix="goals: ",
                           description="One table of the bench's variant rows against the goals they are run for.")
    parser.add_argument("benches", nargs="+", type=Path, help="the bench.json files of one call")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        benches = [reading.read_json(p, "a bench.json", "give the files the bench wrote") for p in args.benches]
    except InputError as exc:
        print(f"goals: {exc}", file=sys.stderr)
        return 2
    print(table(benches), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
