"""`mcore-images kube-manifest IMAGE`: the smoke's Kubernetes Job (deploy/k8s/smoke-job.yaml) with IMAGE in
place of the image it names, printed for `kubectl apply -f -`.

The image is judged as a reference first, so a value with a newline or a YAML fragment in it cannot
reach the manifest; the file's comments and layout are kept (the one ``image:`` line is rewritten). The cluster's
nodes pull the image themselves: a name with no registry host (Docker Hub's, for them) or with this machine's own
loopback registry gets one line of warning on stderr, the manifest still printed.
"""

from __future__ import annotations

import argparse
import ipaddress
import re
import sys
from pathlib import Path

from mcore_images import reading
from mcore_images.catalogue import images
from mcore_images.catalogue.stacks import INSTALLED_DATA, repo_root
from mcore_images.command import Command
from mcore_images.errors import InputError

JOB = Path("deploy") / "k8s" / "smoke-job.yaml"
"""The Job, below a checkout's root; the wheel ships the same file (its data/deploy links to deploy/)."""
MAX_JOB_BYTES = 1 << 20
"""The largest Job manifest read (1 MiB: the shipped one is 3 KB); /dev/zero as --job once filled a 24 GiB machine."""
_IMAGE_LINE = re.compile(r"^(\s*image:\s*)(\S+)\s*$", re.MULTILINE)


def manifest(image: str, job: Path) -> str:
    """The Job's text with every container image replaced by ``image``."""
    try:
        images.parse(image)
    except ValueError as exc:
        raise InputError(f"IMAGE: {exc}; give REPO:TAG or REPO@sha256:…") from None
    text = reading.read_text(job, "the Job manifest", "pass a Kubernetes Job manifest (YAML) as --job FILE",
                             max_bytes=MAX_JOB_BYTES)
    replaced, count = _IMAGE_LINE.subn(lambda m: m.group(1) + image, text)
    if count == 0:
        raise InputError(f"{job} has no `image:` line to replace: pass a Job manifest with a container image")
    return replaced


def pull_warning(image: str) -> str | None:
    """Why a cluster's nodes may not pull ``image`` from where this machine has it (None: it names a registry the
    nodes may reach)."""
    ref = images.parse(image)
    if ref.host is None:
        if "/" in ref.repository:  # a Docker Hub account's repository: maybe meant
            return (f"{image} names no registry host: each node pulls it from Docker Hub as "
                    f"docker.io/{ref.repository}; name its registry if it is elsewhere")
        return (f"{image} names no registry, so each node pulls it from Docker Hub as docker.io/library/"
                f"{ref.repository}: push the image to a registry the cluster reaches and name it there "
                "(REGISTRY/mcore-images:TAG)")
    host = ref.host[1:ref.host.index("]")] if ref.host.startswith("[") else ref.host.split(":")[0]
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if loopback:
        return (f"{image} is in this machine's own registry ({ref.host}), which the cluster's nodes cannot reach: "
                "push it to a registry they reach and name it there")
    return None


def default_job() -> Path:
    """The Job of $MCORE_IMAGES_ROOT or of the checkout this package runs from, else the copy installed with it."""
    places = [repo_root() / JOB, INSTALLED_DATA / JOB]
    return next((place for place in places if place.is_file()), places[0])


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("image", help="the image the Job runs: REPO:TAG or REPO@sha256:…")
    p.add_argument("--job", type=Path, default=None,
                   help=f"the Job manifest (default: {JOB} of this checkout, else the one installed with the tool)")


def _run(args: argparse.Namespace) -> int:
    text = manifest(args.image, args.job or default_job())
    if warning := pull_warning(args.image):
        print(f"kube-manifest: warning: {warning}", file=sys.stderr)
    print(text, end="")
    return 0


COMMANDS = (Command("kube-manifest", "Print the smoke's Kubernetes Job for an image, for `kubectl apply -f -`.",
                    _arguments, _run,
                    description="Print the GPU smoke as a Kubernetes Indexed Job (2 nodes x 8 GPUs, torchrun with a "
                    "c10d rendezvous) running IMAGE: mcore-images kube-manifest REGISTRY/mcore-images:TAG | kubectl "
                    "apply -f -. The cluster's nodes pull IMAGE themselves: name it with its registry."),)
