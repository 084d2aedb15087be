"""Bench regression gate, Markdown table and certificate section. Pure Python (no torch).

A baseline is stored per (GPU model, stack, config, spec, variant, precision, world size) and per shape
(micro-batch size, micro-batches per step, sequence length) in
``env/bench-baselines.json`` (data only; ``schema`` below). A measured TFLOP/s per GPU more than
``max_drop_pct`` below its baseline makes that result — and so the bench and any certificate it is
attached to — **failed**; so does an FP8 row whose loss left the bf16 row's (model.FP8_LOSS_RTOL). A
result with no baseline of its own shape is reported as ``no-baseline`` (naming the shapes that have one) and is
never judged against another shape's; a faster one passes (update
the file to raise the bar). The stack is the image's (``$MCORE_IMAGES_STACK``), ``--stack``, or the stack
of env/stacks.json whose torch, TE and megatron-core pins are the installed versions; a run matching
none is ad hoc and **ungated** (its numbers are reported, never judged or stored).

The default drop allowed is 5 %: on one H200 the median step time of the same software moved by 1.2 % (dense-1b,
TE spec) and 2.3 % (moe-small, TE spec) between two runs (docs/bench.md), and each gated row is the median of
``--repeats`` timed windows in one process (3 by default), so a drop of more than 5 % is a regression, not noise
(Megatron-LM's own MoE gate allows 2 %).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from mcore_images import SOURCE_TREE, options, reading, schemas
from mcore_images.catalogue import components
from mcore_images.errors import InputError
from mcore_images.smoke.kit import envinfo

SCHEMA = schemas.BENCH_BASELINES
RESULT_SCHEMA = schemas.BENCH
DEFAULT_MAX_DROP_PCT = 5.0
MAX_DROP_RANGE = (0.0, 100.0)
"""The drops a gate may allow, in percent: 0 (no drop at all) to 100 (any speed above zero)."""
SHAPE_FIELDS = ("micro_batch", "micro_batches", "seq")
"""What a step is made of: rows of another shape time other work, so a baseline applies to its own shape only."""
KEY_FIELDS = ("gpu", "stack", "config", "spec", "variant", "precision", "world_size", *SHAPE_FIELDS)
GATED_METRIC = "tflops_per_gpu"
ADHOC = "adhoc:"
MATCHED = {key: str(components.BY_KEY[key].distribution) for key in ("torch", "te", "mcore")}
"""The stack pins a host run is matched on (catalogue key → the distribution its pin names, from the
catalogue): what sets its speed."""


def stacks_file(baselines: str | None) -> Path:
    """env/stacks.json beside the baselines file (both live in env/), else of $MCORE_IMAGES_ROOT or this tree."""
    if baselines and (Path(baselines).parent / "stacks.json").is_file():
        return Path(baselines).parent / "stacks.json"
    root = os.environ.get("MCORE_IMAGES_ROOT") or SOURCE_TREE
    return Path(root) / "env" / "stacks.json"


def is_adhoc(stack: str) -> bool:
    return stack.startswith(ADHOC)


def _public(version: str | None) -> str | None:
    """The public version: a wheel's local build tag (``+cu130``) is not part of what a stack pins."""
    return None if version is None else version.split("+", 1)[0]


def matching_stacks(packages: dict[str, str | None], stacks_json: Path) -> list[str]:
    """Stacks of ``stacks_json`` whose torch, TE and megatron-core pins are the installed versions."""
    found = []
    for entry in envinfo.stack_entries(stacks_json):
        installed = {key: _public(packages.get(dist)) for key, dist in MATCHED.items()}
        pinned = {key: None if entry.get(key) == "none" else entry.get(key) for key in MATCHED}
        if installed == pinned:
            found.append(str(entry.get("name")))
    return found


def resolve_stack(flag: str | None, packages: dict[str, str | None], stacks_json: Path) -> tuple[str, str]:
    """(the stack results are keyed to, how it was chosen): --stack, else the image's, else the one stack
    whose pins match the installed versions, else ad hoc."""
    if flag:
        return flag, "given with --stack"
    if env := os.environ.get("MCORE_IMAGES_STACK"):
        return env, "the image's ($MCORE_IMAGES_STACK)"
    versions = ", ".join(f"{dist} {packages.get(dist) or 'none'}" for dist in MATCHED.values())
    found = matching_stacks(packages, stacks_json)
    if len(found) == 1:
        return found[0], f"installed {versions} are stack {found[0]}'s pins in {stacks_json}"
    te = packages.get("transformer-engine") or "none"
    adhoc = f"{ADHOC}torch-{packages.get('torch')}/mcore-{packages.get('megatron-core')}/te-{te}"
    why = (f"installed {versions} match stacks {', '.join(found)} alike" if found
           else f"installed {versions} match no stack of {stacks_json}")
    return adhoc, f"ad hoc, ungated: {why}"


def load_baselines(path: Path) -> dict[str, Any]:
    """Read a baselines file (a regular file within reading's limit); ValueError naming the problem when it cannot be
    read or is malformed."""
    try:
        data = reading.read_json_object(path, "", "give a baselines file",
                                        f"{path}: not a baselines file (a JSON object with schema {SCHEMA!r})")
    except InputError as exc:
        raise ValueError(str(exc).removesuffix("; give a baselines file")) from None
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
    if "max_drop_pct" in data and (problem := _drop_problem(data["max_drop_pct"])):
        raise ValueError(f"{path}: max_drop_pct {problem}")
    keys = [tuple(e[k] for k in KEY_FIELDS) for e in data["baselines"]]
    dupes = {k for k in keys if keys.count(k) > 1}
    if dupes:
        raise ValueError(f"{path}: more than one baseline for {sorted(dupes)[0]}")
    return data


def _drop_problem(value: object) -> str | None:
    """Why a file's max_drop_pct is not a percentage the gate can judge with (None: it is one)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"{value!r} is not a number: give one from {MAX_DROP_RANGE[0]:g} to {MAX_DROP_RANGE[1]:g}"
    return options.problem(float(value), *MAX_DROP_RANGE)


def shape(entry: dict[str, Any]) -> str:
    """``micro-batch 8 × 1, seq 4096``: how a row's step is made."""
    return f"micro-batch {entry.get('micro_batch')} × {entry.get('micro_batches')}, seq {entry.get('seq')}"


def other_shapes(baselines: dict[str, Any] | None, key: dict[str, Any]) -> list[str]:
    """The shapes a baseline of this row (all but the shape the same) is stored for."""
    rest = [k for k in KEY_FIELDS if k not in SHAPE_FIELDS]
    return [shape(e) for e in (baselines or {}).get("baselines", []) if all(e.get(k) == key.get(k) for k in rest)]


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
    fp8 = result.get("vs_bf16")
    if fp8 is not None and not fp8["loss_ok"]:
        return {"status": "failed", "reason": f"FP8 loss differs from bf16's by {fp8['loss_rel']:.2%} on average over "
                                              f"the timed steps (limit {fp8['loss_rtol']:.0%})"}
    graphed = result.get("vs_eager")
    if graphed is not None and not graphed["loss_ok"]:
        return {"status": "failed", "reason": f"the graphed loss differs from eager's by {graphed['loss_rel']:.2%} on "
                                              f"average over the timed steps (limit {graphed['loss_rtol']:.0%})"}
    captured = result.get("cuda_graphs_captured")
    if result.get("cuda_graphs") and captured is not None and not captured.get("captured"):
        return {"status": "failed", "reason": f"no CUDA graph was captured ({captured.get('how')}): the row ran eager"}
    if is_adhoc(str(result.get("stack", ""))):
        return {"status": "ungated", "reason": "ad hoc versions: no stack's baseline applies"}
    if baseline is None:
        return {"status": "no-baseline", "reason": "no stored baseline for this GPU, stack, config, spec, variant, "
                                                   f"precision, size and shape ({shape(result)})"}
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
        if verdict["status"] == "no-baseline" and (shapes := other_shapes(baselines, result)):
            verdict["reason"] += f"; stored for {'; '.join(shapes)} only, another shape's step is not this one's"
        judged.append({**result, "gate": verdict})
    status = "failed" if any(r["gate"]["status"] == "failed" for r in judged) else "passed"
    return status, judged


def merge_baselines(current: dict[str, Any] | None, bench: dict[str, Any]) -> dict[str, Any]:
    """``current`` (or a new file) with every successful result of ``bench`` stored as a baseline."""
    data = dict(current) if current else {"schema": SCHEMA, "max_drop_pct": DEFAULT_MAX_DROP_PCT, "baselines": []}
    entries = list(data["baselines"])
    for r in bench.get("results", []):
        if r.get("status") == "error" or not r.get(GATED_METRIC) or is_adhoc(str(r.get("stack", ""))):
            continue
        entry = {k: r[k] for k in KEY_FIELDS}
        entry.update({
            GATED_METRIC: round(float(r[GATED_METRIC]), 1),
            "settings": r.get("settings"),
            "tokens_per_s": round(float(r["tokens_per_s"])),
            "step_ms": round(float(r["step_ms_median"]), 1),
            "mfu": None if r.get("mfu") is None else round(float(r["mfu"]), 4),
            "peak_mem_gib": None if r.get("peak_mem_gib") is None else round(float(r["peak_mem_gib"]), 1),
            "attention_backend": r.get("attention_backend"),
            "optimizer": r.get("optimizer"),
            "measured": bench.get("created"),
            # What it ran on: a later drop can then be told apart from a version change.
            "packages": {k: v for k, v in (bench.get("packages") or {}).items() if v is not None},
        })
        entries = [e for e in entries if tuple(e[k] for k in KEY_FIELDS) != tuple(entry[k] for k in KEY_FIELDS)]
        entries.append(entry)
    data["baselines"] = sorted(entries, key=lambda e: tuple(str(e[k]) for k in KEY_FIELDS))
    return data


def _fmt(value: Any, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)


def render_markdown(bench: dict[str, Any]) -> str:
    """The bench section: one row per (config, spec, variant, precision), MFU against the named peak, FP8's
    speed-up over bf16, gate verdicts; a profile table under each profiled row."""
    peak = bench.get("peak_tflops")
    lines = [
        f"## Bench: {str(bench.get('status', '?')).upper()}",
        "",
        f"- GPU: {bench.get('world_size', '?')} × {bench.get('gpu', '?')}; MFU against "
        f"{_fmt(peak, '.0f')} TFLOP/s dense bf16 ({bench.get('peak_source', '–')})",
        f"- Stack: `{bench.get('stack', '?')}` ({bench.get('stack_how', '–')}); steps: {bench.get('warmup', '?')} "
        f"warm-up + {bench.get('repeats', 1)} × {bench.get('steps', '?')} timed (CUDA events; the median of each "
        "window's median)",
        f"- FLOPs per step = {bench.get('formula', '–')}",
        "",
        "| config | spec | variant | precision | step ms | tokens/s | TFLOP/s/GPU | MFU | vs bf16 / eager "
        "| peak mem GiB | gate |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    notes = []
    for r in bench.get("results", []):
        g = r.get("gate") or {}
        verdict = g.get("status", "–")
        if g.get("change_pct") is not None:
            verdict += f" ({g['change_pct']:+.1f} %)"
        head = f"| {r.get('config')} | {r.get('spec')} | {r.get('variant', '–')} | {r.get('precision', '–')} |"
        if r.get("status") == "error":
            lines.append(f"{head} – | – | – | – | – | – | failed: {r.get('error')} |")
            continue
        mfu, versus = r.get("mfu"), "–"
        for against in (r.get("vs_bf16"), r.get("vs_eager")):
            if against:
                versus = f"{against['speedup']:.2f}× (loss {against['loss_rel']:.2%})"
        lines.append(
            f"{head} {_fmt(r.get('step_ms_median'), '.1f')} | {_fmt(r.get('tokens_per_s'), ',.0f')} | "
            f"{_fmt(r.get('tflops_per_gpu'), '.1f')} | {'–' if mfu is None else f'{mfu * 100:.1f} %'} | {versus} | "
            f"{_fmt(r.get('peak_mem_gib'), '.1f')} | {verdict} |"
        )
        if r.get("dropped"):
            notes.append(f"- {r['config']}/{r['spec']}/{r.get('variant')}: not applied: {', '.join(r['dropped'])}")
    failed = [r for r in bench.get("results", []) if (r.get("gate") or {}).get("status") == "failed"]
    if failed:
        notes += [f"- {r['config']}/{r['spec']}/{r.get('variant')}/{r.get('precision')}: {r['gate']['reason']}"
                  for r in failed]
    if notes:
        lines += ["", *notes]
    profiled = [r for r in bench.get("results", []) if r.get("profile")]
    if profiled:
        from mcore_images.smoke.bench import profile

        for r in profiled:
            lines += ["", f"### Where the step time goes: {r['config']}/{r['spec']}/{r.get('variant')}/"
                          f"{r.get('precision')}", "", profile.render(r["profile"])]
    return "\n".join(lines) + "\n"


def attach(cert: dict[str, Any], bench: dict[str, Any]) -> dict[str, Any]:
    """Put the bench into a smoke certificate; a failed bench fails the certificate (exit 1)."""
    cert["bench"] = bench
    if bench.get("status") == "failed" and cert.get("status") in ("passed", "failed", "running"):
        cert["status"] = "failed"
        cert["exit_code"] = 1
        bad = [f"{r['config']}/{r['spec']}/{r.get('variant')}/{r.get('precision')}" for r in bench.get("results", [])
               if (r.get("gate") or {}).get("status") == "failed"]
        reason = f"bench failed: {', '.join(bad) or 'see bench section'}"
        cert["error"] = f"{cert['error']}; {reason}" if cert.get("error") else reason
    return cert
