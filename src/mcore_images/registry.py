"""Registry I/O: what promotion, verification and certification read from and write to a registry.

Every call goes through the real tools (docker buildx imagetools, oras, cosign); each failure is one line
naming what to do. Nothing here judges: policy.py does.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from typing import Any

from mcore_images.errors import InputError
from mcore_images.images import ImageRef

Runner = Callable[..., subprocess.CompletedProcess]


def _docker(cmd: list[str], run: Runner, what: str) -> str:
    try:
        proc = run(cmd, capture_output=True, text=True, timeout=120)
    except FileNotFoundError as exc:
        raise InputError("docker is not installed or not on PATH: install Docker with buildx to promote") from exc
    if proc.returncode != 0:
        why = (proc.stderr or proc.stdout or "").strip().splitlines()
        raise InputError(f"{what} failed ({why[-1] if why else f'exit {proc.returncode}'}): log in to the "
                         "registry (docker login) and check the digest")
    return proc.stdout


def _labels_of(config: Any) -> dict[str, str]:
    if not isinstance(config, dict):
        return {}
    inner = config.get("config") or config.get("Config") or {}
    return dict(inner.get("Labels") or {}) if isinstance(inner, dict) else {}


def registry_labels(image: ImageRef, run: Runner = subprocess.run) -> dict[str, str]:
    """The image's labels as the registry holds them (nothing is pulled): the image config of the
    digest, or of each platform of an index (which must agree)."""
    out = _docker(["docker", "buildx", "imagetools", "inspect", image.ref, "--format", "{{json .Image}}"], run,
                  f"docker buildx imagetools inspect {image.ref}")
    try:
        data = json.loads(out)
    except ValueError as exc:
        raise InputError(f"imagetools inspect {image.ref} printed no JSON: update docker buildx") from exc
    configs = [data] if isinstance(data, dict) and ("config" in data or "rootfs" in data) else (
        list(data.values()) if isinstance(data, dict) else [])
    found = [labels for labels in map(_labels_of, configs) if labels]
    if not found:
        return {}
    if any(labels != found[0] for labels in found[1:]):
        raise InputError(f"the platforms of {image.ref} carry different labels: promote one platform's digest")
    return found[0]


def local_labels(image: ImageRef, run: Runner = subprocess.run) -> dict[str, str]:
    """The labels of the image as pulled here (``docker image inspect``)."""
    out = _docker(["docker", "image", "inspect", "--format", "{{json .Config.Labels}}", image.ref], run,
                  f"docker image inspect {image.ref}")
    try:
        return dict(json.loads(out) or {})
    except (ValueError, TypeError) as exc:
        raise InputError(f"docker image inspect {image.ref} printed no label JSON: check Docker") from exc
