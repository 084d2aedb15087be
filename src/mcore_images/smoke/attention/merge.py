"""``python -m mcore_images.smoke.attention.merge FILE…``: the attention sections of several environments (one TE,
FlashAttention 4 and CuTe DSL each) as ONE table: environment × backend × case × max error of out, dq, dk, dv
(pure Python). .ci/gpu/attention-pairs.sh writes one section per pair and joins them with this."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from mcore_images.smoke.attention import table


def label(sec: dict[str, Any]) -> str:
    env = sec.get("environment") or {}
    return (f"TE {env.get('transformer-engine') or '–'}, flash-attn-4 {env.get('flash-attn-4') or '–'}, "
            f"cutlass-dsl {env.get('nvidia-cutlass-dsl') or '–'}")


def render(sections: list[dict[str, Any]]) -> str:
    """One Markdown table over every section's results (ran or not), with each section's verdict first."""
    lines = ["| environment | verdict |", "|---|---|"]
    lines += [f"| {label(s)} | {s['status']}" + (f", {len(s['failed'])} wrong" if s.get("failed") else "")
              + (f": {s['error']}" if s["status"] == "could-not-run" else "") + " |" for s in sections]
    first = (sections[0].get("environment") or {}) if sections else {}
    lines += ["", f"GPU: {first.get('gpu', '–')} (sm_{first.get('sm', '–')}), torch {first.get('torch', '–')}; "
              f"tolerance: {(sections[0].get('tolerance') or {}).get('why', '–') if sections else '–'}", "",
              "| environment | backend | selected | case | status | out | dq | dk | dv | bf16 PyTorch out |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for sec in sections:
        for r in sec.get("results", []):
            cells = [table.cell(r, n) for n in table.TENSORS]
            status = r["status"] + (f": {r['reason']}" if r.get("reason") and r["status"] not in table.RAN else "")
            bf16 = (r["tensors"].get("out") or {}).get("bf16_error")
            lines.append(f"| {label(sec)} | {r['backend']} | {r.get('selected') or '–'} | {r['case']} | {status} | "
                         + " | ".join(cells) + f" | {'–' if bf16 is None else f'{bf16:.2e}'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    paths = list(sys.argv[1:] if argv is None else argv)
    if not paths:
        print("merge: give the attention sections (JSON files) to join", file=sys.stderr)
        return 2
    sections = []
    for path in paths:
        try:
            sec = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            print(f"merge: {path}: {exc}: give a file `python -m mcore_images.smoke.attention --out` wrote",
                  file=sys.stderr)
            return 2
        if problems := table.shape_problems(sec):
            print(f"merge: {path}: {'; '.join(problems)}", file=sys.stderr)
            return 2
        sections.append(sec)
    print(render(sections), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
