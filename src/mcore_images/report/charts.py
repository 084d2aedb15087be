"""The report's charts: static SVG drawn by matplotlib at generation time (no script, no CDN at view time).

Each data series is an SVG group whose id is ``series-<name>`` (``series_id``), so a browser test can find
every series it expects; text stays text (svg.fonttype ``none``) and the output is byte-stable for the same
input (fixed hash salt, no date).
"""

from __future__ import annotations

import atexit
import functools
import io
import math
import os
import re
import shutil
import tempfile
from typing import Any

from mcore_images.errors import InputError

STYLE = {
    "svg.fonttype": "none",
    "svg.hashsalt": "mcore-images",
    "font.size": 9,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "figure.dpi": 96,
}


@functools.cache
def pyplot() -> Any:
    """matplotlib's pyplot on its file backend, imported when a chart is drawn (not with every command: the
    import takes time). matplotlib keeps a configuration folder and a font cache, under the user's home
    (~/.config/matplotlib, ~/.cache/matplotlib) unless MPLCONFIGDIR names one: the report writes nothing outside
    its output, so they go to a temporary folder of its own, removed when it exits (an MPLCONFIGDIR the user set
    is theirs, and kept)."""
    if not os.environ.get("MPLCONFIGDIR"):
        own = tempfile.mkdtemp(prefix="mcore-images-matplotlib-")
        atexit.register(shutil.rmtree, own, ignore_errors=True)
        os.environ["MPLCONFIGDIR"] = own
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # the report extra is not installed
        raise InputError(
            "the report draws its charts with matplotlib, which is not installed: `pip install matplotlib` (the "
            "tool's `report` extra; `make setup` installs it in a checkout)"
        ) from None
    return plt


def require() -> None:
    pyplot()


def finite(value: Any) -> float | None:
    """``value`` as a float when it is a finite number (not a bool, not too large for a float), else None."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


DRAWABLE = 1e100
"""The largest magnitude a chart is given: matplotlib's axis margins overflow near the float limit."""


def drawable(value: Any) -> float | None:
    """``value`` as a float a chart can place (finite, within ±DRAWABLE), else None: what the charts draw."""
    number = finite(value)
    return number if number is not None and abs(number) <= DRAWABLE else None


def series_id(name: str) -> str:
    return "series-" + re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def _tag_bars(bars: Any, name: str) -> None:
    """Bars are one SVG element each: ids ``series-<name>-0``, ``-1``… (ids stay unique)."""
    for i, patch in enumerate(bars.patches):
        patch.set_gid(f"{series_id(name)}-{i}")


def _svg(fig: Any) -> str:
    out = io.StringIO()
    fig.savefig(out, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None})
    pyplot().close(fig)
    text = out.getvalue()
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.S)  # RDF about the file, not the chart
    return text[text.index("<svg") :]  # inline in HTML: no XML declaration or DOCTYPE


def loss_curves(runs: dict[str, list[float]], title: str) -> str:
    """Every run's loss per step on one chart."""
    require()
    with pyplot().rc_context(STYLE):
        fig, ax = pyplot().subplots(figsize=(7.5, 3.6))
        for name, losses in runs.items():
            points = [(i, y) for i, v in enumerate(losses) if (y := drawable(v)) is not None]
            if points:
                (line,) = ax.plot([p[0] for p in points], [p[1] for p in points], marker=".", label=name)
                line.set_gid(series_id(name))
        ax.xaxis.set_major_locator(pyplot().MaxNLocator(integer=True))
        ax.set(xlabel="step", ylabel="loss", title=title)
        if runs:
            ax.legend(fontsize=7, ncol=2)
        return _svg(fig)


def parity(rows: list[tuple[str, float, float, float, float]]) -> str:
    """Per run: the step-0 loss and grad-norm deltas against the dp-only run, with their tolerances."""
    require()
    floor, ceiling = 1e-10, 1e10  # a delta of exactly 0, or one far off, still lands on the log axis

    def drawn(value: float) -> float:
        return min(max(value, floor), ceiling)

    with pyplot().rc_context(STYLE):
        fig, ax = pyplot().subplots(figsize=(7.5, 0.45 * max(len(rows), 2) + 1.2))
        names = [r[0] for r in rows]
        y = range(len(rows))
        bars = ax.barh([i - 0.2 for i in y], [drawn(r[1]) for r in rows], height=0.4, label="Δ loss")
        _tag_bars(bars, "loss_rel")
        bars = ax.barh([i + 0.2 for i in y], [drawn(r[3]) for r in rows], height=0.4, label="Δ grad norm")
        _tag_bars(bars, "grad_norm_rel")
        if rows:
            ax.axvline(drawn(rows[0][2]), color="tab:blue", linestyle="--", label=f"loss tolerance {rows[0][2]:.1e}")
            ax.axvline(drawn(rows[0][4]), color="tab:orange", linestyle=":",
                       label=f"grad-norm tolerance {rows[0][4]:.1e}")
        ax.set_xscale("log")
        ax.set_yticks(list(y), names)
        ax.set(
            xlabel=f"relative difference from the dp-only run (drawn between {floor:g} and {ceiling:g})",
            title="Cross-layout parity at step 0",
        )
        ax.legend(fontsize=7, loc="lower right")
        return _svg(fig)


def wall_time(parts: dict[str, float]) -> str:
    """The run's wall time split into its parts, as one stacked bar."""
    require()
    with pyplot().rc_context(STYLE):
        fig, ax = pyplot().subplots(figsize=(7.5, 1.6))
        left = 0.0
        for name, seconds in parts.items():
            bar = ax.barh([0], [seconds], left=left, label=f"{name} {seconds:.1f} s")
            _tag_bars(bar, name)
            left += seconds
        ax.set_yticks([])
        ax.set(xlabel="seconds", title=f"Wall time {left:.1f} s")
        ax.legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.45))
        return _svg(fig)


def build_efficiency(runs: list[dict[str, Any]]) -> str:
    """Wall seconds per build scenario, the share of stages built (not cached) written on each bar."""
    require()
    with pyplot().rc_context(STYLE):
        fig, ax = pyplot().subplots(figsize=(7.5, 0.5 * max(len(runs), 2) + 1.0))
        names = [f"{r['scenario']} #{i + 1}" for i, r in enumerate(runs)]
        bars = ax.barh(names, [r["wall_s"] for r in runs], color="tab:green")
        _tag_bars(bars, "wall_s")
        for bar, run in zip(bars, runs, strict=True):
            built = sum(1 for v in run["stages"].values() if v == "built")
            ax.text(
                bar.get_width(),
                bar.get_y() + bar.get_height() / 2,
                f" {run['wall_s']:.0f} s, {built}/{len(run['stages'])} stages built",
                va="center",
                fontsize=7,
            )
        ax.set(xlabel="wall seconds", title="Build time by scenario")
        return _svg(fig)
