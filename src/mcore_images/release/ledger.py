"""The release ledger: what a repository's tags must point to, and which certificates each digest carries, as a
signed, numbered record that only the holder of the signing key can write.

Tags and referrers are what anyone with push rights can change: move a tag back to an older certified digest,
delete the referrer of a failed certificate so that an older pass is judged, move an alias away first so that a
rollback guard compares against nothing. The ledger is where order lives instead (The Update Framework's
snapshot-and-timestamp idea, kept to one signed document):

- ``attach`` records each certificate it signs (digest, certificate, status, created); ``promote --execute``
  records the digest each tag it moves now names. Each write is version N+1, names version N's digest, expires
  LIFETIME_DAYS later, is pushed as an OCI artifact under its own tag (``mcore-images-ledger-N``), signed with
  cosign (the signature names the repository and the version), and only then tagged ``mcore-images-ledger``.
- ``verify`` reads it, checks the signature, refuses one that expired (a frozen view), and remembers the
  newest version it has seen for the repository on this machine, refusing one older than that (a rolled-back
  ledger) or none at all after one was seen (a deleted ledger). A tag must point where the ledger says; every
  certificate the ledger records for a digest must still be attached to it.

What this cannot stop is said in docs/release.md: a client's first contact trusts what it finds (a writer who
deletes the ledger before anyone has read it, and moves tags, is caught only by clients that saw it before);
within LIFETIME_DAYS a writer can hold a client on the last signed version (the freeze the expiry bounds); two
writers racing each write their own version N+1 (the later tag wins, the other's records are lost).
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mcore_images.catalogue import images
from mcore_images.catalogue.images import ImageRef
from mcore_images.command import Command, print_json
from mcore_images.errors import InputError
from mcore_images.release import registry
from mcore_images.release.registry import RegistryError, Runner

TAG = "mcore-images-ledger"
"""The tag that names the current ledger of a repository."""
ARTIFACT_TYPE = "application/vnd.mcore-images.ledger.v1+json"
FILE = "ledger.json"
VERSION_ANNOTATION = "io.mcore-images.ledger-version"
REPOSITORY_ANNOTATION = "io.mcore-images.ledger-repository"
LIFETIME_DAYS = 7.0
"""How long a ledger is valid after it is written: the longest a registry writer can hold a client on it."""
STATE_ENV = "MCORE_IMAGES_STATE"
"""Where this machine keeps the newest ledger version it has seen per repository (default: the XDG state home)."""


class LedgerRefused(RegistryError):
    """The ledger, or what the registry holds against it, shows a change nobody with the key made: exit 1."""

    exit_code = 1


@dataclass
class Ledger:
    repository: str
    version: int = 0
    issued: str = ""
    expires: str = ""
    previous: str | None = None
    tags: dict[str, dict[str, Any]] = field(default_factory=dict)
    """tag → {"digest", "version"}: where each promoted tag points, and in which version that was recorded."""
    certificates: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """image digest → [{"certificate", "status", "created", "version"}]: every certificate attached and signed."""

    def expired(self, now: dt.datetime) -> bool:
        return bool(self.expires) and now > dt.datetime.fromisoformat(self.expires)


def _repository_ref(repository: str) -> ImageRef:

    return images.parse(f"{repository}:{TAG}")


def read(repository: str, key: str, run: Runner | None = None) -> tuple[Ledger, str] | None:
    """The repository's current ledger and its digest, its signature checked with ``key`` (a public key); None
    when the repository has none. LedgerRefused when one is there but not signed by the key for its version."""
    kwargs = {"run": run} if run else {}
    ref = _repository_ref(repository)
    probe = registry.oras(ref, "resolve", ref.ref, what="", check=False, **kwargs)
    if probe.returncode != 0:
        if "not found" in (probe.stderr or "").lower() or "not found" in (probe.stdout or "").lower():
            return None
        at = registry.resolve(ref, **kwargs)  # the registry's own one-line error, or its answer on a second try
    else:
        at = ref.with_digest(probe.stdout.strip())
    digest = at.digest or ""
    body = registry.manifest(at, **kwargs)
    layer = next((entry for entry in body.get("layers") or []
                  if (entry.get("annotations") or {}).get("org.opencontainers.image.title") == FILE), None)
    if body.get("artifactType") != ARTIFACT_TYPE or layer is None:
        raise LedgerRefused(f"{ref.ref} is not a release ledger (artifact type {body.get('artifactType')}): a tag "
                            "only the release process writes was moved; push the ledger again with the key")
    with tempfile.TemporaryDirectory(prefix="mcore-images-ledger-") as tmp:
        path = Path(tmp) / FILE
        registry.oras(ref, "blob fetch", "--output", str(path), f"{repository}@{layer['digest']}",
                      what=f"pulling the release ledger of {repository}", **kwargs)
        raw = path.read_bytes()
    if "sha256:" + hashlib.sha256(raw).hexdigest() != layer["digest"]:
        raise registry.IntegrityError(f"the release ledger of {repository} does not hash to its digest")
    try:
        data = json.loads(raw)
        found = Ledger(**{k: data[k] for k in Ledger.__dataclass_fields__ if k in data})
    except (ValueError, TypeError) as exc:
        raise LedgerRefused(f"the release ledger of {repository} cannot be read ({exc})") from None
    if found.repository != repository:
        raise LedgerRefused(f"the release ledger under {ref.ref} is {found.repository}'s, not this repository's: "
                            "copied from elsewhere")
    claims = ["-a", f"{VERSION_ANNOTATION}={found.version}", "-a", f"{REPOSITORY_ANNOTATION}={repository}"]
    signed = registry._run(["cosign", "verify", "--key", key, "--insecure-ignore-tlog", "--output", "json", *claims,
                            at.ref], "cosign verify", check=False, **kwargs)
    if signed.returncode != 0:
        raise LedgerRefused(f"the release ledger of {repository} (version {found.version}, {digest}) is not signed "
                            f"with {key} for that version: written by someone without the key")
    return found, digest


def write(ledger: Ledger, key: str, previous: str | None, run: Runner | None = None,
          now: dt.datetime | None = None) -> str:
    """Push ``ledger`` as the next version, signed with ``key`` (a private key), and point TAG at it; returns its
    digest. The version and its tag are pushed and signed before TAG moves, so TAG never names an unsigned one."""
    kwargs = {"run": run} if run else {}
    now = now or dt.datetime.now(dt.timezone.utc)
    ledger.version += 1
    ledger.previous = previous
    ledger.issued = now.isoformat(timespec="seconds")
    ledger.expires = (now + dt.timedelta(days=LIFETIME_DAYS)).isoformat(timespec="seconds")
    ref = _repository_ref(ledger.repository)
    versioned = ref.with_tag(f"{TAG}-{ledger.version}")
    with tempfile.TemporaryDirectory(prefix="mcore-images-ledger-") as tmp:
        (Path(tmp) / FILE).write_text(json.dumps(asdict(ledger), indent=2, sort_keys=True) + "\n")
        out = registry.oras(versioned, "push", "--artifact-type", ARTIFACT_TYPE, versioned.ref,
                            f"{FILE}:application/json", what=f"pushing the release ledger of {ledger.repository}",
                            cwd=Path(tmp), **kwargs).stdout
    digest = next((line.split()[-1] for line in out.splitlines() if line.startswith("Digest:")), None)
    if digest is None:
        raise RegistryError(f"oras push printed no digest for the release ledger: update oras: {out.strip()}")
    at = ref.with_digest(digest)
    registry._run(["cosign", "sign", "--key", key, "--tlog-upload=false", "--yes",
                   "-a", f"{VERSION_ANNOTATION}={ledger.version}", "-a", f"{REPOSITORY_ANNOTATION}={ledger.repository}",
                   at.ref], f"signing the release ledger of {ledger.repository}",
                  env={"COSIGN_PASSWORD": os.environ.get("COSIGN_PASSWORD", "")}, **kwargs)
    registry.retag(at, [TAG], **kwargs)
    return digest


def update(repository: str, key: str, change: Any, run: Runner | None = None) -> Ledger:
    """Read the current ledger (verified with the public half of ``key``, which `cosign public-key` derives from a
    key file, an env:// key or a KMS key alike), apply ``change(ledger)`` and write the next version signed with
    ``key``; a repository without one starts at version 1."""
    kwargs = {"run": run} if run else {}
    with tempfile.TemporaryDirectory(prefix="mcore-images-key-") as tmp:
        public = Path(tmp) / "cosign.pub"
        registry._run(["cosign", "public-key", "--key", key, "--outfile", str(public)],
                      "deriving the public key of the signing key",
                      env={"COSIGN_PASSWORD": os.environ.get("COSIGN_PASSWORD", "")}, **kwargs)
        current = read(repository, str(public), run)
    ledger, previous = (current if current is not None else (Ledger(repository), None))
    change(ledger)
    write(ledger, key, previous, run)
    remember(repository, ledger.version)
    return ledger


# ---------------------------------------------------------------------------------------------
# What this machine has seen


def state_dir() -> Path:
    base = os.environ.get(STATE_ENV) or os.path.join(
        os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state"), "mcore-images")
    return Path(base) / "ledgers"


def _state_file(repository: str) -> Path:
    return state_dir() / f"{hashlib.sha256(repository.encode()).hexdigest()[:24]}.json"


def seen(repository: str) -> int | None:
    """The newest ledger version this machine has accepted for the repository."""
    try:
        return int(json.loads(_state_file(repository).read_text())["version"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def remember(repository: str, version: int) -> None:
    path = _state_file(repository)
    path.parent.mkdir(parents=True, exist_ok=True)
    if (seen(repository) or 0) < version:
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps({"repository": repository, "version": version}) + "\n")
        temporary.replace(path)


def accepted(repository: str, key: str, now: dt.datetime, run: Runner | None = None) -> Ledger | None:
    """The repository's ledger as verify may rely on it (signed, not expired, not older than what this machine
    saw, present when it was seen before), remembered; None where there is none and none was ever seen."""
    found = read(repository, key, run)
    before = seen(repository)
    if found is None:
        if before is not None:
            raise LedgerRefused(f"{repository} has no release ledger, but this machine saw its version {before}: "
                                "deleted by someone without the key; do not trust its tags until it is restored")
        return None
    ledger, _ = found
    if before is not None and ledger.version < before:
        raise LedgerRefused(f"the release ledger of {repository} is version {ledger.version}, older than version "
                            f"{before} this machine saw: rolled back by someone without the key")
    if ledger.expired(now):
        raise LedgerRefused(f"the release ledger of {repository} (version {ledger.version}) expired at "
                            f"{ledger.expires}: the release process re-signs it (`mcore-images ledger refresh`), or "
                            "a registry writer is holding this machine on an old view")
    remember(repository, ledger.version)
    return ledger


def tag_problem(ledger: Ledger, tag: str, digest: str) -> str | None:
    """Why ``tag`` may not point at ``digest`` by the ledger (None when the ledger records it there, or does not
    record the tag)."""
    entry = ledger.tags.get(tag)
    if entry is None or entry.get("digest") == digest:
        return None
    back = _newest_created(ledger, digest) < _newest_created(ledger, str(entry.get("digest")))
    return (f"tag {tag} points at {digest}, but the signed release ledger (version {ledger.version}) records "
            f"{entry['digest']} for it since version {entry.get('version')}: moved by someone without the key"
            + (" (back to an older release)" if back else ""))


def _newest_created(ledger: Ledger, digest: str) -> str:
    return max((str(r.get("created") or "") for r in ledger.certificates.get(digest, [])), default="")


def missing_certificates(ledger: Ledger, digest: str, attached: set[str]) -> list[str]:
    """The certificates the ledger records for ``digest`` that are no longer attached to it."""
    return [f"certificate {record['certificate']} ({record.get('status')}, created {record.get('created')}), "
            f"recorded in the signed release ledger (version {record.get('version')}), is no longer attached: removed "
            "by someone without the key"
            for record in ledger.certificates.get(digest, []) if record.get("certificate") not in attached]


def recorded_tags(changes: Mapping[str, str]) -> Any:
    """A ``change`` for ``update``: the tags → digest a promotion moved."""
    def change(ledger: Ledger) -> None:
        for tag, digest in changes.items():
            ledger.tags[tag] = {"digest": digest, "version": ledger.version + 1}
    return change


def recorded_certificate(digest: str, certificate: str, status: str, created: str) -> Any:
    """A ``change`` for ``update``: a certificate attached to ``digest`` and signed."""
    def change(ledger: Ledger) -> None:
        records = ledger.certificates.setdefault(digest, [])
        if not any(r.get("certificate") == certificate for r in records):
            records.append({"certificate": certificate, "status": status, "created": created,
                            "version": ledger.version + 1})
    return change


# ---------------------------------------------------------------------------------------------
# `mcore-images ledger`


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("repository", help="the repository whose release ledger to read, e.g. ghcr.io/acme/mcore-images")
    p.add_argument("--key", required=True, help="the cosign public key (file or KMS URI) the ledger is signed with")
    p.add_argument("--refresh", metavar="SIGN_KEY", help="write the ledger again as its next version, unchanged but "
                   f"for a new expiry ({LIFETIME_DAYS:g} days), signed with this private key: what the release "
                   "process runs before the ledger expires")


def _run(args: argparse.Namespace) -> int:

    try:
        parsed = images.parse(f"{args.repository}:{TAG}")
    except ValueError as exc:
        raise InputError(f"{exc}; give a repository such as ghcr.io/acme/mcore-images") from None
    if parsed.repository != args.repository:
        raise InputError(f"{args.repository!r} is not a repository: give it without a tag or digest")
    for option, key, signing in (("--key", args.key, False), ("--refresh", args.refresh, True)):
        if key and (problem := registry.key_problem(key, option, signing)):
            raise InputError(problem)
    now = dt.datetime.now(dt.timezone.utc)
    if args.refresh:
        current = read(args.repository, args.key)
        if current is None:
            raise InputError(f"{args.repository} has no release ledger to refresh: `attach` and `promote --execute` "
                             "write it")
        found = update(args.repository, args.refresh, lambda ledger: None)
    else:
        found = accepted(args.repository, args.key, now)
        if found is None:
            raise InputError(f"{args.repository} has no release ledger yet: `attach` and `promote --execute` write it")
    if args.json:
        print_json(asdict(found))
    else:
        print(f"release ledger of {found.repository}: version {found.version}, signed, issued {found.issued}, expires "
              f"{found.expires}")
        for tag, entry in sorted(found.tags.items()):
            print(f"  {tag} → {entry['digest']} (since version {entry['version']})")
        for digest, records in sorted(found.certificates.items()):
            print(f"  {digest}: " + ", ".join(f"{r['certificate'][:19]}… {r['status']} ({r['created']})"
                                              for r in records))
    return 0


COMMANDS = (Command("ledger", "show a repository's signed release ledger (where its tags must point, which "
                    "certificates each digest carries), or refresh its expiry", _arguments, _run, prints_data=True,
                    description="Reads the release ledger `attach` and `promote --execute` write (docs/release.md), "
                    "checks its signature and that it is neither older than the version this machine saw nor "
                    "expired."),)
