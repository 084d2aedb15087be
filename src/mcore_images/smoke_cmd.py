"""Host side of `mcore-images smoke` and `mcore-images certify`.

Both run the smoke suite as a separate program (``python -m smoke`` here, or inside an image with
``docker run``) and read its certificate; the host never imports the suite, torch or megatron-core.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

from mcore_images import certify
from mcore_images.errors import InputError

IMAGE_SMOKE_ROOT = Path("/opt/mcore-images")
"""Where images carry the suite (``/opt/mcore-images/smoke``, with PYTHONPATH=/opt/mcore-images)."""


def smoke_root() -> Path:
    """The folder holding ``smoke/``: this checkout's root, else the image location."""
    for root in (certify.ROOT, IMAGE_SMOKE_ROOT):
        if (root / "smoke" / "__main__.py").is_file():
            return root
    raise InputError("smoke suite not found next to this tool or in /opt/mcore-images: run from a checkout "
                     "of mcore-images, or pass --image to run it inside an image")


def _passthrough(args: argparse.Namespace) -> list[str]:
    """Arguments for the smoke: those after ``--``. Options of ours written between the image and
    ``--`` land in the remainder too (argparse stops at the positional); parse them back onto args."""
    extra = list(args.smoke_args or [])
    if "--" not in extra:
        return extra
    cut = extra.index("--")
    own, extra = extra[:cut], extra[cut + 1:]
    if own:
        mini = argparse.ArgumentParser(prog=f"mcore-images {args.command_name}", add_help=False)
        _own_options(mini, args.command_name)
        parsed, unknown = mini.parse_known_args(own)
        if unknown:
            raise InputError(f"unknown option(s) {' '.join(unknown)}: put smoke arguments after --")
        for key, value in vars(parsed).items():
            if value not in (None, False):
                setattr(args, key, value)
    return extra


def _own_options(parser: argparse.ArgumentParser, command: str) -> None:
    parser.add_argument("--out", help="folder for certificate.json/.md (default: out/smoke, out/certify/<image>)")
    if command == "smoke":
        parser.add_argument("--image", help="run inside this image (docker run --gpus all ...)")
    else:
        parser.add_argument("--skip-image-tests", action="store_true",
                            help="smoke only; the certificate records that the image tests did not run")


def local_env() -> dict[str, str]:
    """This environment with the checkout's smoke/ first on PYTHONPATH (for runs outside an image)."""
    return dict(os.environ,
                PYTHONPATH=os.pathsep.join(p for p in (str(smoke_root()), os.environ.get("PYTHONPATH")) if p))


def execute(label: str, cmd: list[str], env: dict[str, str] | None) -> int:
    """Print and run one command (here or `docker run`); a missing program is a one-line error."""
    print(f"[{label}] " + " ".join(cmd), flush=True)
    try:
        return subprocess.run(cmd, env=env).returncode
    except FileNotFoundError as exc:
        raise InputError(f"{cmd[0]} not found: install it, or run without --image") from exc


def run_smoke(args: argparse.Namespace) -> int:
    """Run the suite on this machine, or in ``--image`` through docker; returns its exit code."""
    extra = _passthrough(args)  # first: it may fill args.out / args.image
    if args.image:
        out = Path(args.out or "out/smoke").resolve()
        out.mkdir(parents=True, exist_ok=True)
        cmd = certify.docker_smoke_command(args.image, out, extra)
        env = None
    else:
        cmd = [sys.executable, "-m", "smoke", *(["--out", args.out] if args.out else []), *extra]
        env = local_env()
    return execute("smoke", cmd, env)


def default_out(image: str) -> Path:
    """``out/certify/<image with / and : made safe>``."""
    return Path("out") / "certify" / re.sub(r"[^A-Za-z0-9._-]+", "_", image)


def run_certify(args: argparse.Namespace) -> int:
    """Certify one image: digest, image tests, smoke in the image, bound certificate."""
    extra = _passthrough(args)  # first: it may fill args.out / args.skip_image_tests
    out = Path(args.out) if args.out else default_out(args.image)
    return certify.certify(args.image, out, extra, skip_image_tests=args.skip_image_tests)


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Add the ``smoke`` and ``certify`` subcommands to the CLI's subparsers."""
    smoke = sub.add_parser(
        "smoke", help="run the GPU smoke suite here or inside an image",
        description="Run `python -m smoke` (arguments after --) on this machine, or in IMAGE with docker. "
        "Exit 0 passed, 1 failed, 2 could not run.",
    )
    _own_options(smoke, "smoke")
    smoke.add_argument("smoke_args", nargs=argparse.REMAINDER, help="arguments for python -m smoke, after --")
    smoke.set_defaults(func=run_smoke, command_name="smoke")

    cert = sub.add_parser(
        "certify", help="run image tests and the smoke in an image; write a certificate bound to its digest",
        description="Resolve IMAGE's digest (docker image inspect), run tests/image and the smoke suite in "
        "the image, and write certificate.json and certificate.md. Arguments after -- go to the smoke.",
    )
    cert.add_argument("image", help="image reference, e.g. mcore-images:runtime-debian")
    _own_options(cert, "certify")
    cert.add_argument("smoke_args", nargs=argparse.REMAINDER, help="arguments for python -m smoke, after --")
    cert.set_defaults(func=run_certify, command_name="certify")
