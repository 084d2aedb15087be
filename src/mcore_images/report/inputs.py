"""What a report is made of: the stacks (env/stacks.json), the certificates it is given (found in folders
or named as files), and build timings. A certificate that cannot be read, is not ours or does not match
data/certificate.schema.json is kept, with the reason, so the index can show it as such; a build-timing
file that is not one is a bad input (InputError)."""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcore_images import jsonfiles, reading, schemas
from mcore_images.catalogue import components, images, platforms
from mcore_images.catalogue.stacks import Stack
from mcore_images.catalogue.versions import pin_satisfied
from mcore_images.errors import InputError
from mcore_images.release import policy
from mcore_images.schemas import BUILD_TIMINGS_SCHEMA

CERTIFICATE_NAME = "certificate.json"
STALE_POLICY = "release"
"""Whose max_age_days makes a certificate stale (the packaged release policies)."""


@dataclass
class Certificate:
    """One certificate file, read or not; ``problem`` says why it cannot be used."""

    path: Path
    data: dict[str, Any] | None = None
    problem: str | None = None
    stack: str | None = None
    layer: str | None = None
    matched_by: str | None = None
    stale: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        """passed / failed / could-not-run / stale / invalid, as the index shows it."""
        if self.problem or self.data is None:
            return "invalid"
        verdict = (self.data.get("certify") or {}).get("status") or self.data.get("status", "?")
        return "stale" if verdict == "passed" and self.stale else verdict

    @property
    def slug(self) -> str:
        """The page's file name (without .html): stack, layer and digest as plain characters, never a path."""
        digest = str(((self.data or {}).get("image") or {}).get("digest") or "")
        tail = re.sub(r"[^0-9a-f]", "", digest.removeprefix("sha256:"))[:12] or "nodigest"
        where = hashlib.sha256(str(self.path).encode()).hexdigest()[:6]
        return f"cert-{self.stack or 'other'}-{self.layer or 'image'}-{tail}-{where}"

    @property
    def gpu(self) -> str:
        gpu = ((self.data or {}).get("environment") or {}).get("gpu") or {}
        count = gpu.get("count") or 0
        return f"{count} × {gpu.get('model')}" if count else "CPU (gloo)"

    @property
    def created(self) -> dt.datetime | None:
        return policy.created(self.data) if self.data else None

    @property
    def platform(self) -> str:
        """The platform it certified: what the smoke read inside the image, else what docker said of the image, else
        the default platform (certificates from before platforms were recorded)."""
        data = self.data or {}
        inside = (data.get("environment") or {}).get("platform")
        named = inside.get("platform") if isinstance(inside, dict) else None
        outside = (data.get("image") or {}).get("platform")
        for name in (named, outside):
            if isinstance(name, str) and name in platforms.BY_NAME:
                return name
        return platforms.DEFAULT.name


def find(paths: list[Path]) -> list[Path]:
    """Certificate files under the given folders (recursively) and the files named, in a stable order."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found += sorted(path.rglob(CERTIFICATE_NAME))
        elif path.exists():
            found.append(path)
    return list(dict.fromkeys(found))


def read(path: Path) -> Certificate:
    """A certificate, or one whose ``problem`` names why it is not usable (never raises)."""
    if problem := reading.file_problem(path):
        return Certificate(path, problem="no such file" if problem.endswith(" not found") else
                           problem.removeprefix(f"{path} "))
    try:
        data = json.loads(reading.read_text(path, "", "give a certificate file"))
    except InputError as exc:
        return Certificate(path, problem=str(exc).removeprefix(f"{path} ").split(";")[0])
    except ValueError as exc:
        return Certificate(path, problem=f"not JSON: {str(exc).splitlines()[0][:160]}")
    if not isinstance(data, dict):
        return Certificate(path, problem="not a JSON object")
    if data.get("schema") != schemas.CERTIFICATE:
        return Certificate(path, problem=f"foreign: schema {repr(data.get('schema'))[:80]}, not "
                                         f"{schemas.CERTIFICATE!r}")
    problems = policy.shape_problems(data)
    if problems:
        return Certificate(path, data=None, problem="malformed: " + "; ".join(problems[:3]))
    return Certificate(path, data=data)


def file_under(cert: Certificate, stacks: dict[str, Stack]) -> None:
    """Which stack and layer the certificate is for: the image's labels (certify records them), else the
    stack whose pins the measured package versions satisfy."""
    data = cert.data or {}
    labels = (data.get("image") or {}).get("labels") or {}
    named = stacks.get(labels.get(images.label("stack"), ""))
    if named and labels.get(images.label("layer"), "runtime") in named.built_layers:
        cert.stack, cert.layer = named.name, labels.get(images.label("layer"), "runtime")
        cert.matched_by = "image labels"
    else:
        measured = (data.get("environment") or {}).get("packages") or {}
        for stack in stacks.values():
            if measured and not pin_mismatches(measured, stack):
                cert.stack, cert.layer, cert.matched_by = stack.name, "runtime", "package versions"
                break
    if cert.stack:
        cert.stale = stale_reasons(cert, stacks[cert.stack])


def pin_mismatches(measured: dict[str, Any], stack: Stack) -> list[str]:
    """The recorded packages the stack's pins no longer hold, judged as promotion judges labels
    (versions.pin_satisfied); a package the certificate did not record is not judged."""
    out = []
    for comp in components.CATALOGUE:
        if comp.certificate and comp.certificate in measured:
            have, pin = measured[comp.certificate], stack.pins[comp.key]
            if not pin_satisfied(comp.pin, pin, None if have is None else str(have)):
                out.append(f"{comp.certificate} {have or 'absent'} measured, env/stacks.json pins {pin}")
    return out


@functools.cache
def _max_age_days() -> float:
    return policy.load_policy(STALE_POLICY).max_age_days


def stale_reasons(cert: Certificate, stack: Stack) -> list[str]:
    """Why a certificate no longer speaks for the stack: pins moved since, or it is older than the release
    policy allows."""
    reasons = pin_mismatches(((cert.data or {}).get("environment") or {}).get("packages") or {}, stack)
    created, max_age = cert.created, _max_age_days()
    if created is not None and dt.datetime.now(dt.UTC) - created > dt.timedelta(days=max_age):
        reasons.append(f"older than the {STALE_POLICY} policy's {max_age:g} days")
    return reasons


def read_timings(paths: list[Path]) -> list[dict[str, Any]]:
    """Build-timing runs (`mcore-images build-timing --out`), each file checked against
    data/build-timings.schema.json; InputError (one line) for a file that is not one."""
    fix = "give a file `mcore-images build-timing --out` wrote"
    runs: list[dict[str, Any]] = []
    for path in paths:
        data = jsonfiles.load(path, "--build-timings", fix, BUILD_TIMINGS_SCHEMA, finite=True)
        runs += data["runs"]
    return runs
