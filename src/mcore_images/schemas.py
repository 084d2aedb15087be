"""The JSON documents the project writes: their identifiers and the schemas they are read against, in one place.

Standard library only: the smoke suite (which writes certificates, bench results and bridge reports inside images)
imports it next to torch, and the host tooling reads the same names back. The schemas ship in the wheel's data/;
``phrase`` says one jsonschema error the way every reader says it (the validator itself is the reader's: the host's
jsonfiles, the smoke's certificate).
"""

from __future__ import annotations

from typing import Any

from mcore_images import PACKAGE
from mcore_images.errors import shown

CERTIFICATE = "mcore-images/smoke-certificate/v1"
BENCH = "mcore-images/bench/v1"
BENCH_BASELINES = "mcore-images/bench-baselines/v1"
BRIDGE = "mcore-images/bridge-check/v1"
VERL_STEP = "mcore-images/verl-step/v1"
CERTIFICATE_ARTIFACT = "application/vnd.mcore-images.certificate.v1+json"
"""The OCI artifact type of a certificate attached to an image digest as a referrer."""

IMAGE_ENVIRONMENT = "image environment"
"""A certificate's environment.source.kind for a run in an image's own settings and pinned versions; the other
kind, MACHINE_TREE, is a checkout on a machine's own Python. Only the first certifies a digest on GPUs."""
MACHINE_TREE = "machine's tree"

PACKAGED = PACKAGE / "data"
CERTIFICATE_SCHEMA = PACKAGED / "certificate.schema.json"
"""Every field of a certificate with its shape: the smoke's document ($defs/smoke, its sections included) and the
same document bound by certify (the top level), which the report, verify, attach and promote read."""
BUILD_TIMINGS_SCHEMA = PACKAGED / "build-timings.schema.json"
"""What `mcore-images build-timing --out` writes, as the report reads it."""


def phrase(error: Any, name: str = "", where: list[Any] | None = None) -> str:
    """One jsonschema ValidationError as one phrase: where (``name``, then the field's path, ``where`` when given in
    its place), what, and what to write instead (the schema's description of that field)."""
    path = list(error.absolute_path) if where is None else where
    field = ".".join(str(p) for p in path)
    hint = error.schema.get("description") or (error.parent.schema.get("description") if error.parent else None)
    located = ", ".join(p for p in (name, f"field {field}" if field else "") if p)
    message = error.message
    if isinstance(error.instance, str) and repr(error.instance) in message:  # the user's text, escaped and cut
        message = message.replace(repr(error.instance), f"'{shown(error.instance)}'")
    message = message if len(message) <= 160 else message[:157] + "..."
    return f"{located + ': ' if located else ''}{message}" + (f"; write {hint}" if hint else "")
