"""The image under test as docker describes it, and the containers the tests start: the docker CLI and the
Engine API, nothing else."""

from __future__ import annotations

import http.client
import json
import logging
import os
import socket
import subprocess
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from mcore_images.catalogue import platforms
from mcore_images.catalogue.images import label
from mcore_images.launch import emulation

LOGGER = logging.getLogger(__name__)


GB = 1e9


class DockerError(RuntimeError):
    pass


def docker(*args: str, timeout: float = 600, check: bool = True, stdin: str | None = None) -> str:
    proc = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, check=False, input=stdin)
    if check and proc.returncode != 0:
        raise DockerError(f"docker {' '.join(args[:3])}… failed ({proc.returncode}): {proc.stderr.strip()[-800:]}")
    return proc.stdout


@dataclass(frozen=True)
class ImageInfo:
    """`docker image inspect` of the image under test, reduced to what the checks read."""

    ref: str
    id: str
    labels: dict[str, str]
    env: dict[str, str]
    size: int  # the layers unpacked (what the classic store calls Size; what a node stores)
    content_size: int  # `docker image inspect` Size: compressed with containerd's store, unpacked with the classic
    layers: tuple[str, ...]
    name: str = ""  # the reference as the user gave it (ref may be a session tag pinned to its id)
    platform: str = platforms.DEFAULT.name  # its config's os/architecture (linux/arm64: a Grace image)

    @property
    def shown(self) -> str:
        return self.name or self.ref

    @property
    def layer(self) -> str | None:
        return self.labels.get(label("layer"))

    @property
    def stack_name(self) -> str | None:
        return self.labels.get(label("stack"))

    def label(self, key: str) -> str | None:
        return self.labels.get(label(key))

    @property
    def machine(self) -> str:
        """The machine its locks were resolved for (x86_64, aarch64)."""
        known = platforms.BY_NAME.get(self.platform)
        return known.machine if known else self.platform


def docker_api(path: str) -> Any:
    """GET from the Engine API on its unix socket (DOCKER_HOST=unix://… or the default socket)."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        raise DockerError(f"DOCKER_HOST={host}: only a unix socket is read directly")

    class Connection(http.client.HTTPConnection):
        def connect(self) -> None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(60)
            self.sock.connect(host.removeprefix("unix://"))

    conn = Connection("localhost")
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        body = response.read()
    finally:
        conn.close()
    if response.status != 200:
        raise DockerError(f"Engine API GET {path}: HTTP {response.status}: {body[:300]!r}")
    return json.loads(body)


def unpacked_size(ref: str, fallback: int) -> int:
    """The sum of the image's layers, unpacked: the classic store's Size, exact (the Engine API's history).
    With containerd's image store, `docker image inspect` Size is the compressed content instead, and
    `docker images` adds that content to the snapshots; neither is the size of the image's layers."""
    try:
        history = docker_api(f"/images/{urllib.parse.quote(ref, safe='')}/history")
    except (DockerError, OSError) as error:
        LOGGER.warning("unpacked size unknown (%s); using docker image inspect's Size", error)
        return fallback
    return sum(int(step.get("Size") or 0) for step in history)


def history_comments(ref: str) -> list[str]:
    """The comment of every step of the image's history, newest first (`docker import --message` writes one)."""
    return [line for line in docker("history", "--no-trunc", "--format", "{{.Comment}}", ref).splitlines() if line]


def inspect_image(ref: str) -> ImageInfo:
    data = json.loads(docker("image", "inspect", ref))[0]
    config = data.get("Config") or {}
    env = dict(item.split("=", 1) for item in config.get("Env") or [] if "=" in item)
    content = int(data.get("Size") or 0)
    return ImageInfo(
        ref=ref,
        id=data["Id"],
        labels=dict(config.get("Labels") or {}),
        env=env,
        size=unpacked_size(data["Id"], content),
        content_size=content,
        layers=tuple((data.get("RootFS") or {}).get("Layers") or ()),
        platform=f"{data.get('Os') or 'linux'}/{data.get('Architecture') or platforms.DEFAULT.arch}",
    )


def platform_args(ref: str) -> list[str]:
    """``--platform os/arch`` for an image of another platform than this machine's (an arm64 image run here under
    QEMU: `make emulation`), which docker then runs and builds FROM as that platform; [] for a native image. The
    emulation must be registered: a missing one fails the session in one line before any container starts."""
    import pytest

    data = json.loads(docker("image", "inspect", "--format", "{{json .}}", ref, timeout=60))
    found = platforms.of_arch(data.get("Os") or "linux", data.get("Architecture") or "")
    if found is None or emulation.native(found):
        return []
    if problem := emulation.problem(found):
        raise pytest.UsageError(f"image {ref} is {found.name}: {problem}")
    return ["--platform", found.name]


PIN_REPO = "mcore-images-test"


def pin_image(image_id: str) -> str:
    """A session tag on the image's id: every check (container, FROM, docker save) then sees the same
    image even if its tag is rebuilt meanwhile."""
    tag = f"{PIN_REPO}:pin-{uuid.uuid4().hex[:12]}"
    docker("tag", image_id, tag, timeout=60)
    return tag


def unpin_image(tag: str) -> None:
    """Remove the session tag (only a tag; the image stays while another tag or a container uses it)."""
    if tag.startswith(f"{PIN_REPO}:pin-"):
        subprocess.run(["docker", "image", "rm", tag], capture_output=True, check=False, timeout=300)


def image_exists(ref: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", ref], capture_output=True, check=False).returncode == 0


def container_options(ref: str) -> tuple[str, list[str]]:
    """A new test container's name, and the `docker run` options every test container gets: that name and the
    test label (so a container can be removed by name), the image's platform, and no network: every check works
    offline. The hostname resolves to loopback, as Docker's network would make it: a program that looks up its
    own host name gets an answer at once instead of waiting for a resolver that is not there. --ipc=host, as
    NVIDIA's containers ask to be run (the doctor fails Docker's 64 MiB /dev/shm)."""
    name = f"mcore-images-test-{uuid.uuid4().hex[:10]}"
    return name, ["--name", name, "--label", "io.mcore-images.test=1", *platform_args(ref), "--network", "none",
                  "--ipc=host", "--hostname", "mcore-images-test", "--add-host", "mcore-images-test:127.0.0.1"]


def start_container(ref: str) -> str:
    """One long-lived container (container_options), always removed by the caller."""
    _, options = container_options(ref)
    return docker("run", "-d", "--rm", *options, "--entrypoint", "sleep", ref, "infinity", timeout=300).strip()


def remove_container(cid: str) -> None:
    subprocess.run(["docker", "rm", "-f", cid], capture_output=True, check=False, timeout=120)


def container_added(cid: str) -> set[str]:
    """Paths the tests themselves added in the container (`docker diff`), so that hygiene checks
    report what the image holds, whatever ran before them."""
    out = docker("diff", cid, timeout=300)
    return {line[2:] for line in out.splitlines() if line.startswith("A ")}


def containerd_store() -> bool:
    """True when the engine keeps images in containerd's store (then inspect's Size is the content size)."""
    status = docker("info", "--format", "{{json .DriverStatus}}", timeout=60)
    return "io.containerd.snapshotter" in status


def remove_image(tag: str) -> None:
    subprocess.run(["docker", "image", "rm", "-f", tag], capture_output=True, check=False, timeout=300)


def iter_lines(text: str) -> Iterator[str]:
    yield from (line for line in text.splitlines() if line.strip())
