"""Certificates made by the real writers (smoke.certificate, certify.bind) and image labels as docker-bake.hcl
sets them: what the policy, verify and promote tests judge."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from mcore_images import schemas
from mcore_images.catalogue import components, gpu_archs, platforms
from mcore_images.catalogue.images import label
from mcore_images.catalogue.stacks import Stack
from mcore_images.release import certify
from mcore_images.smoke import certificate as smoke_certificate

REGISTRY_DIGEST = "RepoDigests: the registry manifest digest (pull by it to get this image)"


def packages_of(stack: Stack) -> dict[str, str | None]:
    """What the smoke records for an image of this stack (every catalogue component with a certificate key;
    a local build tag where the base provides torch, as NGC's has; a version for a commit-pinned apex; the release
    torch loads for a base image's own cuDNN)."""

    def recorded(comp: components.Component) -> str | None:
        pin = stack.pins[comp.key]
        if pin == "none":
            return None
        if comp.key == "python":
            return f"{pin}.4"
        if comp.key == "torch" and stack.torch_source == "base":
            return f"{pin}+8145d630e8"
        if comp.key == "cudnn" and pin == "base":
            return components.cudnn_release(int(loaded_cudnn(stack)))
        return "0.1" if comp.pin == "commit" else pin

    return {c.certificate: recorded(c) for c in components.CATALOGUE if c.certificate}


def loaded_cudnn(stack: Stack) -> str:
    """What torch.backends.cudnn.version() reports in an image of the stack: its pinned cuDNN release (91002 for
    9.10.2.x), or a plausible one where the base image brings its own."""
    if stack.cudnn in ("base", "none"):
        return "92000"
    major, minor, patch = (int(p) for p in stack.cudnn.split(".")[:3])
    return str(major * 10000 + minor * 100 + patch)


def labels_of(stack: Stack, layer: str) -> dict[str, str]:
    """The io.mcore-images.* labels docker-bake.hcl's layer_labels gives a layer of the stack."""
    labels = {label("layer"): layer, label("stack"): stack.name, label("flavor"): stack.flavor}
    if layer != "base":
        labels |= {label(gpu_archs.LABEL): stack.cuda_archs,
                   label(gpu_archs.GPUS_LABEL): gpu_archs.serves(stack.cuda_archs)}
    return labels | {c.oci_label: stack.pins[c.key] for c in components.labelled_in(layer)}


def write_certificate(out: Path, stack: Stack, *, repository: str, digest: str, created: dt.datetime,
                      smoke_status: str = "passed", tests: dict[str, Any] | None = None,
                      digest_source: str = REGISTRY_DIGEST, gpus: int = 8,
                      packages: dict[str, str | None] | None = None,
                      source: str = schemas.IMAGE_ENVIRONMENT, cudnn: str | None = None,
                      platform: str | None = None) -> Path:
    """A certificate as the smoke writes it, bound to ``repository@digest`` by certify.bind (``platform``: the one
    the smoke read inside the image, ``linux/arm64``; None: a certificate from before platforms were recorded)."""
    cert = smoke_certificate.new(["python", "-m", "mcore_images.smoke", "--out", "/cert"],
                                 created.isoformat(timespec="seconds"))
    code = {"passed": 0, "failed": 1}[smoke_status]
    cert.update(status=smoke_status, exit_code=code, error=None if code == 0 else "rank 0 failed in tp2: loss rose")
    gpu = ({"model": "NVIDIA H100 80GB HBM3", "count": gpus, "driver": "580.65.06"} if gpus
           else {"model": "CPU (gloo)", "count": 0, "driver": None})
    cert["environment"] = {"packages": packages or packages_of(stack), "cuda": stack.cuda, "nccl": "2.27.7",
                           "cudnn": cudnn or loaded_cudnn(stack), "gpu": gpu,
                           "gpu_archs": {"declared": stack.cuda_archs, "gpus": gpu_archs.serves(stack.cuda_archs)},
                           "source": {"kind": source, "stack": stack.name,
                                      "constraints": "/opt/mcore-images/constraints.txt",
                                      "differences": [] if source == schemas.IMAGE_ENVIRONMENT
                                      else ["torch 2.11.0+cu130, the image pins 2.11.0"]}}
    if platform:
        machine = platforms.BY_NAME[platform].machine
        cert["environment"]["platform"] = {"os": "linux", "machine": machine, "platform": platform}
    assert smoke_certificate.validate(cert) == []
    smoke_certificate.write(cert, out)
    image = certify.ImageDigest(f"{repository}@{digest}", digest, digest_source, f"{repository}@{digest}")
    certify.bind(out, image, tests or {"command": ["pytest"], "exit_code": 0, "passed": True,
                                       "summary": "41 passed in 63.0s"}, code)
    return out / "certificate.json"


def add_sections(path: Path) -> dict[str, Any]:
    """Give a written certificate what a full run adds, shaped as the smoke's writers shape it: runs with
    losses and parity (smoke.judge), the wall-time parts (smoke.launcher), a checkpoint round trip
    (judge.round_trip), a gated bench row (smoke.bench.gate) and the bridge verdict; returns it, rewritten."""
    cert = json.loads(path.read_text())
    cert["image"]["labels"] = {label("stack"): "debian", label("layer"): "runtime"}
    cert["image"]["size"] = 3_530_000_000
    cert["settings"] = {"world_size": 2, "nodes": 1, "backend": "gloo", "dtype": "fp32", "steps": 3}
    run = {"layout": "dp2", "model": "dense", "spec": "local", "status": "passed", "reason": None, "checks": [],
           "grad_norms": [2.0, 1.5, 1.0], "timing": {"build_s": 0.1, "step_median_s": 0.05}}
    cert["runs"] = [
        {**run, "id": "dp2/dense/local", "losses": [8.0, 6.0, 4.0], "parity": None},
        {**run, "id": "tp2/dense/local", "layout": "tp2", "status": "failed", "losses": [8.1, 6.1, 4.1],
         "checks": [{"name": "step-0 loss matches dp-only", "ok": False, "detail": "8.1 vs 8.0"}],
         "parity": {"baseline": "dp2/dense/local", "loss_rel": 1.2e-2, "loss_tol": 3.9e-3, "grad_norm_rel": 0.0,
                    "grad_norm_tol": 7.8e-3}},
    ]
    cert["timing"] = {"wall_s": 24.0, "launch_to_rank_s": 1.0, "imports_s": 10.0, "init_s": 0.5, "build_s": 1.0,
                      "steps_s": 6.0, "teardown_s": 1.5}
    cert["checkpoint"] = {"format": "torch_dist", "verdict": "passed", "pairs": [
        {"id": "dp2>tp2/dense/local", "saved_in": "dp2", "loaded_in": "tp2", "model": "dense", "spec": "local",
         "format": "torch_dist", "async_save": True, "status": "passed", "reason": None, "checks": [],
         "loss_rel": 1e-6, "grad_norm_rel": 2e-6, "bytes": 12_345_678, "save_s": 1.0, "finish_s": 0.5,
         "load_s": 0.7, "wall_s": 4.0}]}
    cert["bench"] = {"status": "passed", "results": [
        {"config": "dense-1b", "spec": "te", "variant": "fusions", "precision": "bf16", "step_ms_median": 416.7,
         "tokens_per_s": 78_600.0, "tflops_per_gpu": 544.4, "mfu": 0.55,
         "gate": {"baseline": 540.0, "change_pct": 0.81, "max_drop_pct": 5.0, "status": "passed", "reason": None}}]}
    cert["bridge"] = {"schema": schemas.BRIDGE, "status": "passed", "exit_code": 0, "architectures": [], "error": None}
    path.write_text(json.dumps(cert, indent=2))
    return cert
