"""Bench regression gate, Markdown table and certificate section. Pure Python (no torch).

A baseline is stored per (GPU model, stack, config, spec, world size) in ``env/bench-baselines.json``
(data only; ``schema`` below). A measured TFLOP/s per GPU more than ``max_drop_pct`` below its baseline
makes that result — and so the bench and any certificate it is attached to — **failed**. A result with
no baseline is reported as ``no-baseline`` and does not fail; a faster one passes (update the file to
raise the bar). The default drop allowed is 10 %: on one H200 the median step time of the same software
moved by 1.2 % (dense-1b, TE spec) and 2.3 % (moe-small, TE spec) between two runs (docs/bench.md),
so a drop of more than 10 % is a regression, not noise.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mcore_images import schemas

SCHEMA = schemas.BENCH_BASELINES
RESULT_SCHEMA = schemas.BENCH
DEFAULT_MAX_DROP_PCT = 10.0
KEY_FIELDS = ("gpu", "stack", "config", "spec", "world_size")
GATED_METRIC = "tflops_per_gpu"


def stack_key(env_stack: str | None, packages: dict[str, str | None]) -> str:
    """The stack a result belongs to: ``$MCORE_IMAGES_STACK`` inside our images, else the versions."""
    if env_stack:
        return env_stack
    te = packages.get("transformer-engine") or "none"
    return f"adhoc:torch-{packages.get('torch')}/mcore-{packages.get('megatron-core')}/te-{te}"


def load_baselines(path: Path) -> dict[str, Any]:
    """Read a baselines file; ValueError naming the problem when it is malformed."""
    data = json.loads(path.read_text())
    if data.get("schema") != SCHEMA:
        raise ValueError(f"{path}: schema {data.get('schema')!r} is not {SCHEMA!r}")
    if not isinstance(data.get("baselines"), list):
        raise ValueError(f"{path}: 'baselines' must be a list")
    for i, entry in enumerate(data["baselines"]):
        missing = [k for k in (*KEY_FIELDS, GATED_METRIC) if k not in entry]
        if missing:
            raise ValueError(f"{path}: baselines[{i}] lacks {', '.join(missing)}")
        if not isinstance(entry[GATED_METRIC], int | float) or entry[GATED_METRIC] <= 0:
            raise ValueError(f"{path}: baselines[{i}].{GATED_METRIC} must be a positive number")
    keys = [tuple(e[k] for k in KEY_FIELDS) for e in data["baselines"]]
    dupes = {k for k in keys if keys.count(k) > 1}
    if dupes:
        raise ValueError(f"{path}: more than one baseline for {sorted(dupes)[0]}")
    return data


def find_baseline(baselines: dict[str, Any] | None, key: dict[str, Any]) -> dict[str, Any] | None:
    if not baselines:
        return None
    for entry in baselines["baselines"]:
        if all(entry.get(k) == key.get(k) for k in KEY_FIELDS):
            return entry
    return None


def judge(result: dict[str, Any], baseline: dict[str, Any] | None, max_drop_pct: float) -> dict[str, Any]:
    """The gate's verdict for one measured result (a dict with the key fields and the metric)."""
    if result.get("status") == "error":
        return {"status": "failed", "reason": f"run failed: {result.get('error')}"}
    measured = result.get(GATED_METRIC)
    if not isinstance(measured, int | float) or measured <= 0:
        return {"status": "failed", "reason": f"no {GATED_METRIC} measured"}
    if baseline is None:
        return {"status": "no-baseline", "reason": "no stored baseline for this GPU, stack, config, spec and size"}
    base = float(baseline[GATED_METRIC])
    change = (measured - base) / base * 100.0
    verdict = {"baseline": base, "change_pct": round(change, 2), "max_drop_pct": max_drop_pct}
    if change < -max_drop_pct:
        return {**verdict, "status": "failed",
                "reason": f"{GATED_METRIC} {measured:.1f} is {-change:.1f} % below the baseline {base:.1f} "
                          f"(more than {max_drop_pct:g} %)"}
    return {**verdict, "status": "passed", "reason": None}


def gate(results: list[dict[str, Any]], baselines: dict[str, Any] | None,
         max_drop_pct: float | None = None) -> tuple[str, list[dict[str, Any]]]:
    """Judge every result; returns (overall status, results each with a ``gate`` entry).

    Overall: ``failed`` if any result failed, else ``passed`` (results without a baseline pass).
    ``max_drop_pct`` given here wins over the file's.
    """
    if max_drop_pct is None:
        max_drop_pct = float((baselines or {}).get("max_drop_pct", DEFAULT_MAX_DROP_PCT))
    judged = []
    for result in results:
        verdict = judge(result, find_baseline(baselines, result), max_drop_pct)
        judged.append({**result, "gate": verdict})
    status = "failed" if any(r["gate"]["status"] == "failed" for r in judged) else "passed"
    return status, judged


def merge_baselines(current: dict[str, Any] | None, bench: dict[str, Any]) -> dict[str, Any]:
    """``current`` (or a new file) with every successful result of ``bench`` stored as a baseline."""
    data = dict(current) if current else {"schema": SCHEMA, "max_drop_pct": DEFAULT_MAX_DROP_PCT, "baselines": []}
    entries = list(data["baselines"])
    for r in bench.get("results", []):
        if r.get("status") == "error" or not r.get(GATED_METRIC):
            continue
        entry = {k: r[k] for k in KEY_FIELDS}
        entry.update({
            GATED_METRIC: round(float(r[GATED_METRIC]), 1),
            "tokens_per_s": round(float(r["tokens_per_s"])),
            "step_ms": round(float(r["step_ms_median"]), 1),
            "mfu": None if r.get("mfu") is None else round(float(r["mfu"]), 4),
            "peak_mem_gib": None if r.get("peak_mem_gib") is None else round(float(r["peak_mem_gib"]), 1),
            "attention_backend": r.get("attention_backend"),
            "optimizer": r.get("optimizer"),
            "micro_batch": r.get("micro_batch"),
            "micro_batches": r.get("micro_batches"),
            "measured": bench.get("created"),
        })
        entries = [e for e in entries if tuple(e[k] for k in KEY_FIELDS) != tuple(entry[k] for k in KEY_FIELDS)]
        entries.append(entry)
    data["baselines"] = sorted(entries, key=lambda e: tuple(str(e[k]) for k in KEY_FIELDS))
    return data


def _fmt(value: Any, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)


def render_markdown(bench: dict[str, Any]) -> str:
    """The bench section: one row per (config, spec), MFU against the named peak, gate verdicts."""
    peak = bench.get("peak_tflops")
    lines = [
        f"## Bench: {str(bench.get('status', '?')).upper()}",
        "",
        f"- GPU: {bench.get('world_size', '?')} × {bench.get('gpu', '?')}; MFU against "
        f"{_fmt(peak, '.0f')} TFLOP/s dense bf16 ({bench.get('peak_source', '–')})",
        f"- Stack: `{bench.get('stack', '?')}`; steps: {bench.get('warmup', '?')} warm-up + "
        f"{bench.get('steps', '?')} timed (CUDA events, median)",
        f"- FLOPs per step = {bench.get('formula', '–')}",
        "",
        "| config | spec | attention | optimizer | step ms | tokens/s | TFLOP/s/GPU | MFU | peak mem GiB | gate |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in bench.get("results", []):
        g = r.get("gate") or {}
        verdict = g.get("status", "–")
        if g.get("change_pct") is not None:
            verdict += f" ({g['change_pct']:+.1f} %)"
        if r.get("status") == "error":
            lines.append(f"| {r.get('config')} | {r.get('spec')} | – | – | – | – | – | – | – | "
                         f"failed: {r.get('error')} |")
            continue
        mfu = r.get("mfu")
        lines.append(
            f"| {r.get('config')} | {r.get('spec')} | {r.get('attention_backend', '–')} | {r.get('optimizer', '–')} | "
            f"{_fmt(r.get('step_ms_median'), '.1f')} | {_fmt(r.get('tokens_per_s'), ',.0f')} | "
            f"{_fmt(r.get('tflops_per_gpu'), '.1f')} | {'–' if mfu is None else f'{mfu * 100:.1f} %'} | "
            f"{_fmt(r.get('peak_mem_gib'), '.1f')} | {verdict} |"
        )
    failed = [r for r in bench.get("results", []) if (r.get("gate") or {}).get("status") == "failed"]
    if failed:
        lines += ["", *[f"- {r['config']}/{r['spec']}: {r['gate']['reason']}" for r in failed]]
    return "\n".join(lines) + "\n"


def attach(cert: dict[str, Any], bench: dict[str, Any]) -> dict[str, Any]:
    """Put the bench into a smoke certificate; a failed bench fails the certificate (exit 1)."""
    cert["bench"] = bench
    if bench.get("status") == "failed" and cert.get("status") in ("passed", "failed", "running"):
        cert["status"] = "failed"
        cert["exit_code"] = 1
        bad = [f"{r['config']}/{r['spec']}" for r in bench.get("results", [])
               if (r.get("gate") or {}).get("status") == "failed"]
        reason = f"bench failed: {', '.join(bad) or 'see bench section'}"
        cert["error"] = f"{cert['error']}; {reason}" if cert.get("error") else reason
    return cert
