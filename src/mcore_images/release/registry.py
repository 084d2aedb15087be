"""Registry I/O: what verification, promotion and certification read from and write to a registry.

Every call goes through the real tools — oras (manifests, referrers, tags) and cosign (signatures) —
with the credentials `docker login` stored; each failure is one line naming what to do. Nothing here
judges: policy.py does. A registry on 127.0.0.1 or localhost (the CI registry, .ci/registry.sh) is
spoken to over plain HTTP, as is any registry named in $MCORE_REGISTRY_PLAIN_HTTP (comma-separated hosts).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcore_images import reading, schemas, tools
from mcore_images.catalogue import images
from mcore_images.catalogue.images import ImageRef
from mcore_images.errors import InputError

Runner = Callable[..., subprocess.CompletedProcess]
INDEX_TYPES = ("application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json")
IMAGE_TYPES = ("application/vnd.oci.image.manifest.v1+json", "application/vnd.docker.distribution.manifest.v2+json")
IMAGE_DIGEST_ANNOTATION = "io.mcore-images.image-digest"
"""Signed into every certificate signature: the signature names the image the certificate is for."""
CERTIFICATE_ANNOTATION = "io.mcore-images.certificate"
"""Signed into the image's own signature: the digest of the passing certificate artifact it rests on."""
_DIGEST_LINE = re.compile(r"^Digest: (sha256:[0-9a-f]{64})$", re.M)


class RegistryError(InputError):
    """A registry operation failed for a reason outside this tool (network, credentials, a missing
    manifest): the caller could not check, which is not the same as a refusal."""


class IntegrityError(RegistryError):
    """The registry served content that does not hash to the digest it was asked for: altered or corrupt
    storage, or something in between. Not a connection problem: verify refuses (exit 1)."""

    exit_code = 1


class ConfusedManifest(RegistryError):
    """A registry document that is not what its mediaType says (an image manifest that also lists manifests, an
    index with a config or layers): clients disagree on what it is, so it is refused (exit 1)."""

    exit_code = 1


INTEGRITY_SIGNS = ("mismatched digest", "digest mismatch", "does not match the expected digest",
                   "unexpected digest")
"""How oras and cosign word a content digest that did not verify."""


KMS_SCHEMES = ("awskms://", "gcpkms://", "azurekms://", "hashivault://", "k8s://", "pkcs11:", "env://")
"""Key references cosign resolves itself (KMS, a PKCS#11 token, an environment variable); anything else must
be a key file here."""


PEM_LABEL = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----")
PUBLIC_LABEL = b"PUBLIC KEY"
"""The label of a public key as cosign writes it (cosign.pub); a private key's label ends in PRIVATE KEY
(``ENCRYPTED SIGSTORE PRIVATE KEY`` in cosign.key)."""

FILE_KINDS = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a pipe"),
              (stat.S_ISSOCK, "a socket"))

PUBLISHER = 'README.md, "Get an image"'
"""Where a user finds whose key signed the images and where it is published (the one place that says so)."""


def key_problem(key: str, option: str = "--key", private: bool = False) -> str | None:
    """Why a cosign key cannot be used, checked before any registry call: a file that is missing, a folder, not a
    regular file, unreadable, not PEM, or the wrong half of the pair (``private``: the key a release signs with, made
    by `cosign generate-key-pair`; else the public key a signature is checked with, which a user gets from whoever
    signed the image, never makes); None for the right kind of key file, or a KMS reference."""
    if key.startswith(KMS_SCHEMES):
        return None
    wanted = ("the cosign private key (cosign.key, from cosign generate-key-pair) or a KMS URI (awskms://…)" if private
              else f"the public key of whoever signed the image (its publisher's cosign.pub; {PUBLISHER} says where "
              "this project's is) or a KMS URI (awskms://…)")
    try:
        mode = os.stat(key).st_mode
    except FileNotFoundError:
        return f"{option} {key} does not exist: give {wanted}"
    except OSError as exc:
        return f"{option} {key} cannot be read ({exc.strerror}): fix its permissions or give another key"
    if stat.S_ISDIR(mode):
        return f"{option} {key} is a folder: give {wanted}"
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in FILE_KINDS if test(mode)), "not a file")
        return f"{option} {key} is {kind}, not a regular file: give {wanted}"
    try:
        with open(key, "rb") as handle:
            head = handle.read(4096)
    except OSError as exc:
        return f"{option} {key} cannot be read ({exc.strerror}): fix its permissions or give another key"
    found = PEM_LABEL.search(head)
    if found is None:
        return f"{option} {key} is not a PEM key: give {wanted}"
    label = found.group(1)
    if private and not label.endswith(b"PRIVATE KEY"):
        return (f"{option} {key} is a PEM {label.decode()}, not a private key: give the private half of the pair, "
                "cosign.key (with COSIGN_PASSWORD in the environment), or a KMS URI")
    if not private and label.endswith(b"PRIVATE KEY"):
        return (f"{option} {key} is a private key: give its public half, cosign.pub (cosign generate-key-pair writes "
                f"it beside the private one; `cosign public-key --key {key}` prints it)")
    if not private and label != PUBLIC_LABEL:
        return f"{option} {key} is a PEM {label.decode()}, not a public key: give {wanted}"
    return None


def plain_http(ref: ImageRef) -> bool:
    host = (ref.host or "").rsplit(":", 1)[0]
    extra = {h.strip() for h in os.environ.get("MCORE_REGISTRY_PLAIN_HTTP", "").split(",") if h.strip()}
    return host in ("127.0.0.1", "localhost") or (ref.host or "") in extra or host in extra


def _run(argv: list[str], what: str, run: Runner = tools.run, cwd: Path | None = None,
         env: Mapping[str, str] | None = None, check: bool = True) -> subprocess.CompletedProcess:
    try:
        program = tools.require(argv[0])
    except InputError as exc:  # the registry could not be asked: a verdict of "could not check", not a refusal
        raise RegistryError(str(exc)) from None
    proc = run([program, *argv[1:]], capture_output=True, text=True, timeout=300, cwd=cwd,
               env=None if env is None else {**os.environ, **env})
    if check and proc.returncode != 0:
        why = [line for line in (proc.stderr or proc.stdout or "").strip().splitlines() if line.strip()]
        if any(sign in line.lower() for line in why for sign in INTEGRITY_SIGNS):
            raise IntegrityError(f"{what}: the registry served content that does not match its digest ({why[-1]}): "
                                 "its storage was altered or is corrupt; do not use this image until the registry "
                                 "is repaired and the image pushed again")
        raise RegistryError(f"{what} failed ({why[-1] if why else f'exit {proc.returncode}'}); check the "
                            "registry address and `docker login`")
    return proc


def oras(ref: ImageRef, command: str, *args: str, what: str, run: Runner = tools.run, cwd: Path | None = None,
         check: bool = True) -> subprocess.CompletedProcess:
    """`oras <command> <args…>` (command: "resolve", "manifest fetch", …) for a reference on this registry,
    with --plain-http where the host needs it."""
    flags = ["--plain-http"] if plain_http(ref) else []
    return _run(["oras", *command.split(), *flags, *args], what, run, cwd=cwd, check=check)


# ---------------------------------------------------------------------------------------------
# Reading


def resolve(ref: ImageRef, run: Runner = tools.run) -> ImageRef:
    """The reference by digest (a tag resolved through the registry)."""
    if ref.digest:
        return ref
    out = oras(ref, "resolve", ref.ref, what=f"resolving {ref.ref}", run=run).stdout.strip()
    if not images.is_digest(out):
        raise RegistryError(f"oras resolve {ref.ref} printed {out!r}, not a digest: update oras (1.2 or newer)")
    return ref.with_digest(out)


def manifest(ref: ImageRef, run: Runner = tools.run) -> dict[str, Any]:
    out = oras(ref, "manifest fetch", ref.ref, what=f"fetching the manifest of {ref.ref}", run=run).stdout
    return json.loads(out)


def is_index(document: Mapping[str, Any], ref: str) -> bool:
    """Whether a registry document is an index (else an image manifest), read from its mediaType alone. A document
    that carries both an index's ``manifests`` and an image's ``config``/``layers``, or whose fields contradict its
    mediaType, is refused: containerd reads such a document by one field and other clients by another, so what one
    verifies is not what another pulls. Without a mediaType (older OCI documents) the fields decide, if they agree."""
    kind = document.get("mediaType")
    lists = "manifests" in document
    holds = "config" in document or "layers" in document
    if lists and holds:
        raise ConfusedManifest(f"{ref} is both an index (manifests) and an image manifest (config, layers): refused, "
                               "as clients disagree on what it is; push a plain image manifest or index")
    if kind in INDEX_TYPES and not holds:
        return True
    if kind in IMAGE_TYPES and not lists:
        return False
    if kind is None and (lists or holds):
        return lists
    raise ConfusedManifest(f"{ref} says it is {kind or 'nothing'} but holds "
                           f"{'manifests' if lists else 'config/layers' if holds else 'neither manifests nor layers'}: "
                           "refused; push a document whose mediaType says what it is")


def registry_labels(image: ImageRef, run: Runner = tools.run) -> dict[str, str]:
    """The image's labels as the registry holds them (nothing is pulled): the config of the digest's image,
    or of each platform of an index (which must agree)."""
    top = manifest(image, run)
    refs = ([image.with_digest(m["digest"]) for m in top.get("manifests", [])
             if (m.get("platform") or {}).get("os") != "unknown"]  # skip attestation manifests
            if is_index(top, image.ref) else [image])
    found = []
    for ref in refs:
        body = top if ref == image else manifest(ref, run)
        if ref != image and is_index(body, ref.ref):
            raise ConfusedManifest(f"{image.ref} lists {ref.ref}, which is itself an index: refused (an index of "
                                   "images only)")
        config = oras(image, "blob fetch", "--output", "-", f"{image.repository}@{body['config']['digest']}",
                      what=f"fetching the config of {ref.ref}", run=run).stdout
        found.append(dict((json.loads(config).get("config") or {}).get("Labels") or {}))
    if not found or any(labels != found[0] for labels in found[1:]):
        raise RegistryError(f"the platforms of {image.ref} carry different labels: promote one platform's digest")
    return found[0]


def platform_children(image: ImageRef, run: Runner = tools.run) -> dict[str, ImageRef] | None:
    """An index's image manifests by platform (``linux/arm64`` → REPO@its digest; attestation manifests, whose
    platform is unknown/unknown, left out), None for a single image manifest."""
    top = manifest(image, run)
    if not is_index(top, image.ref):
        return None
    children: dict[str, ImageRef] = {}
    for entry in top.get("manifests") or []:
        found = entry.get("platform") or {}
        if found.get("os") == "unknown":
            continue
        name = f"{found.get('os')}/{found.get('architecture')}"
        if name in children:
            raise RegistryError(f"{image.ref} lists {name} twice; assemble its index again (`mcore-images index`)")
        children[name] = image.with_digest(entry["digest"])
    return children


def image_platform(image: ImageRef, run: Runner = tools.run) -> str:
    """The os/architecture of a single image manifest, from its config."""
    body = manifest(image, run)
    if is_index(body, image.ref):
        raise ConfusedManifest(f"{image.ref} is an index, not an image: name one platform's digest")
    config = json.loads(oras(image, "blob fetch", "--output", "-", f"{image.repository}@{body['config']['digest']}",
                             what=f"fetching the config of {image.ref}", run=run).stdout)
    return f"{config.get('os') or 'linux'}/{config.get('architecture') or 'amd64'}"


def tags(repository: ImageRef, run: Runner = tools.run) -> list[str]:
    """Every tag of the repository, as the registry lists them."""
    out = oras(repository, "repo tags", repository.repository, what=f"listing the tags of {repository.repository}",
               run=run).stdout
    return sorted(line.strip() for line in out.splitlines() if line.strip())


@dataclass(frozen=True)
class Referrer:
    digest: str
    annotations: dict[str, str]


def certificates(image: ImageRef, run: Runner = tools.run) -> list[Referrer]:
    """The certificate artifacts attached to the image's digest, in the registry's order. Neither that order nor
    the index's annotations are signed, so nothing is ordered by them here: verify orders by signed content."""
    out = oras(image, "discover", "--format", "json", "--artifact-type", schemas.CERTIFICATE_ARTIFACT, image.ref,
               what=f"listing the certificates attached to {image.ref}", run=run).stdout
    found = [Referrer(m["digest"], dict(m.get("annotations") or {})) for m in json.loads(out).get("manifests") or []]
    return found


def referrers_mode(image: ImageRef, run: Runner = tools.run) -> str:
    """How this registry keeps referrers: 'referrers API', or 'tag schema' (a sha256-<digest> index tag)
    where it has no referrers API (distribution 2.8)."""
    probe = oras(image, "discover", "--distribution-spec", "v1.1-referrers-api", image.ref, what="", run=run,
                 check=False)
    return "referrers API" if probe.returncode == 0 else "tag schema"


def fetch_certificate(image: ImageRef, referrer: Referrer, run: Runner = tools.run) -> dict[str, Any]:
    """certificate.json of an attached certificate artifact: its one blob, fetched alone and hashed here (a
    blob that does not hash to its digest is an IntegrityError, however the tool words it)."""
    artifact = manifest(image.with_digest(referrer.digest), run)
    layer = next((layer for layer in artifact.get("layers") or []
                  if (layer.get("annotations") or {}).get("org.opencontainers.image.title") == "certificate.json"),
                 None)
    if layer is None or not str(layer.get("digest", "")).startswith("sha256:"):
        raise RegistryError(f"certificate artifact {referrer.digest} holds no certificate.json")
    with tempfile.TemporaryDirectory(prefix="mcore-images-cert-") as tmp:
        path = Path(tmp) / "certificate.json"
        oras(image, "blob fetch", "--output", str(path), f"{image.repository}@{layer['digest']}",
             what=f"pulling certificate {referrer.digest}", run=run)
        try:
            data = reading.read_bytes(path, f"certificate {referrer.digest}", "a certificate is well under 1 MiB; "
                                      "the registry serves something else") if path.exists() else b""
        except InputError as exc:
            raise RegistryError(str(exc)) from None
    if "sha256:" + hashlib.sha256(data).hexdigest() != layer["digest"]:
        raise IntegrityError(f"pulling certificate {referrer.digest}: the registry served content that does not "
                             f"match its digest {layer['digest']}: its storage was altered or is corrupt; do not use "
                             "this image until the registry is repaired and the image pushed again")
    try:
        loaded = json.loads(data)
    except ValueError:
        return {"schema": None, "error": "certificate.json is not JSON"}
    return loaded if isinstance(loaded, dict) else {"schema": None, "error": "certificate.json is not a JSON object"}


def signature_problem(image: ImageRef, referrer: Referrer, key: str, run: Runner = tools.run) -> str | None:
    """Why the certificate artifact's signature does not verify with ``key`` for this image (None: it does).
    cosign checks the signature over the artifact's digest and that it names the image's digest."""
    proc = _run(["cosign", "verify", "--key", key, "--insecure-ignore-tlog", "--output", "json",
                 "-a", f"{IMAGE_DIGEST_ANNOTATION}={image.digest}", f"{image.repository}@{referrer.digest}"],
                "cosign verify", run, check=False)
    # cosign's exit codes: 0 verified, 10 no signature, 12 signatures none of which matches (key or payload)
    text = [line for line in (proc.stderr or proc.stdout).strip().splitlines() if line.startswith("Error:")]
    if proc.returncode == 0:
        return None
    if proc.returncode == 10:
        return "it is not signed"
    if proc.returncode == 12:
        if "annotation" in " ".join(text):
            return "its signature was made for another image digest"
        return f"its signature does not verify with the key {key}"
    raise RegistryError(f"cosign verify of {referrer.digest} could not run ({text[-1] if text else proc.returncode}); "
                        "check the key file and the registry")


# ---------------------------------------------------------------------------------------------
# Writing: referrers and signatures on a digest, and tags (promote.py alone moves tags).


def attach(image: ImageRef, certificate: Path, run: Runner = tools.run) -> Referrer:
    """Attach certificate.json (and .md) to the image's digest as an OCI referrer."""
    cert = reading.read_json(certificate, "the certificate", "use the certificate.json `mcore-images certify` wrote")
    files = [f"{certificate.name}:application/json"]
    if certificate.with_suffix(".md").is_file():
        files.append(f"{certificate.with_suffix('.md').name}:text/markdown")
    annotations = {"io.mcore-images.certificate.status": str((cert.get("certify") or {}).get("status")),
                   "org.opencontainers.image.created": str(cert.get("created")),
                   IMAGE_DIGEST_ANNOTATION: str(image.digest)}
    args = [a for k, v in annotations.items() for a in ("--annotation", f"{k}={v}")]
    out = oras(image, "attach", "--artifact-type", schemas.CERTIFICATE_ARTIFACT, *args, image.ref, *files,
               what=f"attaching {certificate} to {image.ref}", run=run, cwd=certificate.resolve().parent).stdout
    found = _DIGEST_LINE.search(out)
    if not found:
        raise RegistryError(f"oras attach printed no artifact digest: update oras (1.2 or newer): {out.strip()}")
    return Referrer(found.group(1), annotations)


def sign(image: ImageRef, referrer: Referrer, key: str, run: Runner = tools.run) -> None:
    """Sign the certificate artifact with ``key`` (a cosign key file, or a KMS URI such as awskms://…),
    the image's digest written into the signed payload. No transparency log: the key is the trust."""
    _run(["cosign", "sign", "--key", key, "--tlog-upload=false", "--yes",
          "-a", f"{IMAGE_DIGEST_ANNOTATION}={image.digest}", f"{image.repository}@{referrer.digest}"],
         f"signing certificate {referrer.digest}", run, env={"COSIGN_PASSWORD": os.environ.get("COSIGN_PASSWORD", "")})


def sign_image(image: ImageRef, referrer: Referrer, key: str, run: Runner = tools.run,
               claims: Mapping[str, str] | None = None) -> None:
    """Sign the image's digest itself, naming the passing certificate it rests on and ``claims`` (its stack, layer,
    alias and content tag: ``binding_claims``): what stock `cosign verify --key cosign.pub -a …=… REPO:TAG` checks,
    so that stock cosign alone binds a tag to the stack and layer it names. `mcore-images verify` judges more
    (every signed certificate on the digest, its age, the labels, the release ledger)."""
    extra = [a for k, v in (claims or {}).items() for a in ("-a", f"{k}={v}")]
    _run(["cosign", "sign", "--key", key, "--tlog-upload=false", "--yes",
          "-a", f"{CERTIFICATE_ANNOTATION}={referrer.digest}", "-a", "io.mcore-images.certificate.status=passed",
          *extra, image.ref], f"signing image {image.digest}", run,
         env={"COSIGN_PASSWORD": os.environ.get("COSIGN_PASSWORD", "")})


def retag(image: ImageRef, new_tags: Sequence[str], run: Runner = tools.run) -> None:
    """Point tags of the image's repository at its digest (oras tag: the manifest is not copied)."""
    oras(image, "tag", image.ref, *new_tags, what=f"tagging {image.ref}", run=run)
