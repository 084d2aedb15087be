"""The attention check's results as the certificate's ``attention`` section: each tensor judged, the verdict, and
the Markdown table (pure Python, host-testable).

A result is one backend on one case. Its status: ``passed`` / ``failed`` (it ran: every tensor within the
tolerance, or not; a selected backend that raises fails too), ``unavailable`` (TE selects no backend for these
variables on this machine: recorded with TE's reason, not failed — a run under that setting stops loudly at its
first forward), ``not-applicable`` (the backend cannot take the layout at all).
"""

from __future__ import annotations

import math
from typing import Any

from mcore_images.catalogue import flash_attention
from mcore_images.smoke.kit.numerics import attention_limit

TENSORS = ("out", "dq", "dk", "dv")
RAN = ("passed", "failed")
"""A result's statuses where the backend ran (the others: unavailable, not-applicable; the schema's
$defs/attention_result lists them all)."""


def judge_tensor(error: float, bf16_error: float, reference_max: float) -> dict[str, Any]:
    """One tensor's numbers and whether its error is within the limit (a NaN or inf anywhere never passes)."""
    limit = attention_limit(bf16_error, reference_max)
    ok = all(math.isfinite(v) for v in (error, bf16_error, reference_max)) and error <= limit
    return {"error": error, "bf16_error": bf16_error, "reference_max": reference_max, "limit": limit, "ok": ok}


def result(backend: str, case: str, status: str, *, selected: str | None = None, reason: str | None = None,
           errors: dict[str, tuple[float, float, float]] | None = None) -> dict[str, Any]:
    """One row. ``errors``: tensor → (backend error, bf16 PyTorch error, largest |reference|); given, the status
    follows from them."""
    tensors = {name: judge_tensor(*errors[name]) for name in TENSORS if name in errors} if errors else {}
    if errors is not None:
        status = "passed" if tensors and all(t["ok"] for t in tensors.values()) else "failed"
    return {"backend": backend, "case": case, "status": status, "selected": selected, "reason": reason,
            "tensors": tensors}


def failure_line(res: dict[str, Any]) -> str:
    """``flash (FlashAttention 4.x) × sbhd MHA d128: out 3.92 > 0.0865, dq …`` — names backend and case."""
    who = res["backend"] + (f" ({res['selected']})" if res.get("selected") else "")
    worst = [f"{n} {t['error']:.3g} > {t['limit']:.3g}" for n, t in res["tensors"].items() if not t["ok"]]
    return f"{who} × {res['case']}: " + (", ".join(worst) if worst else (res.get("reason") or "failed"))


def measured(environment: dict[str, Any]) -> list[dict[str, Any]]:
    """What the GPU measurements (catalogue flash_attention.MEASURED) say of TE's flash backend with FlashAttention 4
    in this environment: its TE release and, where installed, its FlashAttention 4 pair, on its GPU's architecture (on
    CPU: each one measured). Whether an image ships FlashAttention 4 beside its TE rests on this; the evidence is in
    the repository."""
    te = environment.get("transformer-engine")
    if not te:
        return []
    sm = environment.get("sm")
    sms = [int(sm)] if sm else sorted({m.sm for m in flash_attention.MEASURED})
    out = []
    for arch in sms:
        judged = flash_attention.judge(environment.get(flash_attention.FA4_DISTRIBUTION),
                                       environment.get(flash_attention.CUTLASS_DSL), te, arch)
        out.append({"te": te, "sm": arch, "verdict": judged.verdict, "why": judged.why,
                    "rests_on": [m.record() for m in judged.rests_on]})
    return out


def section(results: list[dict[str, Any]], *, backends: list[dict[str, Any]], cases: list[str],
            environment: dict[str, Any], tolerance: dict[str, Any], wall_s: float,
            error: str | None = None) -> dict[str, Any]:
    """The certificate's ``attention`` section with its verdict: failed when any selected backend is wrong on any
    case; could-not-run when nothing ran (or ``error`` says why the check could not start). ``measured``: the GPU
    measurement of TE's flash backend the flash row rests on."""
    failed = [failure_line(r) for r in results if r["status"] == "failed"]
    ran = [r for r in results if r["status"] in RAN]
    if error is not None or not ran:
        status = "could-not-run"
        error = error or "no backend ran any case"
    else:
        status = "failed" if failed else "passed"
        error = f"attention wrong: {'; '.join(failed)}" if failed else None
    return {"status": status, "error": error, "environment": environment, "tolerance": tolerance,
            "backends": backends, "cases": cases, "results": results, "failed": failed, "wall_s": wall_s,
            "measured": measured(environment)}


def failed_to_finish(error: str) -> dict[str, Any]:
    """The section of a check that crashed or hung: a failure (a backend that takes the process down is wrong)."""
    return {**could_not_run(error), "status": "failed"}


def could_not_run(error: str, environment: dict[str, Any] | None = None) -> dict[str, Any]:
    return section([], backends=[], cases=[], environment=environment or {}, tolerance={}, wall_s=0.0, error=error)


def cell(res: dict[str, Any], name: str) -> str:
    """One tensor's max abs error, with its limit where it is over."""
    return _err(res, name)


def _err(res: dict[str, Any], name: str) -> str:
    t = res["tensors"].get(name)
    if not t:
        return "–"
    return f"{t['error']:.2e}" + ("" if t["ok"] else f" > {t['limit']:.2e}")


def markdown(sec: dict[str, Any]) -> list[str]:
    """The section as Markdown lines: verdict, tolerance, one row per backend × case."""
    lines = ["", f"## Attention against an fp32 reference: {sec['status'].upper()}", ""]
    if sec.get("error"):
        lines += [f"**{sec['error']}**", ""]
    env = sec.get("environment") or {}
    if env:
        lines.append("- Environment: " + ", ".join(f"{k} {v}" for k, v in env.items() if v is not None))
    if (sec.get("tolerance") or {}).get("why"):
        lines.append(f"- Tolerance: {sec['tolerance']['why']}")
    lines += [f"- {b['name']}: {b['about']}" for b in sec.get("backends", [])]
    for m in sec.get("measured") or []:
        evidence = sorted({r["evidence"] for r in m.get("rests_on") or []})
        lines.append(f"- TE {m['te']}'s flash backend with FlashAttention 4 on sm_{m['sm']}, as measured on a GPU: "
                     f"{m['verdict'] or 'not measured'}: {m['why']}"
                     + (f" (evidence: {', '.join(evidence)})" if evidence else ""))
    if not sec.get("results"):
        return lines
    lines += ["", "| backend | selected | case | status | max abs error out | dq | dk | dv | bf16 PyTorch out |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in sec["results"]:
        status = r["status"] + (f": {r['reason']}" if r.get("reason") and r["status"] not in RAN else "")
        bf16 = (r["tensors"].get("out") or {}).get("bf16_error")
        lines.append(f"| {r['backend']} | {r.get('selected') or '–'} | {r['case']} | {status} | {_err(r, 'out')} | "
                     f"{_err(r, 'dq')} | {_err(r, 'dk')} | {_err(r, 'dv')} | "
                     f"{'–' if bf16 is None else f'{bf16:.2e}'} |")
    return lines
