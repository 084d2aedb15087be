"""`mcore-images smoke`, `bridge` and `bench`: run one of the GPU programs here or inside an image.

The three programs ship in every runtime image (``python -m mcore_images.smoke``, ``python -m
mcore_images.smoke.bridge``, ``python -m mcore_images.smoke.bench``) and take the same output flags: ``--out DIR`` for
their own report (certificate.json, bridge.json, bench.json) and ``--certificate DIR`` for a smoke certificate folder
that the bridge and the bench add their section to. The host never imports them, torch or
megatron-core: it starts the program as a separate process, here or with ``docker run`` (``--image``),
mounting the folders it names. The ``--out`` folder is claimed before anything starts (a new or empty one, or
one this command wrote before: create_only.py) and marked with what the program left in it; the image reference
is parsed first too.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from mcore_images import create_only, reading, tools
from mcore_images.catalogue import images
from mcore_images.catalogue.stacks import repo_root
from mcore_images.command import Command
from mcore_images.errors import InputError
from mcore_images.launch import container

OUT, CERT = "/out", "/cert"
"""Where an image sees the output and certificate folders."""
IMAGE_ROOT = "/opt/mcore-images"
"""Where images keep the data the programs read (env/bench-baselines.json)."""


@dataclass(frozen=True)
class Program:
    name: str
    module: str
    help: str
    default_out: str
    takes_certificate: bool

    def argv(self, out: str | None, certificate: str | None, args: list[str]) -> list[str]:
        """The program's own arguments."""
        return [*(["--out", out] if out else []), *(["--certificate", certificate] if certificate else []), *args]


PROGRAMS = (
    Program("smoke", "mcore_images.smoke",
            "Run the training smoke (every parallel layout that fits) and write a certificate.",
            "out/smoke", False),
    Program("bridge", "mcore_images.smoke.bridge",
            "Check the HF <-> Megatron bridges: exact round trip, logits, forward and backward.",
            "out/bridge", True),
    Program("bench", "mcore_images.smoke.bench",
            "Measure the training throughput (tokens/s, MFU) of reference models against baselines.",
            "out/bench", True),
)


def local_env() -> dict[str, str]:
    """This environment, with a checkout's src/ first on PYTHONPATH where this runs from one; else the installed
    programs (the wheel ships them) as they are (runs outside an image)."""
    source = repo_root() / "src"
    if (source / "mcore_images" / "smoke" / "__main__.py").is_file():
        inherited = [os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []
        return dict(os.environ, PYTHONPATH=os.pathsep.join([str(source), *inherited]))
    if importlib.util.find_spec("mcore_images.smoke.__main__") is None:
        raise InputError("the smoke programs are not installed here: install the tool's wheel, which carries them "
                         "(in a checkout: pip wheel --no-deps -w dist . && pip install dist/mcore_images-*.whl), or "
                         "pass --image to run them inside an image")
    return dict(os.environ)


def certificate_problem(certificate: Path) -> str | None:
    """Why ``certificate`` is not a smoke certificate folder the program can add its section to (None: it is)."""
    if (problem := reading.folder_problem(certificate, "--certificate")) and not problem.endswith(" not found"):
        return f"{problem}: give the smoke certificate folder (`mcore-images smoke --out DIR` writes one)"
    if problem or reading.file_problem(certificate / "certificate.json"):
        return (f"{certificate}/certificate.json not found: run `mcore-images smoke --out {certificate}` first, or "
                "drop --certificate")
    return None


def command_for(program: Program, image: str | None, out: Path, certificate: Path | None,
                args: list[str]) -> tuple[list[str], dict[str, str] | None]:
    """(argv, env) that runs the program here, or in ``image`` with the folders mounted."""
    if certificate is not None and (problem := certificate_problem(certificate)):
        raise InputError(problem)
    if not image:
        return ([sys.executable, "-m", program.module,
                 *program.argv(str(out), None if certificate is None else str(certificate), args)], local_env())
    mounts = {out: OUT, **({certificate: CERT} if certificate is not None else {})}
    baselines = repo_root() / "env" / "bench-baselines.json"
    read_only: list[Path] = []
    if program.name == "bench" and baselines.is_file() and "--baselines" not in args:
        # The bench gates against this checkout's baselines, not the ones the image was built with.
        mounts[baselines] = f"{IMAGE_ROOT}/env/bench-baselines.json"
        read_only.append(baselines)
    gpus = "--cpu" not in args
    inner = ["python", "-m", program.module, *program.argv(OUT, CERT if certificate is not None else None, args)]
    return container.run_command(image, inner, gpus=gpus, mounts=mounts, read_only=read_only,
                                 memlock=container.memlock_unlimited(image)), None


def execute(label: str, cmd: list[str], env: dict[str, str] | None) -> int:
    """Print and run one command (here or `docker run`); a missing program is a one-line error."""
    print(f"[{label}] " + " ".join(cmd), flush=True)
    return tools.run(cmd, env=env, check=False).returncode


def _arguments_for(program: Program):
    def arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument("--image", help="run inside this image (docker run --gpus all …; --cpu after -- drops --gpus)")
        p.add_argument("--out", help=f"folder for the program's report (default: {program.default_out})")
        if program.takes_certificate:
            p.add_argument("--certificate", metavar="DIR",
                           help="a smoke certificate folder to add this program's section to")
    return arguments


def image_problem(image: str) -> str | None:
    """Why ``image`` is not a reference docker can run (None when it is one)."""
    return images.reference_problem(image, "--image")


def _run_for(program: Program):
    def run(args: argparse.Namespace) -> int:
        certificate = getattr(args, "certificate", None)
        if args.image and (problem := image_problem(args.image)):
            raise InputError(problem)
        if certificate and (problem := certificate_problem(Path(certificate))):
            raise InputError(problem)
        target = create_only.claim(Path(args.out or program.default_out), program.name)
        if args.image:
            for option, folder in (("--out", target.path), ("--certificate", certificate)):
                if folder and (problem := container.mount_problem(Path(folder), option)):
                    raise InputError(problem)
            container.preflight(args.image, None if "--cpu" in args.passthrough else "all")
        cmd, env = command_for(program, args.image, target.path, Path(certificate) if certificate else None,
                               list(args.passthrough))
        if "--dry-run" in args.passthrough and not args.image:  # it shows a plan and writes nothing: nor do we
            return execute(program.name, cmd, env)
        with create_only.filled(target):
            return execute(program.name, cmd, env)
    return run


COMMANDS = tuple(
    Command(p.name, p.help, _arguments_for(p), _run_for(p),
            description=f"Run `python -m {p.module}` on this machine, or in IMAGE with docker. "
            "Exit 0 passed, 1 failed, 2 could not run.", passthrough=f"python -m {p.module}")
    for p in PROGRAMS
)
