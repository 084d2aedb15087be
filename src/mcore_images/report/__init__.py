"""`mcore-images report --out DIR [INPUT ...]`: a static site of what ships — every stack and layer with its
tags, digest and newest certificate, a page per certificate (runs, loss curves, parity against the
tolerances, wall time, checkpoint round trips, bench against its baselines), the compatibility matrix and
the build-efficiency chart. Plain HTML, one stylesheet and inline SVG: it opens from a file:// URL, offline.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

from mcore_images.command import Command, print_json
from mcore_images.errors import InputError
from mcore_images.report import charts, inputs, pages
from mcore_images.stacks import load_stacks


def generate(out: Path, sources: list[Path], timing_files: list[Path]) -> dict[str, object]:
    """Write the site into ``out`` (replaced); returns what was written and how long it took."""
    charts.require()
    t0 = time.perf_counter()
    stacks = load_stacks()
    certs = [inputs.read(path) for path in inputs.find(sources)]
    for cert in certs:
        if cert.data is not None:
            inputs.file_under(cert, stacks)
    runs, timing_problems = inputs.read_timings(timing_files)
    notes = [f"{path}: no such file or folder" for path in sources if not path.exists()]
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / "style.css").write_text(pages.CSS + "\n")
    (out / "index.html").write_text(pages.index(stacks, certs, notes))
    (out / "matrix.html").write_text(pages.matrix(stacks))
    (out / "build.html").write_text(pages.build_page(runs, timing_problems))
    written = [cert for cert in certs if cert.data is not None]
    for cert in written:
        (out / f"{cert.slug}.html").write_text(pages.certificate_page(cert))
    return {
        "out": str(out),
        "certificates": len(certs),
        "pages": 3 + len(written),
        "invalid": sum(1 for c in certs if c.data is None),
        "seconds": round(time.perf_counter() - t0, 3),
    }


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "inputs",
        nargs="*",
        type=Path,
        metavar="INPUT",
        help="folders holding certificate.json files (searched recursively), or certificate files",
    )
    p.add_argument("--out", type=Path, required=True, help="the site's folder (replaced)")
    p.add_argument(
        "--build-timings",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="JSON from `mcore-images build-timing --out` (repeatable)",
    )


def _run(args: argparse.Namespace) -> int:
    if args.out.exists() and not args.out.is_dir():
        raise InputError(f"--out {args.out} is a file: give a folder for the site")
    result = generate(args.out, args.inputs, args.build_timings)
    if args.json:
        print_json(result)
    else:
        print(
            f"report: {result['out']}/index.html — {result['certificates']} certificate(s), "
            f"{result['invalid']} unusable, {result['pages']} page(s) in {result['seconds']:.2f} s"
        )
    return 0


COMMANDS = [
    Command(
        "report",
        "write a static site of stacks, tags, digests and certificates",
        _arguments,
        _run,
        description=__doc__.split("\n\n")[0],
        prints_data=True,
    )
]
