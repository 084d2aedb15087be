"""The release ledger: what a repository's tags must point to, and which certificates each digest carries, as a
signed, numbered record that only the holder of the signing key can write.

Tags and referrers are what anyone with push rights can change: move a tag back to an older certified digest,
delete the referrer of a failed certificate (or only its signature) so that an older pass is judged, move an alias
away first so that a rollback guard compares against nothing. The ledger is where order lives instead (The Update
Framework's snapshot-and-timestamp idea, kept to one signed document):

- ``attach`` records each certificate it signs (digest, certificate, status, created); ``promote --execute``
  records the digest each tag it moves now names. Each write is version N+1, names version N's digest, expires
  LIFETIME_DAYS later, is pushed as an OCI artifact under its own tag (``mcore-images-ledger-N``), signed with
  cosign (the signature names the repository and the version), and only then tagged ``mcore-images-ledger``.
- A writer builds only on its own last write: the release authority keeps the version and digest it wrote
  (ledger_state.py, where it keeps its key) and refuses to extend any other head, such as an older signed version
  put back by a registry writer, which it would otherwise sign again as new. This home's writers take turns (a
  lock), and a write whose tag moved under it (another home's writer) fails instead of losing a record.
- ``verify`` reads it, checks the signature, refuses one that expired (a frozen view), and remembers the newest
  version it has seen for the repository on this machine, with its digest, refusing one older than that (a
  rolled-back ledger), another one under that number, one that does not descend from it (its ``previous`` chain,
  each link fetched by digest), or none at all after one was seen (a deleted ledger). A tag must point where the
  ledger says; every certificate the ledger records for a digest must still be attached to it and signed.

What this cannot stop is said in docs/release.md: a client's first contact trusts what it finds, and so does a
writer that adopts a ledger without a record of its own (``--adopt``); within LIFETIME_DAYS a writer can hold a
client on the last signed version (the freeze the expiry bounds).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mcore_images import reading
from mcore_images.catalogue import images
from mcore_images.catalogue.images import ImageRef
from mcore_images.errors import InputError
from mcore_images.release import ledger_state, registry
from mcore_images.release.ledger_state import Head
from mcore_images.release.registry import RegistryError, Runner

TAG = "mcore-images-ledger"
"""The tag that names the current ledger of a repository."""
ARTIFACT_TYPE = "application/vnd.mcore-images.ledger.v1+json"
FILE = "ledger.json"
VERSION_ANNOTATION = "io.mcore-images.ledger-version"
REPOSITORY_ANNOTATION = "io.mcore-images.ledger-repository"
LIFETIME_DAYS = 7.0
"""How long a ledger is valid after it is written: the longest a registry writer can hold a client on it."""


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


def head_digest(repository: str, run: Runner | None = None) -> str | None:
    """The digest the repository's ledger tag names now; None when there is none."""
    return tag_digest(repository, TAG, run)


VERSION_TAG = re.compile(rf"^{re.escape(TAG)}-([1-9][0-9]*)$")
"""The tag each version is pushed under (``mcore-images-ledger-N``), which nothing ever writes twice."""


def versions(repository: str, run: Runner | None = None) -> list[int]:
    """The version numbers the repository holds under their own tags, lowest first."""
    kwargs = {"run": run} if run else {}
    listed = registry.tags(_repository_ref(repository), **kwargs)
    return sorted(int(m[1]) for t in listed if (m := VERSION_TAG.match(t)))


def gone_problem(repository: str, held: list[int]) -> str:
    """What a repository whose ledger tag is gone while versions ``held`` remain says, with its two fixes."""
    newest = max(held)
    shown = ", ".join(map(str, held[-3:])) if len(held) <= 3 else f"1 … {newest}"
    return (f"{repository} has no {TAG} tag, but holds versions {shown} of its release ledger ({TAG}-N): the tag was "
            f"deleted by someone without the key; put the newest back (`oras tag {repository}:{TAG}-{newest} {TAG}`) "
            f"and adopt it (`mcore-images ledger {repository} --key <public key> --adopt`), or start a new ledger "
            f"above them (`mcore-images ledger {repository} --key <public key> --start-over <private key>`)")


def tag_digest(repository: str, tag: str, run: Runner | None = None) -> str | None:
    """The digest ``tag`` of the repository names now; None when there is no such tag."""
    kwargs = {"run": run} if run else {}
    ref = _repository_ref(repository).with_tag(tag)
    probe = registry.oras(ref, "resolve", ref.ref, what="", check=False, **kwargs)
    if probe.returncode != 0:
        if "not found" in (probe.stderr or "").lower() or "not found" in (probe.stdout or "").lower():
            return None
        return registry.resolve(ref, **kwargs).digest  # the registry's own one-line error, or its answer on a retry
    return probe.stdout.strip()


def fetch(repository: str, digest: str, run: Runner | None = None) -> Ledger:
    """The ledger pushed as ``digest``, its manifest and its one blob each hashed here: a version named by digest
    (a signed version's ``previous``, and so on back) is as authentic as the digest that names it."""
    kwargs = {"run": run} if run else {}
    ref = _repository_ref(repository)
    at = ref.with_digest(digest)
    with tempfile.TemporaryDirectory(prefix="mcore-images-ledger-") as tmp:
        document = Path(tmp) / "manifest.json"
        registry.oras(at, "manifest fetch", "--output", str(document), at.ref,
                      what=f"fetching the release ledger of {repository} ({digest})", **kwargs)
        raw = _bounded(document, f"the manifest of the release ledger of {repository}")
        if "sha256:" + hashlib.sha256(raw).hexdigest() != digest:
            raise registry.IntegrityError(f"the release ledger of {repository} ({digest}) does not hash to its digest")
        body = json.loads(raw)
        layer = next((entry for entry in body.get("layers") or []
                      if (entry.get("annotations") or {}).get("org.opencontainers.image.title") == FILE), None)
        if body.get("artifactType") != ARTIFACT_TYPE or layer is None:
            raise LedgerRefused(f"{ref.ref} is not a release ledger (artifact type {body.get('artifactType')}): a "
                                "tag only the release process writes was moved; push the ledger again with the key")
        path = Path(tmp) / FILE
        registry.oras(ref, "blob fetch", "--output", str(path), f"{repository}@{layer['digest']}",
                      what=f"pulling the release ledger of {repository}", **kwargs)
        raw = _bounded(path, f"the release ledger of {repository}")
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
    return found


def _bounded(path: Path, what: str) -> bytes:
    """A file oras fetched from the registry, read within reading's limit (a registry serves what it likes)."""
    try:
        return reading.read_bytes(path, what, "a release ledger is a few KiB; the registry serves something else")
    except InputError as exc:
        raise LedgerRefused(str(exc)) from None


def read(repository: str, key: str, run: Runner | None = None) -> tuple[Ledger, str] | None:
    """The repository's current ledger and its digest, its signature checked with ``key`` (a public key); None
    when the repository has none. LedgerRefused when one is there but not signed by the key for its version."""
    kwargs = {"run": run} if run else {}
    digest = head_digest(repository, run)
    if digest is None:
        return None
    found = fetch(repository, digest, run)
    claims = ["-a", f"{VERSION_ANNOTATION}={found.version}", "-a", f"{REPOSITORY_ANNOTATION}={repository}"]
    signed = registry._run(["cosign", "verify", "--key", key, "--insecure-ignore-tlog", "--output", "json", *claims,
                            _repository_ref(repository).with_digest(digest).ref], "cosign verify", check=False,
                           **kwargs)
    if signed.returncode != 0:
        raise LedgerRefused(f"the release ledger of {repository} (version {found.version}, {digest}) is not signed "
                            f"with {key} for that version: written by someone without the key")
    return found, digest


def write(ledger: Ledger, key: str, previous: str | None, run: Runner | None = None,
          now: dt.datetime | None = None) -> str:
    """Push ``ledger`` as the next version on top of ``previous`` (the digest the tag named when it was read),
    signed with ``key`` (a private key), and point TAG at it; returns its digest. The version and its tag are
    pushed and signed before TAG moves, so TAG never names an unsigned one; TAG is read before the push, before it
    moves and after, so a write that did not land on top of ``previous`` fails instead of losing a record."""
    kwargs = {"run": run} if run else {}
    now = now or dt.datetime.now(dt.UTC)
    ledger.version += 1
    ledger.previous = previous
    ledger.issued = now.isoformat(timespec="seconds")
    ledger.expires = (now + dt.timedelta(days=LIFETIME_DAYS)).isoformat(timespec="seconds")
    ref = _repository_ref(ledger.repository)
    versioned = ref.with_tag(f"{TAG}-{ledger.version}")
    _still_head(ledger, previous, run, pushed=False)
    if (taken := tag_digest(ledger.repository, versioned.tag or "", run)) is not None:
        raise LedgerRefused(f"{versioned.ref} already names {taken}: version {ledger.version} of the release ledger "
                            f"of {ledger.repository} was written before, and a version is never written twice; "
                            f"version {ledger.version} was not pushed; read the ledger (`mcore-images ledger "
                            f"{ledger.repository} --key <public key>`) and put its newest version back")
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
    _still_head(ledger, previous, run, pushed=True)
    registry.retag(at, [TAG], **kwargs)
    if (landed := head_digest(ledger.repository, run)) != digest:
        raise LedgerRefused(f"the release ledger of {ledger.repository} names {landed} right after this writer made "
                            f"version {ledger.version} ({digest}) current: another writer moved it at the same time; "
                            f"this version stays under {TAG}-{ledger.version}; read the ledger and write again")
    return digest


def _still_head(ledger: Ledger, previous: str | None, run: Runner | None, pushed: bool) -> None:
    """LedgerRefused when the ledger tag no longer names ``previous``, the version this write builds on."""
    if (now_at := head_digest(ledger.repository, run)) == previous:
        return
    kept = (f"version {ledger.version} stays under {TAG}-{ledger.version}, not current" if pushed
            else f"version {ledger.version} was not pushed")
    raise LedgerRefused(f"the release ledger of {ledger.repository} moved from {previous or 'nothing'} to "
                        f"{now_at or 'nothing'} while this writer made version {ledger.version} on top of it: another "
                        f"writer at the same time, or someone without the key; {kept}; write again")


# ---------------------------------------------------------------------------------------------
# A client: what this machine saw decides what it accepts


def seen_problem(repository: str, found: Head, before: Head) -> str | None:
    """Why the ledger ``found`` may not follow ``before``, the version this machine saw: older, or another one under
    the same number (None: the same, or newer; whether it descends from ``before`` is descent_problem's)."""
    if found.version < before.version:
        return (f"the release ledger of {repository} is version {found.version}, older than version {before.version} "
                "this machine saw: rolled back by someone without the key")
    if found.version == before.version and before.digest and found.digest != before.digest:
        return (f"the release ledger of {repository} is version {found.version} ({found.digest}), but the version "
                f"{before.version} this machine saw is {before.digest}: another ledger under the same number, built "
                "on an older one put back by someone without the key")
    return None


def descent_problem(repository: str, head: Ledger, digest: str, before: Head,
                    load: Callable[[str], Ledger]) -> str | None:
    """Why ``head`` (signed, pushed as ``digest``) does not descend from ``before``, the version this machine saw:
    its ``previous`` chain, each link loaded by digest with ``load``, must reach ``before.digest`` at
    ``before.version``. None when it does (or ``before`` is not older, or its digest unknown)."""
    if head.version <= before.version or not before.digest:
        return None
    at, at_digest = head, digest
    while True:
        wanted = at.version - 1
        link = at.previous
        if link is None:
            return (f"the release ledger of {repository} version {at.version} ({at_digest}) names no previous "
                    f"version, but this machine saw version {before.version} ({before.digest}): a new ledger in place "
                    "of the one this machine follows")
        if wanted == before.version:
            if link == before.digest:
                return None
            return (f"the release ledger of {repository} version {head.version} ({digest}) descends from version "
                    f"{wanted} {link}, not version {before.version} ({before.digest}) this machine saw: written on "
                    "top of an older ledger put back by someone without the key")
        try:
            at, at_digest = load(link), link
        except registry.IntegrityError:
            raise
        except RegistryError as exc:
            if "not found" not in str(exc).lower():
                raise
            return (f"the release ledger of {repository} version {head.version} ({digest}) names version {wanted} "
                    f"{link}, which the registry no longer holds: this machine cannot tell it descends from version "
                    f"{before.version} ({before.digest}) that it saw; put that version back")
        if at.version != wanted:
            return (f"the release ledger of {repository} names {link} as version {wanted}, but it is version "
                    f"{at.version}: its chain of versions is broken")


def checked(repository: str, key: str, run: Runner | None = None) -> tuple[Ledger, str] | None:
    """The repository's ledger and its digest, signed, and not older than what this machine saw, nor another one
    under its number, nor off its chain, nor gone after one was seen; None where there is none and none was seen."""
    found = read(repository, key, run)
    before = ledger_state.seen(repository)
    if found is None:
        if before is not None:
            raise LedgerRefused(f"{repository} has no release ledger, but this machine saw its version "
                                f"{before.version}: deleted by someone without the key; do not trust its tags until it "
                                "is restored")
        if held := versions(repository, run):  # a fresh client: the tag is gone, the versions are not
            raise LedgerRefused(gone_problem(repository, held))
        return None
    ledger, digest = found
    if before is not None and (problem := seen_problem(repository, Head(ledger.version, digest), before) or
                               descent_problem(repository, ledger, digest, before,
                                               lambda link: fetch(repository, link, run))):
        raise LedgerRefused(problem)
    return found


def accepted(repository: str, key: str, now: dt.datetime, run: Runner | None = None) -> Ledger | None:
    """The repository's ledger as verify may rely on it (checked against what this machine saw, and not expired),
    remembered; None where there is none and none was ever seen."""
    found = checked(repository, key, run)
    if found is None:
        return None
    ledger, digest = found
    if ledger.expired(now):
        raise LedgerRefused(f"the release ledger of {repository} (version {ledger.version}) expired at "
                            f"{ledger.expires}: the release process re-signs it (`mcore-images ledger {repository} "
                            "--key … --refresh KEY`), or a registry writer is holding this machine on an old view")
    ledger_state.remember(repository, Head(ledger.version, digest))
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



def unsigned_certificates(ledger: Ledger, digest: str, unsigned: Mapping[str, str], key: str) -> list[str]:
    """The certificates the ledger records for ``digest`` that are still attached but whose signature no longer
    verifies with ``key`` (``unsigned``: each such attached certificate → why): a deleted signature hides a
    verdict as well as a deleted referrer does."""
    return [f"certificate {record['certificate']} ({record.get('status')}, created {record.get('created')}), "
            f"recorded in the signed release ledger (version {record.get('version')}), is no longer signed with {key} "
            f"({unsigned[record['certificate']]}): its signature removed by someone without the key"
            for record in ledger.certificates.get(digest, []) if record.get("certificate") in unsigned]

def recorded_tags(changes: Mapping[str, str]) -> Any:
    """A ``change`` for the authority's ``commit``: the tags → digest a promotion moved."""
    def change(ledger: Ledger) -> None:
        for tag, digest in changes.items():
            ledger.tags[tag] = {"digest": digest, "version": ledger.version + 1}
    return change


def recorded_certificate(digest: str, certificate: str, status: str, created: str) -> Any:
    """A ``change`` for the authority's ``commit``: a certificate attached to ``digest`` and signed."""
    def change(ledger: Ledger) -> None:
        records = ledger.certificates.setdefault(digest, [])
        if not any(r.get("certificate") == certificate for r in records):
            records.append({"certificate": certificate, "status": status, "created": created,
                            "version": ledger.version + 1})
    return change
