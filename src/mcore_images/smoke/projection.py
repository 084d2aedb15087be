"""How long a plan will take, projected from a measured run: what ``--dry-run`` prints per GPU count.

The measurement is a certificate (or the slimmed one in env/smoke-timings.json): its start-up
(launch, imports, init), teardown, and each run's build and step times. A planned run found there by
id counts its measured time (scaled to the planned number of steps); one not found is estimated from
the dp run of the same model and spec (the same model on more ranks takes at least as long), and the
projection says how many were estimated. Pure Python.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from mcore_images import PACKAGE, SOURCE_TREE, reading
from mcore_images.errors import InputError
from mcore_images.options import OneLineParser
from mcore_images.smoke.layouts import Plan

SCHEMA = "mcore-images/smoke-timings/v1"


def default_file() -> Path:
    """env/smoke-timings.json of $MCORE_IMAGES_ROOT, else of the checkout this package lives in, else the copy the
    installed tooling ships (what a wheel or an image has): the first that exists."""
    name = Path("env") / "smoke-timings.json"
    places = [Path(root) / name for root in (os.environ.get("MCORE_IMAGES_ROOT"),) if root]
    places += [SOURCE_TREE / name, PACKAGE / "data" / name]
    return next((place for place in places if place.is_file()), places[0])


def slim(cert: dict[str, Any]) -> dict[str, Any]:
    """The parts of a certificate a projection needs (what env/smoke-timings.json keeps)."""
    gpu = (cert.get("environment") or {}).get("gpu") or {}
    return {
        "schema": SCHEMA, "gpu": gpu.get("model"), "gpus": gpu.get("count"), "measured": cert.get("created"),
        "command": cert.get("command"), "steps": (cert.get("settings") or {}).get("steps"),
        "packages": (cert.get("environment") or {}).get("packages"),
        "timing": {k: round(v, 2) for k, v in (cert.get("timing") or {}).items() if isinstance(v, int | float)},
        "runs": {r["id"]: {"build_s": round(r["timing"]["build_s"], 3), "steps_s": round(r["timing"]["steps_s"], 3)}
                 for r in cert.get("runs", []) if r.get("status") != "skipped" and r.get("timing")},
        "round_trips": {p["id"]: round(p["wall_s"], 3) for p in (cert.get("checkpoint") or {}).get("pairs", [])
                        if p.get("status") != "skipped"},
    }


def load(path: Path) -> dict[str, Any]:
    """A timings file or a whole certificate; ValueError naming the problem (reading.py's rungs first: a regular file
    within its limit)."""
    neither = f"{path} is neither a smoke certificate nor a {SCHEMA} file"
    try:
        data = reading.read_json_object(path, "", "give a smoke certificate.json", neither)
    except InputError as exc:
        raise ValueError(str(exc)) from None
    if data.get("schema") != SCHEMA:
        if not isinstance(data.get("runs"), list):
            raise ValueError(neither)
        data = slim(data)
    if not data.get("runs") or not data.get("steps"):
        raise ValueError(f"{path} holds no measured runs")
    return data


def _estimate_key(run_id: str) -> str:
    """dp1/moe/te for tp2/moe/te/repeat: the dp run of the same model and spec."""
    parts = run_id.split("/")
    return f"dp1/{parts[1]}/{parts[2]}"


def project(plan: Plan, timings: dict[str, Any], steps: int) -> dict[str, Any]:
    """Projected seconds for ``plan`` at ``steps`` steps per run, and how much of it was measured."""
    t = timings["timing"]
    start = t.get("launch_to_rank_s", 0.0) + t.get("imports_s", 0.0) + t.get("init_s", 0.0)
    teardown = t.get("teardown_s", 0.0)
    runs_s = 0.0
    measured = estimated = 0
    missing = []
    for run in plan.to_run:
        entry = timings["runs"].get(run.id)
        if entry is not None:
            measured += 1
        else:
            entry = timings["runs"].get(_estimate_key(run.id))
            if entry is None:
                missing.append(run.id)
                continue
            estimated += 1
        runs_s += entry["build_s"] + entry["steps_s"] * steps / timings["steps"]
    for pair in plan.round_trips:  # a fixed number of steps, whatever --steps says
        if pair.skip is None:
            if pair.id in timings.get("round_trips", {}):
                measured += 1
                runs_s += timings["round_trips"][pair.id]
            else:
                missing.append(pair.id)
    return {"total_s": start + runs_s + teardown, "start_s": start, "runs_s": runs_s, "teardown_s": teardown,
            "measured": measured, "estimated": estimated, "missing": missing}


def render(p: dict[str, Any], timings: dict[str, Any], world: int) -> str:
    line = (f"projected wall time on {world} × {timings.get('gpu')}: {p['total_s']:.0f} s = {p['start_s']:.0f} s "
            f"start + {p['runs_s']:.0f} s runs ({p['measured']} measured, {p['estimated']} estimated from the dp run "
            f"of the same model and spec) + {p['teardown_s']:.0f} s teardown; "
            f"from the run of {timings.get('measured')}")
    if p["missing"]:
        line += f"; no measurement for {', '.join(p['missing'])}"
    return line


def build_parser() -> OneLineParser:
    parser = OneLineParser(prog="python -m mcore_images.smoke.projection", prefix="projection: ",
                           description="print the timings env/smoke-timings.json keeps, from a smoke certificate")
    parser.add_argument("certificate", metavar="FILE", help="a smoke certificate.json")
    return parser


def main(argv: list[str]) -> int:
    """``python -m mcore_images.smoke.projection CERT``: the timings file env/smoke-timings.json keeps, from a
    certificate."""
    args = build_parser().parse_args(argv)
    try:
        print(json.dumps(load(Path(args.certificate)), indent=2))
    except ValueError as exc:
        print(f"projection: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
