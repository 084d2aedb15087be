"""``python -m mcore_images.smoke.attention.merge FILE…``: the attention sections of several environments (one TE,
FlashAttention 4 and CuTe DSL each) as ONE table: environment × backend × case × max error of out, dq, dk, dv
(pure Python). .ci/gpu/attention-pairs.sh writes one section per pair and joins them with this."""

from __future__ import annotations

import sys
from typing import Any

from mcore_images import reading
from mcore_images.errors import InputError
from mcore_images.options import OneLineParser
from mcore_images.smoke import certificate
from mcore_images.smoke.attention import table

FIX = "give a file `python -m mcore_images.smoke.attention --out` wrote"


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


def build_parser() -> OneLineParser:
    parser = OneLineParser(prog="python -m mcore_images.smoke.attention.merge", prefix="merge: ",
                           description=__doc__.split("\n\n")[0])
    parser.add_argument("sections", nargs="+", metavar="FILE",
                        help="attention sections (JSON) `python -m mcore_images.smoke.attention --out` wrote")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    sections = []
    for path in args.sections:
        try:
            sec = reading.read_json(path, "", FIX)
        except InputError as exc:
            print(f"merge: {exc}", file=sys.stderr)
            return 2
        if problems := certificate.section_problems("attention", sec):
            print(f"merge: {path}: {'; '.join(problems)}; {FIX}", file=sys.stderr)
            return 2
        sections.append(sec)
    print(render(sections), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
