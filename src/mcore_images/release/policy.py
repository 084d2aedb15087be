"""What promotion demands of a certificate and an image: pure judgement, no registry I/O.

A certificate may give a digest public tags only when it is well-formed (schema
``mcore-images/smoke-certificate/v1``), passed (the smoke, the image tests, the bridge check), was made
for this very registry digest, is fresh, came from GPUs where the policy asks for them, and the image's
labels are the stack's pins in env/stacks.json and agree with what the certificate measured. Each
function returns the problems it finds, one line each with its fix; promote.py and verify.py act on them.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcore_images import jsonfiles, schemas
from mcore_images.catalogue import components, images, platforms
from mcore_images.catalogue.images import ImageRef
from mcore_images.catalogue.stacks import Stack
from mcore_images.catalogue.versions import InvalidVersion, Version, pin_satisfied
from mcore_images.errors import InputError
from mcore_images.jsonfiles import problem
from mcore_images.schemas import CERTIFICATE_SCHEMA, PACKAGED

CERTIFIED_LAYERS = ("runtime", "app")
"""Layers that carry megatron-core, so the smoke can certify them; only these get public tags."""
CLOCK_SKEW = dt.timedelta(hours=1)


@dataclass(frozen=True)
class Policy:
    """What a certificate must show to promote (data/release-policies.json, one entry per registry kind)."""

    name: str
    description: str
    require_gpu: bool
    max_age_days: float
    require_every_platform: bool = False
    """An index must hold every platform its stack lists (else: the platforms it holds, each certified)."""


POLICIES = PACKAGED / "release-policies.json"
"""The release policies, shipped in the package: a pulled image is judged the same from any folder."""


def load_policy(name: str, policy_file: Path | None = None) -> Policy:
    """The named policy from the packaged file, or from ``policy_file`` when one is given explicitly
    (`--policy-file`): never from the current folder. InputError (one line) for an unknown name or a
    malformed file."""
    path = policy_file or POLICIES
    data = jsonfiles.load(path, "release policies", "give a readable --policy-file" if policy_file else
                          "reinstall mcore-images (its packaged release-policies.json is damaged)",
                          PACKAGED / "release-policies.schema.json")
    if name not in data:
        raise InputError(f"unknown policy '{name}'; choose one of {', '.join(data)} ({path})")
    return Policy(name, **data[name])


def load_certificate(path: Path) -> dict[str, Any]:
    """certificate.json as `mcore-images certify` writes it; InputError naming what is malformed."""
    cert: dict[str, Any] = jsonfiles.load(
        path, "certificate", "use the certificate.json that `mcore-images certify` wrote, unedited",
        missing="download the gpu-smoke run's certificate artifact (or run `mcore-images certify IMAGE@DIGEST`)",
        shape=shape_problems)
    return cert


def shape_problems(cert: Any) -> list[str]:
    """What the readers need of a certificate: this tool's schema identifier, the fields and types of
    data/certificate.schema.json, and a creation time with a zone (empty when all is there)."""
    if not isinstance(cert, dict):
        return ["not a JSON object"]
    if cert.get("schema") != schemas.CERTIFICATE:
        return [f"schema {_short(cert.get('schema'))} is not {schemas.CERTIFICATE!r}"]
    found = problem(cert, CERTIFICATE_SCHEMA)
    if found:
        return [found]
    if created(cert) is None:
        return [f"created {_short(cert['created'])} is not an ISO 8601 time with a zone"]
    return []


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def created(cert: Mapping[str, Any]) -> dt.datetime | None:
    """The certificate's creation time in UTC; None when it is not an ISO 8601 time with a zone (or one that
    falls outside the calendar in UTC)."""
    try:
        when = dt.datetime.fromisoformat(str(cert.get("created")))
        return when.astimezone(dt.UTC) if when.tzinfo else None
    except (ValueError, OverflowError):
        return None


def certificate_problems(cert: Mapping[str, Any], image: ImageRef, now: dt.datetime, policy: Policy) -> list[str]:
    """Why this (well-formed) certificate cannot promote this digest, each with its fix."""
    problems = []
    verdict, smoke = cert["certify"]["status"], cert["status"]
    if verdict != "passed" or smoke != "passed":
        error = f": {cert['error']}" if cert.get("error") else ""
        problems.append(f"the certificate did not pass (certify {verdict}, smoke {smoke}, exit "
                        f"{cert['exit_code']}{error}); fix the image and certify it again")
    tests = cert["image_tests"]
    if tests.get("skipped"):
        problems.append("the image tests were skipped (--skip-image-tests); certify again without it")
    elif not tests.get("passed"):
        problems.append(f"the image tests failed ({tests.get('summary', '')}); fix them and certify again")
    gpus = (cert["environment"].get("gpu") or {}).get("count") or 0
    if policy.require_gpu and (not isinstance(gpus, int) or gpus < 1):
        problems.append(f"the smoke ran on no GPU (a --cpu run) and policy '{policy.name}' requires GPUs; certify "
                        "on a GPU runner")
    source = cert["environment"].get("source") or {}
    if isinstance(gpus, int) and gpus >= 1 and source.get("kind") != schemas.IMAGE_ENVIRONMENT:
        differs = "; ".join(source.get("differences") or [])[:300] or "no environment source recorded"
        problems.append(f"the GPU smoke ran in {source.get('kind') or 'an unknown environment'}, not the image's "
                        f"environment ({differs}); certify the image itself on a GPU runner (mcore-images certify)")
    if cert["image"]["digest"] != image.digest:
        problems.append(f"the certificate is for {cert['image']['digest']}, not {image.digest}; certify this "
                        "digest (gpu-smoke.yml) or promote the digest the certificate names")
    elif not cert["image"]["digest_source"].startswith("RepoDigests"):
        problems.append("the certificate bound a local image ID, not a registry digest; certify the candidate "
                        "pulled by digest")
    when = created(cert)
    assert when is not None  # shape_problems checked it
    age = now - when
    if age < -CLOCK_SKEW:
        problems.append(f"the certificate was created in the future ({cert['created']}); check the GPU "
                        "runner's clock and certify again")
    elif math.isfinite(policy.max_age_days) and age > dt.timedelta(days=policy.max_age_days):
        problems.append(f"the certificate is stale: {age.total_seconds() / 86400:.1f} days old (created "
                        f"{cert['created']}), policy '{policy.name}' allows {policy.max_age_days:g} days; certify "
                        "again")
    return problems


def platform_problem(cert: Mapping[str, Any], platform: str) -> str | None:
    """The certificate was made on the platform of the image it certifies: what ``platform.machine()`` said inside
    the image (environment.platform). A certificate from before platforms were recorded speaks for a default-platform
    image only."""
    recorded = cert["environment"].get("platform") or {}
    made_on = recorded.get("platform") if isinstance(recorded, dict) else None
    if not made_on:
        if platform == platforms.DEFAULT.name:
            return None
        return (f"the certificate records no platform and the image is {platform}; certify it again with this "
                "release of mcore-images")
    if made_on != platform:
        return (f"the certificate was made on {made_on} (machine {recorded.get('machine')}) but the image is "
                f"{platform}; certify this platform's image")
    return None


def coverage_problems(stack: Stack | None, present: list[str], policy: Policy) -> list[str]:
    """Under a policy that requires every platform, an index holds every platform its stack lists (a tag that named
    the stack's index must not lose a platform when it moves)."""
    if stack is None or not policy.require_every_platform:
        return []
    missing = [p for p in stack.platforms if p not in present]
    if not missing:
        return []
    return [f"it holds {', '.join(present) or 'no platform'}, and stack '{stack.name}' is built for "
            f"{', '.join(stack.platforms)}: {', '.join(missing)} is missing (policy '{policy.name}' requires every "
            "platform); promote the index `mcore-images index` assembles from every platform's certified candidate"]


def measured_problems(labels: Mapping[str, str], cert: Mapping[str, Any]) -> list[str]:
    """The certificate measured what the image's labels say, for every catalogue component its layer labels
    (CUDA is what torch was built for, environment.cuda; the rest are recorded packages), and torch loaded the
    labelled cuDNN (environment.cudnn)."""
    env = cert["environment"]
    packages = env.get("packages") or {}
    problems = []
    for comp in components.CATALOGUE:
        label = labels.get(comp.oci_label)
        if label is None or (comp.certificate is None and comp.key != "cuda"):
            continue  # the layer does not carry it, or the smoke does not record it
        have = env.get("cuda") if comp.key == "cuda" else packages.get(comp.certificate)
        if not pin_satisfied(comp.pin, label, None if have is None else str(have)):
            problems.append(f"the certificate measured {comp.certificate or comp.key} {have or 'absent'} but the "
                            f"image is labelled {comp.label}={label}; the certificate is not for this image")
    if problem := loaded_cudnn_problem(labels.get(components.BY_KEY["cudnn"].oci_label), env.get("cudnn")):
        problems.append(problem)
    return problems


def loaded_cudnn_problem(label: str | None, loaded: str | None) -> str | None:
    """The cuDNN torch loaded in the run (cudnnGetVersion(), '91900'; 'error: …' where torch refused it) is usable
    and the release the image's cuDNN label pins: another copy in its place makes TE fall back to unfused
    attention. Nothing to compare without a version label or a recorded cuDNN (older certificates)."""
    if loaded and not loaded.isdigit():
        return (f"torch could not use the cuDNN it loaded in the run ({loaded[:200]}); make the image load only "
                "torch's own cuDNN and certify it again")
    if not label or label in (components.NONE, components.FROM_BASE) or not loaded:
        return None
    release = components.cudnn_release(int(loaded))
    try:
        labelled = Version(label).release[:3]
    except InvalidVersion:
        return f"the image's cuDNN label {label!r} is not a version; it is not an image built from env/stacks.json"
    if Version(release).release != labelled:
        return (f"torch loaded cuDNN {release} in the run, but the image is labelled cudnn={label}; make the image "
                "load torch's own cuDNN wheel (another copy comes first) and certify it again")
    return None


def image_problems(labels: Mapping[str, str], stack: Stack, layer: str | None = None) -> tuple[str, list[str]]:
    """(layer, problems): the image is the stack and a certifiable layer asked for, built from env/'s pins."""
    label_stack = labels.get(images.label("stack"))
    if not label_stack:
        return "", ["the image carries no io.mcore-images.stack label: it is not an mcore-images build"]
    if label_stack != stack.name:
        return "", [f"the image is stack '{label_stack}', not '{stack.name}'; pass --stack {label_stack} "
                    f"or the digest of a '{stack.name}' candidate"]
    image_layer = labels.get(images.label("layer"), "")
    problems = []
    if image_layer not in CERTIFIED_LAYERS:
        problems.append(f"layer '{image_layer}' carries no megatron-core, so no smoke certificate; promote a "
                        f"{' or '.join(CERTIFIED_LAYERS)} image")
    if layer and layer != image_layer:
        problems.append(f"the image is layer '{image_layer}', not '{layer}'; drop --layer or pass its digest")
    for comp in components.CATALOGUE:
        label = labels.get(comp.oci_label)
        if label is not None and label != stack.pins[comp.key]:
            problems.append(f"the image says {comp.label}={label} but env/stacks.json pins {stack.pins[comp.key]} "
                            f"for '{stack.name}'; promote from the commit that built it")
    return image_layer, problems
