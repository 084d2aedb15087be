"""`mcore-images report`: the command: read the certificates and timings, write the site."""


from __future__ import annotations

import argparse
import time
from pathlib import Path

from mcore_images import create_only, reading
from mcore_images.catalogue.stacks import load_stacks
from mcore_images.command import Command, print_json
from mcore_images.errors import InputError
from mcore_images.report import charts, inputs, pages

COMMAND = "report"


def generate(out: Path, sources: list[Path], timing_files: list[Path]) -> dict[str, object]:
    """Write the site into ``out``: a new folder, an empty one, or one this command wrote before, replaced
    whole (create_only.py). A missing input, a build-timing file that is not one, or an ``out`` the command may
    not write is an InputError before anything is written. Returns what was written and how long it took."""
    t0 = time.perf_counter()
    for path in sources:
        if path.is_dir():
            continue
        if problem := reading.file_problem(path, "INPUT"):
            said = f"INPUT {path}: no such file or folder" if problem.endswith(" not found") else problem
            raise InputError(f"{said}; give the folders `mcore-images certify` wrote (each holds a certificate.json) "
                             "or certificate files")
    stacks = load_stacks()
    runs = inputs.read_timings(timing_files)
    target = create_only.claim(out, COMMAND)
    charts.require()
    certs = [inputs.read(path) for path in inputs.find(sources)]
    for cert in certs:
        if cert.data is not None:
            inputs.file_under(cert, stacks)
    written = [cert for cert in certs if cert.data is not None]
    with create_only.writing(target) as site:
        (site / "style.css").write_text(pages.CSS + "\n")
        (site / "index.html").write_text(pages.index(stacks, certs))
        (site / "matrix.html").write_text(pages.matrix(stacks))
        (site / "build.html").write_text(pages.build_page(runs))
        for cert in written:
            (site / f"{cert.slug}.html").write_text(pages.certificate_page(cert))
    return {
        "out": str(out),
        "certificates": len(certs),
        "pages": 3 + len(written),
        "invalid": len(certs) - len(written),
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
    p.add_argument("--out", type=Path, required=True,
                   help="the site's folder: a new or empty one, or one `report` wrote before (then replaced)")
    p.add_argument(
        "--build-timings",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="JSON from `mcore-images build-timing --out` (repeatable)",
    )


def _run(args: argparse.Namespace) -> int:
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
        COMMAND,
        "Write a static site of the stacks, their tags, digests and certificates.",
        _arguments,
        _run,
        description="Read the certificates under each INPUT folder (and build timings, if given) and write a static "
        "site to --out: a page per stack with its images' tags, digests and what each certificate measured.",
        prints_data=True,
    )
]
