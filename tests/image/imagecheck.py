"""Check logic of the image tests: small typed functions that return a list of problems ([] = pass).

The tests under tests/image/<layer>/ assert that these lists are empty; test_negative.py calls the
same functions on deliberately broken images and asserts that they are not. Everything here talks to
an image only through the docker CLI (or a testinfra host); what to expect comes from the image's
labels and env/stacks.json, never from a list kept in this file. The few tables below name *where*
to look (which distribution a label describes, which module it must make importable), not versions.
"""

from __future__ import annotations

import hashlib
import http.client
import io
import json
import logging
import os
import re
import socket
import subprocess
import sys
import tarfile
import time
import urllib.parse
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

LOGGER = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
if str(REPO / "src") not in sys.path:  # the host tooling (stdlib only); `make setup` installs it too
    sys.path.insert(0, str(REPO / "src"))

from mcore_images.stacks import LAYERS, NONE, Stack, load_stacks  # noqa: E402

LABEL = "io.mcore-images."
SHA40 = re.compile(r"^[0-9a-f]{40}$")
GB = 1e9


# ---------------------------------------------------------------------------------------------
# What each label describes.


@dataclass(frozen=True)
class Component:
    """A versioned component: its label key, the layer that adds it, its distribution and modules."""

    key: str  # io.mcore-images.<key>; also the Stack field (with '-' -> '_')
    layer: str
    dist: str | None = None  # None: not a Python distribution (python, cuda)
    modules: tuple[str, ...] = ()  # must import where labelled; must fail with ModuleNotFoundError where 'none'

    @property
    def label(self) -> str:
        return LABEL + self.key

    @property
    def stack_field(self) -> str:
        return self.key.replace("-", "_")


COMPONENTS: dict[str, Component] = {
    c.key: c
    for c in (
        Component("python", "base"),
        Component("cuda", "base"),
        Component("torch", "base", "torch", ("torch",)),
        Component("te", "kernels", "transformer-engine", ("transformer_engine", "transformer_engine.pytorch")),
        Component(
            "apex",
            "kernels",
            "apex",
            ("apex", "fused_layer_norm_cuda", "amp_C", "fused_weight_gradient_mlp_cuda"),
        ),
        Component(
            "mcore",
            "runtime",
            "megatron-core",
            ("megatron.core", "megatron.core.parallel_state", "megatron.core.models.gpt"),
        ),
        Component("mbridge", "runtime", "mbridge", ("mbridge",)),
        Component("megatron-bridge", "runtime", "megatron-bridge", ("megatron.bridge",)),
        Component("verl", "app", "verl", ("verl",)),
    )
}

# Every module the probe imports, torch first (the CUDA extensions need libtorch loaded).
PROBE_MODULES: tuple[str, ...] = tuple(m for c in COMPONENTS.values() for m in c.modules)


def components_of(layer: str) -> list[str]:
    return [c.key for c in COMPONENTS.values() if c.layer == layer]


def layer_applies(test_layer: str, image_layer: str) -> bool:
    """docker-stacks' pattern: a parent layer's tests run against every child image too."""
    return LAYERS.index(test_layer) <= LAYERS.index(image_layer)


# ---------------------------------------------------------------------------------------------
# The image, as docker describes it.


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

    @property
    def shown(self) -> str:
        return self.name or self.ref

    @property
    def layer(self) -> str | None:
        return self.labels.get(LABEL + "layer")

    @property
    def stack_name(self) -> str | None:
        return self.labels.get(LABEL + "stack")

    def label(self, key: str) -> str | None:
        return self.labels.get(LABEL + key)


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
    )


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


def start_container(ref: str) -> str:
    """One long-lived container, always removed by the caller. No network: every check works offline.
    The hostname resolves to loopback, as it would through Docker's network: torchrun --standalone
    (the CPU smoke run) binds its store to the hostname."""
    name = f"mcore-images-test-{uuid.uuid4().hex[:10]}"
    return docker(
        "run", "-d", "--rm", "--network", "none", "--hostname", "mcore-images-test",
        "--add-host", "mcore-images-test:127.0.0.1", "--name", name, "--label", "io.mcore-images.test=1",
        "--entrypoint", "sleep", ref, "infinity",
        timeout=300,
    ).strip()  # fmt: skip


def remove_container(cid: str) -> None:
    subprocess.run(["docker", "rm", "-f", cid], capture_output=True, check=False, timeout=120)


def stack_for(image: ImageInfo, stacks: Mapping[str, Stack] | None = None) -> Stack | None:
    """The env/stacks.json entry named by the image's stack label (None: not one of ours)."""
    stacks = stacks if stacks is not None else load_stacks()
    return stacks.get(image.stack_name or "")


# ---------------------------------------------------------------------------------------------
# Facts from inside the image.


def probe_source() -> str:
    return (HERE / "probe.py").read_text()


def run_probe(run: Any, modules: Iterable[str] = PROBE_MODULES) -> dict[str, Any]:
    """Run probe.py in the image. `run` is a testinfra host's run (or anything with its signature)."""
    args = " ".join(["%s"] * (1 + len(tuple(modules))))
    result = run(f"timeout 900 python -c {args}", probe_source(), *modules)
    if result.rc != 0:
        raise AssertionError(f"the probe failed in the image (exit {result.rc}): {result.stderr.strip()[-1500:]}")
    return json.loads(result.stdout)


def installed(facts: Mapping[str, Any], dist: str) -> str | None:
    entry = facts["dists"].get(normalize(dist))
    return entry["version"] if entry else None


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# ---------------------------------------------------------------------------------------------
# Versions and imports.


def same_version(pinned: str, have: str) -> bool:
    """'2.13.0a0' matches '2.13.0a0+8145d630e8' (a local build tag); '2.11' matches '2.11.0'."""
    try:
        want, got = Version(pinned), Version(have)
    except InvalidVersion:
        return pinned == have
    return want == got if want.local else want == Version(got.public)


def version_problems(key: str, labels: Mapping[str, str], facts: Mapping[str, Any]) -> list[str]:
    """The version in label io.mcore-images.<key> is what the image has installed."""
    comp = COMPONENTS[key]
    pinned = labels.get(comp.label)
    if pinned is None:
        return [f"label {comp.label} is missing; every {comp.layer}+ image carries it"]
    if key == "python":
        have = facts["python"]["major_minor"]
        return [] if have == pinned else [f"{comp.label}={pinned} but the interpreter is Python {have}"]
    if key == "cuda":
        torch = facts.get("torch")
        if not torch:
            return [f"{comp.label}={pinned} but torch does not import, so its CUDA version is unknown"]
        have = torch.get("cuda") or "none (a CPU build of torch)"
        return (
            []
            if ".".join(have.split(".")[:2]) == pinned
            else [f"{comp.label}={pinned} but torch.version.cuda is {have}"]
        )
    assert comp.dist is not None
    have = installed(facts, comp.dist)
    if pinned == NONE:
        return [] if have is None else [f"{comp.label}=none but {comp.dist} {have} is installed"]
    if have is None:
        return [f"{comp.label}={pinned} but {comp.dist} is not installed"]
    if key == "apex":  # a commit or 'base' (from the base image): presence is what the version can tell
        return []
    problems = [] if same_version(pinned, have) else [f"{comp.label}={pinned} but {comp.dist} {have} is installed"]
    if key == "te":  # the core wheel and the compiled extension must be the same release as the label
        for name, entry in sorted(facts["dists"].items()):
            if name.startswith("transformer-engine-") and not same_version(pinned, entry["version"]):
                problems.append(f"{comp.label}={pinned} but {name} {entry['version']} is installed")
    return problems


def apex_commit_problems(labels: Mapping[str, str], facts: Mapping[str, Any]) -> tuple[list[str], str | None]:
    """(problems, reason-it-cannot-be-compared). apex records its commit only when pip installed it
    from git (direct_url.json vcs_info) or a version carries it; a wheel built from a source folder
    records neither, and then the commit cannot be checked from inside the image."""
    pinned = labels.get(COMPONENTS["apex"].label, "")
    if not SHA40.match(pinned):
        return [], f"io.mcore-images.apex is '{pinned}': no commit to compare"
    entry = facts["dists"].get("apex")
    if entry is None:
        return [f"io.mcore-images.apex={pinned} but apex is not installed"], None
    vcs = ((entry.get("direct_url") or {}).get("vcs_info") or {}).get("commit_id")
    if vcs:
        return ([] if vcs == pinned else [f"io.mcore-images.apex={pinned} but apex was installed from {vcs}"]), None
    local = re.findall(r"[0-9a-f]{7,40}", entry["version"].partition("+")[2])
    if local:
        ok = any(pinned.startswith(part) for part in local)
        return ([] if ok else [f"io.mcore-images.apex={pinned} but apex's version is {entry['version']}"]), None
    return [], (
        f"apex {entry['version']} was installed from a wheel that records no commit "
        f"(direct_url: {(entry.get('direct_url') or {}).get('url', 'none')})"
    )


def import_problems(key: str, labels: Mapping[str, str], facts: Mapping[str, Any]) -> list[str]:
    """Each module of the component imports where it is labelled; where 'none', each import fails
    with ModuleNotFoundError (any other error means a broken leftover, not an absent package)."""
    comp = COMPONENTS[key]
    pinned = labels.get(comp.label)
    if pinned is None:
        return [f"label {comp.label} is missing"]
    problems = []
    for module in comp.modules:
        result = facts["imports"].get(module)
        if result is None:
            problems.append(f"the probe did not try `import {module}`")
        elif pinned != NONE and not result["ok"]:
            problems.append(f"{comp.label}={pinned} but `import {module}` fails: {result['error']}")
        elif pinned == NONE and result["ok"]:
            problems.append(f"{comp.label}=none but `import {module}` works")
        elif pinned == NONE and result["error_type"] != "ModuleNotFoundError":
            problems.append(
                f"{comp.label}=none and `import {module}` fails, but with {result['error']} "
                "(a leftover of the package, not its absence)"
            )
    return problems


def duplicate_problems(facts: Mapping[str, Any]) -> list[str]:
    """A distribution installed twice in one folder is a broken install; one of the labelled components
    installed in two folders (a venv over NGC's system packages) means one copy shadows the other."""
    labelled = {normalize(c.dist) for c in COMPONENTS.values() if c.dist}
    problems = []
    for name, copies in sorted(facts["duplicates"].items()):
        folders = [os.path.dirname(c["path"]) for c in copies]
        where = ", ".join(f"{c['version']} in {c['path']}" for c in copies)
        if len(set(folders)) < len(folders):
            problems.append(f"{name} is installed twice in one folder: {where}")
        elif name in labelled or name.startswith("transformer-engine"):
            problems.append(f"{name} is installed in several folders, one shadowing the other: {where}")
    return problems


def mcore_floor_problems(facts: Mapping[str, Any], floor: str = "0.13") -> list[str]:
    """verl asserts megatron-core >= 0.13 (its oldest supported release)."""
    have = installed(facts, "megatron-core")
    if have is None:
        return ["megatron-core is not installed"]
    return [] if Version(have) >= Version(floor) else [f"megatron-core {have} < {floor} (verl's minimum)"]


def python_floor_problems(facts: Mapping[str, Any]) -> list[str]:
    """megatron-core >= 0.17 needs Python >= 3.12, and Python satisfies megatron-core's Requires-Python."""
    entry = facts["dists"].get("megatron-core")
    if entry is None:
        return ["megatron-core is not installed"]
    python = Version(facts["python"]["version"])
    problems = []
    if Version(entry["version"]) >= Version("0.17") and python < Version("3.12"):
        problems.append(f"megatron-core {entry['version']} needs Python >= 3.12, the image has {python}")
    try:
        spec = SpecifierSet(entry.get("requires_python") or "")
    except InvalidSpecifier:
        return [*problems, f"megatron-core's Requires-Python is unreadable: {entry['requires_python']!r}"]
    if python not in spec:
        problems.append(f"megatron-core {entry['version']} requires Python {spec}, the image has {python}")
    return problems


def label_pin_problems(image: ImageInfo, stack: Stack) -> list[str]:
    """Every io.mcore-images.* label that names a pin equals env/stacks.json for the labelled stack."""
    expected = {"stack": stack.name, "flavor": stack.flavor, "base": stack.base_image}
    for comp in COMPONENTS.values():
        expected[comp.key] = getattr(stack, comp.stack_field)
    if image.layer in stack.size_budget_gb:
        expected["size-budget-gb"] = str(stack.size_budget_gb[image.layer])
    problems = []
    for key, want in expected.items():
        have = image.label(key)
        if have is None:
            continue  # which labels a layer must carry is checked per component, in its layer's folder
        same = float(have) == float(want) if key == "size-budget-gb" else have == want
        if not same:
            problems.append(f"label {LABEL}{key}={have} but env/stacks.json pins {want} for stack {stack.name}")
    return problems


# ---------------------------------------------------------------------------------------------
# Environment.

# Requirements, not versions: each line says why the variable must be set this way in a runtime image.
REQUIRED_ENV: dict[str, str] = {
    "CUDA_DEVICE_MAX_CONNECTIONS": "1",  # Megatron's TP/CP comm-compute overlap relies on one work queue
    "NCCL_NVLS_ENABLE": "0",  # NVLink multicast off unless a site opts in
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",  # the same for torch's symmetric memory
    "NVSHMEM_DISABLE_NVLS": "1",  # and for NVSHMEM (TE / DeepEP paths)
}


def env_problems(env: Mapping[str, str], stack_label: str | None, where: str) -> list[str]:
    problems = [
        f"{where}: {k}={env.get(k, '<unset>')}, required {v}" for k, v in REQUIRED_ENV.items() if env.get(k) != v
    ]
    if "/opt/mcore-images" not in (env.get("PYTHONPATH") or "").split(":"):
        problems.append(
            f"{where}: PYTHONPATH={env.get('PYTHONPATH', '<unset>')} lacks /opt/mcore-images "
            "(smoke and the doctor are imported from there)"
        )
    if env.get("MCORE_IMAGES_STACK") != stack_label:
        problems.append(
            f"{where}: MCORE_IMAGES_STACK={env.get('MCORE_IMAGES_STACK', '<unset>')}, "
            f"the stack label says {stack_label}"
        )
    return problems


# ---------------------------------------------------------------------------------------------
# Hygiene.

# Folders a build uses and a published image must not keep anything in (a BuildKit mount point
# may stay behind as an empty folder: only files count).
BUILD_LEFTOVERS = (
    "/root/.cache/pip",
    "/root/.cache/uv",
    "/root/.ccache",
    "/root/.cache/ccache",
    "/wheels",
    "/src/apex",
    "/run/secrets",
    "/tmp",
    "/var/tmp",
)

# One walk of the filesystem finds build trees and VCS folders.
FIND_TREES = (
    "find / -xdev \\( -name .git -o -name '*.egg-info' -o -path '*/build/temp.*' "
    "-o -path '*/build/lib.*' -o -name CMakeFiles -o -name CMakeCache.txt "
    "-o -name 'build.ninja' -o -name '.ninja_log' \\) -print -prune 2>/dev/null || true"
)

PACKAGE_DIRS = re.compile(r"/(site|dist)-packages/")


def container_added(cid: str) -> set[str]:
    """Paths the tests themselves added in the container (`docker diff`), so that hygiene checks
    report what the image holds, whatever ran before them."""
    out = docker("diff", cid, timeout=300)
    return {line[2:] for line in out.splitlines() if line.startswith("A ")}


def leftover_problems(run: Any, ignore: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """Files left in a build's cache, wheel or scratch folders."""
    dirs = " ".join(BUILD_LEFTOVERS)
    out = run(
        f'for d in {dirs}; do [ -d "$d" ] && find "$d" -mindepth 1 \\! -type d -print; done '
        "2>/dev/null | head -n 200 || true"
    ).stdout
    return [f"build leftover: {line}" for line in iter_lines(out) if line not in ignore][:50]


def tree_problems(paths: Iterable[str], ignore: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """`.git` folders, *.egg-info and setuptools/CMake/ninja build trees outside installed packages."""
    problems = []
    for path in paths:
        if PACKAGE_DIRS.search(path) or path in ignore:
            continue  # inside installed packages: their metadata (egg-info of a legacy install), not a build
        problems.append(f"build tree or VCS folder: {path}")
    return problems


def builder_only_packages(stack: Stack, repo: Path = REPO) -> set[str]:
    """Packages the builder stage's lock adds that no published layer's lock lists (nvcc, cccl, ninja…)."""
    locks = repo / "env" / "locks" / stack.name

    def names(layer: str) -> set[str]:
        path = locks / f"{layer}.txt"
        if not path.is_file():
            return set()
        return {normalize(m.group(1)) for m in re.finditer(r"^([A-Za-z0-9._-]+)==", path.read_text(), re.M)}

    return names("builder") - set().union(*(names(layer) for layer in LAYERS))


def toolchain_problems(facts: Mapping[str, Any], run: Any, builder_only: set[str]) -> list[str]:
    """No compiler toolchain from the builder stage: no pip nvcc, no builder-only distribution."""
    problems = [
        f"builder package installed: {name} {facts['dists'][name]['version']}"
        for name in sorted(builder_only)
        if name in facts["dists"]
    ]
    prefix = facts["python"]["prefix"]
    out = run(
        f"find {prefix} /usr/local/lib /usr/lib -path '*-packages/nvidia/*/bin/nvcc' 2>/dev/null | head -n 5 || true"
    ).stdout
    problems += [f"pip nvcc from the builder: {line}" for line in out.splitlines() if line.strip()]
    return problems


def containerd_store() -> bool:
    """True when the engine keeps images in containerd's store (then inspect's Size is the content size)."""
    status = docker("info", "--format", "{{json .DriverStatus}}", timeout=60)
    return "io.containerd.snapshotter" in status


def size_problems(image: ImageInfo) -> list[str]:
    """The content size (compressed layers: what a pull downloads, `docker image inspect` Size with
    containerd's image store) is within io.mcore-images.size-budget-gb (README: Tags)."""
    budget = image.label("size-budget-gb")
    if budget is None:
        return ["label io.mcore-images.size-budget-gb is missing"]
    if image.content_size > float(budget) * GB:
        return [
            f"image content is {image.content_size / GB:.3f} GB (compressed; {image.size / GB:.2f} GB unpacked), "
            f"over its budget of {budget} GB (io.mcore-images.size-budget-gb; 1 GB = 1e9 bytes)"
        ]
    return []


# ---------------------------------------------------------------------------------------------
# Build secrets: scan every saved layer, not only the final filesystem.

PEM = re.compile(rb"-----BEGIN CERTIFICATE-----\s+(.+?)\s*-----END CERTIFICATE-----", re.S)


def pem_certs(data: bytes) -> list[list[bytes]]:
    """Each certificate's base64 lines."""
    return [[ln.strip() for ln in m.group(1).splitlines() if ln.strip()] for m in PEM.finditer(data)]


@dataclass(frozen=True)
class Secret:
    """A file passed to the build as a secret: its sha256 and the byte strings that betray its content."""

    path: str
    size: int
    sha256: str
    probes: tuple[bytes, ...]  # distinctive chunks: a middle base64 line of each non-public certificate
    note: str


def make_secret(path: Path, public: Iterable[bytes]) -> Secret:
    """Probes come from what the secret holds beyond public material: for a CA bundle, the certificates
    that are not public roots (the TLS-intercepting proxy's CA, a site CA); for any other file
    (an index URL with a token), its content."""
    data = path.read_bytes()
    certs = pem_certs(data)
    if certs:
        known = {b"".join(c) for blob in public for c in pem_certs(blob)}
        private = [c for c in certs if b"".join(c) not in known and len(c) >= 3]
        probes = tuple(c[len(c) // 2] for c in private)
        note = f"{len(certs)} certificates, {len(private)} not public roots"
    else:
        text = data.strip()
        probes = (text,) if len(text) >= 16 else ()
        note = "not a PEM bundle: its whole content is the probe"
    return Secret(str(path), len(data), hashlib.sha256(data).hexdigest(), probes, note)


def public_roots_host() -> list[bytes]:
    """The CA certificates Debian's ca-certificates package ships on this host: public by definition."""
    return [p.read_bytes() for p in Path("/usr/share/ca-certificates").rglob("*.crt") if p.is_file()]


@dataclass
class LayerScan:
    """What one pass over `docker save`'s stream found."""

    blobs: int = 0
    layers: list[str] = field(default_factory=list)  # layer blob names, in the order the manifest gives
    files: int = 0
    bytes: int = 0
    seconds: float = 0.0
    hits: list[tuple[str, str, str]] = field(default_factory=list)  # (blob, path or '-', what matched)
    touched: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # pattern -> blob -> paths
    unreadable: list[str] = field(default_factory=list)

    def layer_index(self, blob: str) -> str:
        return f"layer {self.layers.index(blob) + 1}/{len(self.layers)}" if blob in self.layers else blob


class _Searcher:
    """Streams bytes, reporting which probes occur (also across chunk boundaries)."""

    def __init__(self, probes: Iterable[bytes]):
        self.probes = [p for p in probes if p]
        self.keep = max((len(p) for p in self.probes), default=1) - 1
        self.tail = b""
        self.found: set[bytes] = set()

    def feed(self, chunk: bytes) -> None:
        if not self.probes:
            return
        window = self.tail + chunk
        for probe in self.probes:
            if probe not in self.found and probe in window:
                self.found.add(probe)
        self.tail = window[-self.keep :] if self.keep else b""


CHUNK = 1 << 20


def _scan_stream(
    stream: IO[bytes], name: str, secrets: list[Secret], scan: LayerScan, watch: Mapping[str, re.Pattern[str]]
) -> None:
    """Scan one layer tar (plain or gzip), member by member."""
    sizes = {s.size for s in secrets}
    probes = [p for s in secrets for p in s.probes]
    try:
        layer = tarfile.open(fileobj=stream, mode="r|*")  # noqa: SIM115 (closed by the `with` below)
    except tarfile.TarError as error:
        scan.unreadable.append(f"{name}: {error}")
        return
    with layer:
        for member in layer:
            path = "/" + member.name.removeprefix("./").lstrip("/")
            for key, pattern in watch.items():
                if pattern.search(path):
                    scan.touched.setdefault(key, {}).setdefault(name, []).append(path)
            if not member.isfile():
                continue
            scan.files += 1
            scan.bytes += member.size
            handle = layer.extractfile(member)
            if handle is None:
                continue
            digest = hashlib.sha256() if member.size in sizes else None
            searcher = _Searcher(probes)
            while chunk := handle.read(CHUNK):
                searcher.feed(chunk)
                if digest is not None:
                    digest.update(chunk)
            for secret in secrets:
                if digest is not None and member.size == secret.size and digest.hexdigest() == secret.sha256:
                    scan.hits.append((name, path, f"a copy of {secret.path} (same sha256)"))
                for probe in secret.probes:
                    if probe in searcher.found:
                        scan.hits.append(
                            (name, path, f"content of {secret.path} ({probe[:24].decode(errors='replace')}…)")
                        )


def scan_saved_image(
    ref: str,
    secrets: list[Secret],
    watch: Mapping[str, re.Pattern[str]] | None = None,
    skip_blobs: Iterable[str] = (),
    timeout: float = 1800,
) -> LayerScan:
    """Stream `docker save REF` (no copy on disk) and look into every blob: layer tars member by member,
    configs and manifests as raw bytes. Secret content is searched everywhere, including files that a
    later layer deleted; `watch` records which layers touch paths matching each pattern. `skip_blobs`
    (blob names an earlier scan already read, e.g. a parent image's layers) are passed over unread."""
    watch = watch or {}
    skip = set(skip_blobs)
    scan = LayerScan()
    start = time.monotonic()
    proc = subprocess.Popen(["docker", "save", ref], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    manifest: list[dict[str, Any]] = []
    probes = [p for s in secrets for p in s.probes]
    try:
        with tarfile.open(fileobj=proc.stdout, mode="r|") as outer:
            for member in outer:
                if not member.isfile() or member.name in skip:
                    continue
                scan.blobs += 1
                handle = outer.extractfile(member)
                assert handle is not None and isinstance(handle, io.BufferedReader)
                head = handle.peek(512)[:512]
                if member.name == "manifest.json":
                    manifest = json.loads(handle.read())
                elif head[:2] == b"\x1f\x8b" or head[257:262] == b"ustar":
                    _scan_stream(handle, member.name, secrets, scan, watch)
                elif head[:4] == b"\x28\xb5\x2f\xfd":
                    scan.unreadable.append(f"{member.name}: zstd layer (Python cannot read it)")
                else:  # configs, manifests, indexes: small JSON, searched as they are
                    searcher = _Searcher(probes)
                    while chunk := handle.read(CHUNK):
                        searcher.feed(chunk)
                    scan.hits += [
                        (member.name, "-", f"content of {secret.path}")
                        for secret in secrets
                        for p in secret.probes
                        if p in searcher.found
                    ]
    except BaseException:
        proc.kill()  # never drain gigabytes into memory on the way out
        proc.wait()
        raise
    err = proc.stderr.read()
    if proc.wait(timeout=timeout) != 0:
        raise DockerError(f"docker save {ref} failed: {err.decode(errors='replace').strip()[-500:]}")
    if manifest:
        scan.layers = list(manifest[0].get("Layers") or [])
    scan.seconds = round(time.monotonic() - start, 1)
    return scan


def secret_problems(scan: LayerScan) -> list[str]:
    problems = [f"{scan.layer_index(blob)}: {path}: {what}" for blob, path, what in scan.hits]
    problems += [f"could not read {item}: a secret there would go unseen" for item in scan.unreadable]
    if not scan.layers:
        problems.append("docker save gave no manifest.json: the layers could not be identified")
    return problems


# Paths that belong to torch: an upper layer that writes (or whites out) any of them swapped or patched torch.
TORCH_PATHS = re.compile(r"/(site|dist)-packages/(\.wh\.)?(torch|torch-[^/]+\.dist-info)(/(?!.*__pycache__)|$)")


def torch_layer_problems(scan: LayerScan) -> list[str]:
    """torch's files come from exactly one layer (the base layer's install); no upper layer rewrites them."""
    layers = scan.touched.get("torch", {})
    if not layers:
        return ["no layer holds torch's files (is torch installed?)"]
    if len(layers) == 1:
        return []
    return [
        f"{scan.layer_index(blob)} writes {len(paths)} torch paths, e.g. {paths[0]}"
        for blob, paths in sorted(layers.items(), key=lambda kv: scan.layer_index(kv[0]))
    ]


def iter_lines(text: str) -> Iterator[str]:
    yield from (line for line in text.splitlines() if line.strip())


# ---------------------------------------------------------------------------------------------
# The dynamic loader: TE dlopens libnccl / libcudnn by soname.

LOADER_PROBE = r"""
import ctypes, glob, json, os, re, sysconfig
site = sysconfig.get_paths()["purelib"]
pip_libs = {}
for path in glob.glob(os.path.join(site, "nvidia", "*", "lib", "lib*.so.*")):
    if re.match(r"^lib(nccl|cudnn)\.so\.\d+$", os.path.basename(path)):
        pip_libs[os.path.basename(path)] = os.path.realpath(path)
loaded = {}
for soname in sorted(pip_libs):
    try:
        ctypes.CDLL(soname)
    except OSError as error:
        loaded[soname] = "dlopen failed: %s" % error
maps = [line.split()[-1] for line in open("/proc/self/maps") if "/" in line]
for soname in pip_libs:
    if soname not in loaded:
        loaded[soname] = sorted({p for p in maps if os.path.basename(p).startswith(soname)})
print(json.dumps({"pip_libs": pip_libs, "loaded": loaded}))
"""


def loader_problems(found: Mapping[str, Any]) -> list[str]:
    """Each soname that torch's pip packages ship loads from exactly that file, and no other copy."""
    problems = []
    for soname, pip_path in sorted(found["pip_libs"].items()):
        got = found["loaded"].get(soname)
        if isinstance(got, str):
            problems.append(f"{soname}: {got} (the loader does not know torch's copy; see docker/link-nvidia-libs.sh)")
        elif pip_path not in got:
            problems.append(f"{soname} loads from {got}, not from torch's pip package {pip_path}")
        elif len(got) > 1:
            problems.append(f"{soname}: two copies mapped: {got}")
    return problems


# ---------------------------------------------------------------------------------------------
# torch unchanged since the base layer.


def repository(ref: str) -> str | None:
    """The repository part of an image reference (None for a bare image id)."""
    ref = ref.split("@", 1)[0]
    if ref.startswith("sha256:"):
        return None
    repo, sep, tag = ref.rpartition(":")
    return repo if sep and "/" not in tag else ref


def find_base_image(image: ImageInfo, explicit: str | None = None) -> ImageInfo | str:
    """The base-layer image this image was built on, or why there is none to compare with."""
    stack = image.stack_name
    if image.layer == "base":
        return "this is the base image itself"
    repos = [r for r in (repository(image.shown), "mcore-images") if r]
    candidates = [explicit] if explicit else list(dict.fromkeys(f"{repo}:base-{stack}" for repo in repos))
    notes = []
    for ref in candidates:
        if not image_exists(ref):
            notes.append(f"{ref} is not in the local image store")
            continue
        base = inspect_image(ref)
        if base.layer != "base" or base.stack_name != stack:
            notes.append(f"{ref} is a {base.layer} image of stack {base.stack_name}, not the base of {stack}")
        elif base.layers != image.layers[: len(base.layers)]:
            notes.append(f"{ref} is not this image's parent build (its layers differ); rebuild it to compare")
        else:
            return base
    return "; ".join(notes)


def base_torch_problems(base: ImageInfo, facts: Mapping[str, Any]) -> list[str]:
    theirs = probe_image(base.ref, modules=())["dists"].get("torch")
    ours = facts["dists"].get("torch")
    if not theirs or not ours:
        return [f"torch missing: in {base.ref}: {bool(theirs)}, here: {bool(ours)}"]
    problems = []
    if theirs["version"] != ours["version"]:
        problems.append(f"torch {ours['version']} here, {theirs['version']} in {base.ref}: an upper layer swapped it")
    elif theirs["record_sha256"] != ours["record_sha256"]:
        problems.append(f"torch {ours['version']}'s RECORD differs from {base.ref}'s: it was reinstalled")
    return problems


# ---------------------------------------------------------------------------------------------
# The tooling shipped in runtime images.


def shipped_stacks_problems(text: str, image: ImageInfo) -> list[str]:
    """/opt/mcore-images/env/stacks.json names the image's stack with the versions its labels carry."""
    try:
        entries = json.loads(text)["variable"]["STACKS"]["default"]
    except (KeyError, ValueError) as error:
        return [f"/opt/mcore-images/env/stacks.json is not a bake variable file: {error}"]
    entry = next((e for e in entries if e.get("name") == image.stack_name), None)
    if entry is None:
        return [f"/opt/mcore-images/env/stacks.json has no stack '{image.stack_name}'"]
    return [
        f"label {comp.label}={image.label(comp.key)} but the shipped stacks.json has {entry.get(comp.stack_field)}"
        for comp in COMPONENTS.values()
        if image.label(comp.key) is not None and image.label(comp.key) != entry.get(comp.stack_field)
    ]


LAYOUT_NAME = re.compile(r"\b(?:dp|tp|pp|vpp|ep|cp)\d+(?:-(?:dp|tp|pp|vpp|ep|cp)\d+)*\b")


def smoke_cpu_args(helptext: str, out: str) -> str:
    """A short CPU run from what the smoke suite's --help offers: two ranks, dense model, two steps,
    data parallel as the baseline and tensor parallel compared with it."""
    args = ["--cpu"]
    for option, value in (("--steps", "2"), ("--models", "dense"), ("--layouts", "tp2"), ("--out", out)):
        if option in helptext:
            args += [option, value]
    return " ".join(args)


def doctor_problems(report: Mapping[str, Any]) -> list[str]:
    """Every finding that failed or crashed, with its fix."""
    if "findings" not in report:
        return [f"the doctor's JSON has no findings: {sorted(report)}"]
    return [
        f"{f['id']}: {f['status']}: {f['finding']} (fix: {f.get('fix', '')})"
        for f in report["findings"]
        if f.get("status") in ("fail", "crash")
    ]


# ---------------------------------------------------------------------------------------------
# Deliberately wrong images, for test_negative.py.


def build_image(dockerfile: str, tag: str, secrets: Mapping[str, Path] | None = None) -> str:
    """`docker build` a Dockerfile given as text, with no build context (FROM an image already here).
    --no-cache: BuildKit's cache key ignores a secret's content, so a cached step would hold the secret
    of an earlier run (a real trap: a rotated secret does not invalidate a leaky layer)."""
    args = ["build", "-q", "--no-cache", "-t", tag]
    for sid, path in (secrets or {}).items():
        args += ["--secret", f"id={sid},src={path}"]
    docker(*args, "-", stdin=dockerfile, timeout=900)
    return tag


def remove_image(tag: str) -> None:
    subprocess.run(["docker", "image", "rm", "-f", tag], capture_output=True, check=False, timeout=300)


def first_labelled(image: ImageInfo, keys: Iterable[str]) -> str | None:
    """The first component of `keys` that the image labels with a version (not 'none')."""
    return next((k for k in keys if image.label(k) not in (None, NONE)), None)


def probe_image(ref: str, modules: Iterable[str] = PROBE_MODULES) -> dict[str, Any]:
    """Facts from a short-lived container of `ref` (removed afterwards); `modules=()` skips the
    import checks when only installed distributions are needed."""
    import testinfra

    cid = start_container(ref)
    try:
        return run_probe(testinfra.get_host(f"docker://{cid}").run, modules)
    finally:
        remove_container(cid)
