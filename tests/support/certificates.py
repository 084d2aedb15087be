"""Certificates made by the real writers (smoke.certificate, certify.bind) and image labels as docker-bake.hcl
sets them: what the policy, verify and promote tests judge."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from smoke import certificate as smoke_certificate

from mcore_images import certify, components
from mcore_images.images import label
from mcore_images.stacks import Stack

REGISTRY_DIGEST = "RepoDigests: the registry manifest digest (pull by it to get this image)"


def packages_of(stack: Stack) -> dict[str, str | None]:
    """What the smoke records for an image of this stack (every catalogue component with a certificate key;
    a local build tag where the base provides torch, as NGC's has; a version for a commit-pinned apex)."""

    def recorded(comp: components.Component) -> str | None:
        pin = stack.pins[comp.key]
        if pin == "none":
            return None
        if comp.key == "python":
            return f"{pin}.4"
        if comp.key == "torch" and stack.torch_source == "base":
            return f"{pin}+8145d630e8"
        return "0.1" if comp.pin == "commit" else pin

    return {c.certificate: recorded(c) for c in components.CATALOGUE if c.certificate}


def labels_of(stack: Stack, layer: str) -> dict[str, str]:
    """The io.mcore-images.* labels docker-bake.hcl's layer_labels gives a layer of the stack."""
    labels = {label("layer"): layer, label("stack"): stack.name, label("flavor"): stack.flavor}
    return labels | {c.oci_label: stack.pins[c.key] for c in components.labelled_in(layer)}


def write_certificate(out: Path, stack: Stack, *, repository: str, digest: str, created: dt.datetime,
                      smoke_status: str = "passed", tests: dict[str, Any] | None = None,
                      digest_source: str = REGISTRY_DIGEST, gpus: int = 8,
                      packages: dict[str, str | None] | None = None) -> Path:
    """A certificate as the smoke writes it, bound to ``repository@digest`` by certify.bind."""
    cert = smoke_certificate.new(["python", "-m", "smoke", "--out", "/cert"], created.isoformat(timespec="seconds"))
    code = {"passed": 0, "failed": 1}[smoke_status]
    cert.update(status=smoke_status, exit_code=code, error=None if code == 0 else "rank 0 failed in tp2: loss rose")
    gpu = ({"model": "NVIDIA H100 80GB HBM3", "count": gpus, "driver": "580.65.06"} if gpus
           else {"model": "CPU (gloo)", "count": 0, "driver": None})
    cert["environment"] = {"packages": packages or packages_of(stack), "cuda": stack.cuda, "nccl": "2.27.7",
                           "cudnn": "91900", "gpu": gpu}
    assert smoke_certificate.validate(cert) == []
    smoke_certificate.write(cert, out)
    image = certify.ImageDigest(f"{repository}@{digest}", digest, digest_source, f"{repository}@{digest}")
    certify.bind(out, image, tests or {"command": ["pytest"], "exit_code": 0, "passed": True,
                                       "summary": "41 passed in 63.0s"}, code)
    return out / "certificate.json"
