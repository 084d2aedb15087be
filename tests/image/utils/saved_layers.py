"""One pass over every layer of an image: build secrets and credentials in any layer (also ones a later layer
deleted), and which layers touch given paths (torch's).

The layers are read where the engine already keeps them: containerd's content store (Docker's image store with the
containerd snapshotter, as .ci/docker-engine.sh sets it up), which holds every layer blob of an image that was built
or pulled here, the pushed candidate included. Reading them there takes seconds; `docker save`, which streams the
same blobs through the engine, took 57-133 s for the same images and is the fallback only where the content store
cannot be read (the classic image store, or an engine on another machine).
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import subprocess
import tarfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from tests.image.utils.credentials import CREDENTIAL_PATH, KEY_PATH, PRIVATE_KEY
from tests.image.utils.docker import DockerError, docker

HOST_FILES = ("/etc/resolv.conf", "/etc/hostname")
"""Files a build host's identity lands in (debootstrap copies them from the host): kept from every layer."""
HOST_FILE_LIMIT = 4096

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
    host_files: dict[str, dict[str, bytes]] = field(default_factory=dict)  # HOST_FILES path -> blob -> content
    source: str = ""  # where the layers were read

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
KEY_MARK = PRIVATE_KEY.encode()


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
            if CREDENTIAL_PATH.match(path):
                scan.hits.append((name, path, "a credential file (a tool's token or key)"))
            scan.files += 1
            scan.bytes += member.size
            handle = layer.extractfile(member)
            if handle is None:
                continue
            digest = hashlib.sha256() if member.size in sizes else None
            searcher = _Searcher([*probes, KEY_MARK] if KEY_PATH.match(path) else probes)
            kept = bytearray() if path in HOST_FILES else None
            while chunk := handle.read(CHUNK):
                searcher.feed(chunk)
                if digest is not None:
                    digest.update(chunk)
                if kept is not None and len(kept) < HOST_FILE_LIMIT:
                    kept += chunk[: HOST_FILE_LIMIT - len(kept)]
            if kept is not None:
                scan.host_files.setdefault(path, {})[name] = bytes(kept)
            if KEY_MARK in searcher.found:
                scan.hits.append((name, path, "a PEM private key"))
            for secret in secrets:
                if digest is not None and member.size == secret.size and digest.hexdigest() == secret.sha256:
                    scan.hits.append((name, path, f"a copy of {secret.path} (same sha256)"))
                for probe in secret.probes:
                    if probe in searcher.found:
                        scan.hits.append(
                            (name, path, f"content of {secret.path} ({probe[:24].decode(errors='replace')}…)")
                        )


def _scan_blob(handle: IO[bytes], name: str, secrets: list[Secret], scan: LayerScan,
               watch: Mapping[str, re.Pattern[str]]) -> None:
    """One blob: a layer tar (gzip or plain) member by member; a config, manifest or index as raw bytes."""
    head = handle.peek(512)[:512] if isinstance(handle, io.BufferedReader) else b""
    scan.blobs += 1
    if head[:2] == b"\x1f\x8b" or head[257:262] == b"ustar":
        _scan_stream(handle, name, secrets, scan, watch)
    elif head[:4] == b"\x28\xb5\x2f\xfd":
        scan.unreadable.append(f"{name}: zstd layer (Python cannot read it)")
    else:
        searcher = _Searcher([p for s in secrets for p in s.probes])
        while chunk := handle.read(CHUNK):
            searcher.feed(chunk)
        scan.hits += [(name, "-", f"content of {secret.path}") for secret in secrets for p in secret.probes
                      if p in searcher.found]


def content_store() -> Path | None:
    """The blob folder of the containerd content store the engine keeps its images in, where this machine can read
    it: the engine's own containerd (dockerd starts one below its data root) or the system's. None with the classic
    image store, or an engine whose files are not here."""
    info = json.loads(docker("info", "--format", "{{json .}}", timeout=60))
    if "io.containerd.snapshotter" not in json.dumps(info.get("DriverStatus") or []):
        return None
    for root in (Path(info.get("DockerRootDir") or "/var/lib/docker") / "containerd" / "daemon",
                 Path("/var/lib/containerd")):
        blobs = root / "io.containerd.content.v1.content" / "blobs"
        if blobs.is_dir():
            return blobs
    return None


def _blob(store: Path, digest: str) -> Path:
    algorithm, _, hexdigest = digest.partition(":")
    return store / algorithm / hexdigest


def stored_manifest(store: Path, ref: str) -> tuple[list[str], list[str]] | None:
    """The image's manifest and config digests, and its layer digests in order, from the content store (an index is
    followed to the manifest of the image's own platform); None when a blob is not there."""
    data = json.loads(docker("image", "inspect", ref, timeout=60))[0]
    target = data["Id"]
    platform = (data.get("Os") or "linux", data.get("Architecture") or "")
    meta = [target]
    for _ in range(2):
        path = _blob(store, target)
        if not path.is_file():
            return None
        doc = json.loads(path.read_bytes())
        if "manifests" not in doc:
            layers = [layer["digest"] for layer in doc.get("layers") or []]
            if not all(_blob(store, d).is_file() for d in [doc["config"]["digest"], *layers]):
                return None
            return [*meta, doc["config"]["digest"]], layers
        chosen = [m for m in doc["manifests"] if (m.get("platform") or {}).get("os") == platform[0]
                  and (m.get("platform") or {}).get("architecture") == platform[1]]
        if not chosen:
            return None
        target = chosen[0]["digest"]
        meta.append(target)
    return None


def scan_image(
    ref: str,
    secrets: list[Secret],
    watch: Mapping[str, re.Pattern[str]] | None = None,
    skip_blobs: Iterable[str] = (),
) -> LayerScan:
    """Look into every layer of ``ref`` (layer tars member by member, its manifest and config as raw bytes), read
    from the engine's content store, else from `docker save`. Secret content is searched everywhere, including files
    that a later layer deleted; `watch` records which layers touch paths matching each pattern. `skip_blobs` (layer
    digests an earlier scan already read, e.g. a parent image's) are passed over unread."""
    store = content_store()
    found = stored_manifest(store, ref) if store is not None else None
    if store is None or found is None:
        scan = scan_saved_image(ref, secrets, watch, skip_blobs)
        scan.source = "docker save (" + ("no content store readable here" if store is None else
                                          f"{ref}'s blobs are not all in {store}") + ")"
        return scan
    meta, layers = found
    skip = set(skip_blobs)
    scan = LayerScan(layers=layers, source=f"the engine's content store ({store})")
    start = time.monotonic()
    for digest in [*meta, *layers]:
        if digest in skip:
            continue
        with _blob(store, digest).open("rb") as handle:
            _scan_blob(handle, digest, secrets, scan, watch or {})
    scan.seconds = round(time.monotonic() - start, 1)
    return scan


def scan_saved_image(
    ref: str,
    secrets: list[Secret],
    watch: Mapping[str, re.Pattern[str]] | None = None,
    skip_blobs: Iterable[str] = (),
    timeout: float = 1800,
) -> LayerScan:
    """The same pass over `docker save REF`, streamed (no copy on disk). Blobs are named by their digest as the
    content store names them (``sha256:…``)."""
    watch = watch or {}
    skip = set(skip_blobs)
    scan = LayerScan()
    start = time.monotonic()
    proc = subprocess.Popen(["docker", "save", ref], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    manifest: list[dict[str, Any]] = []
    try:
        with tarfile.open(fileobj=proc.stdout, mode="r|") as outer:
            for member in outer:
                name = _digest_name(member.name)
                if not member.isfile() or name in skip:
                    continue
                handle = outer.extractfile(member)
                assert handle is not None and isinstance(handle, io.BufferedReader)
                if member.name == "manifest.json":
                    scan.blobs += 1
                    manifest = json.loads(handle.read())
                else:
                    _scan_blob(handle, name, secrets, scan, watch)
    except BaseException:
        proc.kill()  # never drain gigabytes into memory on the way out
        proc.wait()
        raise
    err = proc.stderr.read()
    if proc.wait(timeout=timeout) != 0:
        raise DockerError(f"docker save {ref} failed: {err.decode(errors='replace').strip()[-500:]}")
    if manifest:
        scan.layers = [_digest_name(layer) for layer in manifest[0].get("Layers") or []]
    scan.seconds = round(time.monotonic() - start, 1)
    return scan


def _digest_name(member: str) -> str:
    """``blobs/sha256/<hex>`` (an OCI layout's blob) as ``sha256:<hex>``; any other member name as it is."""
    found = re.fullmatch(r"blobs/(\w+)/([0-9a-f]+)", member)
    return f"{found.group(1)}:{found.group(2)}" if found else member


# Paths that belong to torch: an upper layer that writes (or whites out) any of them swapped or patched torch.
TORCH_PATHS = re.compile(r"/(site|dist)-packages/(\.wh\.)?(torch|torch-[^/]+\.dist-info)(/(?!.*__pycache__)|$)")
