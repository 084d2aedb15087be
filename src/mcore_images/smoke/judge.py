"""Turn every rank's record of one run into checks that can fail (pure Python, host-testable).

A record is what ``smoke.train.train`` returns on one rank: per-step losses (NaN off the last pipeline
stage), grad norms, step times, parameter checksums and the data-parallel groups it belongs to.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from mcore_images.smoke.kit.numerics import Tolerance, rel_delta, spread
from mcore_images.smoke.layouts import RoundTrip, Run


def _check(name: str, ok: bool, detail: str) -> dict[str, Any]:
    return {"name": name, "ok": bool(ok), "detail": detail}


def skipped(run: Run) -> dict[str, Any]:
    """Result entry for a run the plan skipped (not a failure: the reason says why)."""
    return result(run, "skipped", run.skip, [], [], [], None, {})


def result(run: Run, status: str, reason: str | None, checks: list, losses: list, norms: list,
           parity: dict | None, timing: dict) -> dict[str, Any]:
    return {
        "id": run.id, "layout": run.layout.name, "model": run.model, "spec": run.spec, "status": status,
        "reason": reason, "checks": checks, "losses": losses, "grad_norms": norms, "parity": parity,
        "timing": timing,
    }


def _agreement(records: list[dict], tol: Tolerance) -> tuple[list[float], list[float], list[dict]]:
    last = [r for r in records if r["last_stage"]]
    steps = len(records[0]["grad_norms"])
    losses = list(last[0]["losses"]) if last else [math.nan] * steps
    norms = list(records[0]["grad_norms"])
    loss_spread = max((spread([r["losses"][s] for r in last]) for s in range(steps)), default=0.0)
    norm_spread = max((spread([r["grad_norms"][s] for r in records]) for s in range(steps)), default=0.0)
    checks = [
        _check("ranks agree on loss", bool(last) and loss_spread <= tol.agree_rtol,
               f"{len(last)} last-stage rank(s), max relative spread {loss_spread:.2e} (limit {tol.agree_rtol:.0e})"),
        _check("ranks agree on grad norm", norm_spread <= tol.agree_rtol,
               f"{len(records)} rank(s), max relative spread {norm_spread:.2e} (limit {tol.agree_rtol:.0e})"),
    ]
    return losses, norms, checks


def _replicas(records: list[dict]) -> list[dict]:
    """Data-parallel replicas must end with bit-identical weights (a missed grad sync shows here)."""
    checks = []
    for key, group_key, label in (("dense_sum", "dp_group", "dense"), ("expert_sum", "edp_group", "expert")):
        groups: dict[tuple, set] = {}
        for r in records:
            groups.setdefault(tuple(r[group_key]), set()).add(r[key])
        bad = [g for g, sums in groups.items() if len(sums) > 1]
        checks.append(_check(
            f"{label} weights equal across data-parallel replicas", not bad,
            f"{len(groups)} group(s)" + (f"; differing: {bad[:3]}" if bad else ""),
        ))
    return checks


def _bitwise(run: Run, losses: list[float], norms: list[float], first: dict[str, Any] | None) -> list[dict]:
    """The deterministic repeat of a dp baseline against the first run: every loss and grad norm equal
    as floats (bitwise for finite values), not merely close."""
    if first is None or not first["losses"]:
        return [_check("bitwise equal to the first run", False, f"baseline {run.baseline_id} did not run")]
    checks = []
    for label, mine, theirs in (("losses", losses, first["losses"]), ("grad norms", norms, first["grad_norms"])):
        differing = [i for i, (a, b) in enumerate(zip(mine, theirs, strict=False)) if a != b]
        worst = max((rel_delta(mine[i], theirs[i]) for i in differing), default=0.0)
        checks.append(_check(
            f"{label} bitwise equal to the first run", not differing and len(mine) == len(theirs),
            f"{len(mine)} steps" + (f"; differ at steps {differing[:5]}, largest relative difference {worst:.2e}"
                                    if differing else ", all equal")))
    return checks


def determinism(results: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The certificate's determinism summary from the repeat runs (None when none ran)."""
    repeats = [r for r in results if r["id"].endswith("/repeat") and r["status"] != "skipped"]
    if not repeats:
        return None
    rows = {r["id"].removesuffix("/repeat"): {c["name"].split(" bitwise")[0]: c["ok"] for c in r["checks"]
                                              if "bitwise" in c["name"]} for r in repeats}
    equal = all(all(v.values()) and v for v in rows.values())
    return {"bitwise_equal": equal, "runs": rows}


def evaluate(run: Run, records: list[dict], tol: Tolerance, baseline: dict[str, Any] | None) -> dict[str, Any]:
    """Every check for one run; ``baseline`` is the dp-only result of the same model and spec."""
    losses, norms, checks = _agreement(records, tol)
    finite = all(math.isfinite(v) for v in losses + norms)
    checks.append(_check("loss and grad norm finite", finite, f"{len(losses)} steps"))
    drop = 1.0 - losses[-1] / losses[0] if finite and losses[0] else math.nan
    checks.append(_check(
        "loss decreases on the fixed batch", finite and drop >= tol.min_loss_drop,
        f"{losses[0]:.4f} → {losses[-1]:.4f} ({drop:+.1%}, need ≥ {tol.min_loss_drop:.0%})",
    ))
    checks += _replicas(records)
    parity = None
    if run.repeat:
        checks += _bitwise(run, losses, norms, baseline)
    elif not run.baseline:
        if baseline is None or not baseline["losses"]:
            checks.append(_check("parity with dp-only", False, f"baseline {run.baseline_id} did not run"))
        else:
            parity = {
                "baseline": run.baseline_id,
                "loss_rel": rel_delta(losses[0], baseline["losses"][0]),
                "loss_tol": tol.loss_rtol,
                "grad_norm_rel": rel_delta(norms[0], baseline["grad_norms"][0]),
                "grad_norm_tol": tol.grad_norm_rtol,
            }
            checks.append(_check(
                "step-0 loss matches dp-only", parity["loss_rel"] <= tol.loss_rtol,
                f"{losses[0]:.6g} vs {baseline['losses'][0]:.6g}: {parity['loss_rel']:.2e} (limit {tol.loss_rtol:.2e})",
            ))
            checks.append(_check(
                "step-0 grad norm matches dp-only", parity["grad_norm_rel"] <= tol.grad_norm_rtol,
                f"{norms[0]:.6g} vs {baseline['grad_norms'][0]:.6g}: {parity['grad_norm_rel']:.2e} "
                f"(limit {tol.grad_norm_rtol:.2e})",
            ))
    steps = [max(r["step_s"][s] for r in records) for s in range(len(records[0]["step_s"]))]
    timing = {
        "build_s": max(r["build_s"] for r in records),
        "step0_s": steps[0] if steps else None,
        "step_median_s": statistics.median(steps[1:]) if len(steps) > 1 else None,
        "steps_s": sum(steps),
    }
    status = "passed" if all(c["ok"] for c in checks) else "failed"
    return result(run, status, None, checks, losses, norms, parity, timing)


def _last_stage(records: list[dict[str, Any]], key: str, last: str) -> list[float]:
    """The values a last pipeline stage recorded (the other stages have NaN losses)."""
    found = [r[key] for r in records if r[last]]
    return found[0] if found else [math.nan] * len(records[0][key])


def round_trip(pair: RoundTrip, records: list[dict[str, Any]], tol: Tolerance, deterministic: bool) -> dict[str, Any]:
    """The checks of one checkpoint round trip: the steps resumed in the second layout must continue the
    first layout's uninterrupted run, step by step, within the parity tolerance (the layouts sum in
    different orders). Resumed in the same layout under deterministic math, they must match exactly."""
    straight, resumed = _last_stage(records, "straight", "last_a"), _last_stage(records, "resumed", "last_b")
    straight_norms, resumed_norms = records[0]["straight_norms"], records[0]["resumed_norms"]
    same = pair.save.layout == pair.load.layout and deterministic
    loss_rel = max((rel_delta(a, b) for a, b in zip(resumed, straight, strict=True)), default=math.nan)
    norm_rel = max((rel_delta(a, b) for a, b in zip(resumed_norms, straight_norms, strict=True)), default=math.nan)
    loss_tol, norm_tol = (0.0, 0.0) if same else (tol.loss_rtol, tol.grad_norm_rtol)
    finite = all(math.isfinite(v) for v in straight + resumed + straight_norms + resumed_norms)
    checks = [
        _check("resumed losses continue the uninterrupted run", finite and loss_rel <= loss_tol,
               f"{len(resumed)} steps, largest relative difference {loss_rel:.2e} (limit {loss_tol:.2e})"),
        _check("resumed grad norms continue the uninterrupted run", finite and norm_rel <= norm_tol,
               f"{len(resumed_norms)} steps, largest relative difference {norm_rel:.2e} (limit {norm_tol:.2e})"),
    ]
    return {
        "id": pair.id, "saved_in": pair.save.layout.name, "loaded_in": pair.load.layout.name,
        "model": pair.save.model, "spec": pair.save.spec, "format": "torch_dist", "async_save": pair.async_save,
        "status": "passed" if all(c["ok"] for c in checks) else "failed", "reason": None, "checks": checks,
        "straight": straight, "resumed": resumed, "straight_grad_norms": straight_norms,
        "resumed_grad_norms": resumed_norms, "loss_rel": loss_rel, "grad_norm_rel": norm_rel,
        "bytes": records[0]["bytes"],
        "save_s": max(r["save_s"] for r in records), "finish_s": max(r["finish_s"] for r in records),
        "load_s": max(r["load_s"] for r in records), "wall_s": max(r["wall_s"] for r in records),
    }


def round_trip_skipped(pair: RoundTrip) -> dict[str, Any]:
    return {"id": pair.id, "saved_in": pair.save.layout.name, "loaded_in": pair.load.layout.name,
            "model": pair.save.model, "spec": pair.save.spec, "status": "skipped", "reason": pair.skip,
            "checks": []}


def round_trip_line(res: dict[str, Any], index: int, total: int) -> str:
    """The one line printed per round trip as it finishes."""
    head = f"[smoke] checkpoint {index}/{total} {res['id']:<24} {res['status'].upper():<7}"
    if res["status"] == "skipped":
        return f"{head} {res['reason']}"
    text = (f"{head} Δloss {res['loss_rel']:.1e} Δgnorm {res['grad_norm_rel']:.1e} "
            f"{res['bytes'] / 2**20:.1f} MiB save {res['save_s']:.2f}s"
            + (f" (+{res['finish_s']:.2f}s in background)" if res["async_save"] else "")
            + f" load {res['load_s']:.2f}s")
    failed = [c["name"] for c in res["checks"] if not c["ok"]]
    return text + (f" FAILED: {'; '.join(failed)}" if failed else "")


def progress_line(res: dict[str, Any], index: int, total: int) -> str:
    """The one line printed per run as it finishes."""
    head = f"[smoke] {index}/{total} {res['id']:<28} {res['status'].upper():<7}"
    if res["status"] == "skipped":
        return f"{head} {res['reason']}"
    losses, par, tm = res["losses"], res["parity"], res["timing"]
    text = f"{head} loss {losses[0]:.4f}→{losses[-1]:.4f} gnorm {res['grad_norms'][0]:.4g}"
    if par:
        text += f" Δloss {par['loss_rel']:.1e} Δgnorm {par['grad_norm_rel']:.1e}"
    if tm.get("step_median_s") is not None:
        text += f" build {tm['build_s']:.1f}s step {tm['step_median_s'] * 1000:.0f}ms"
    failed = [c["name"] for c in res["checks"] if not c["ok"]]
    return text + (f" FAILED: {'; '.join(failed)}" if failed else "")
