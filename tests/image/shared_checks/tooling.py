"""The tooling shipped in runtime images: the pins it carries, the smoke's CPU run, the doctor's verdict."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from mcore_images.catalogue import components
from tests.image.utils.docker import ImageInfo


def shipped_stacks_problems(text: str, image: ImageInfo) -> list[str]:
    """/opt/mcore-images/env/stacks.json names the image's stack with the versions its labels carry."""
    try:
        entries = json.loads(text)["stacks"]
    except (KeyError, ValueError) as error:
        return [f"/opt/mcore-images/env/stacks.json is not a bake variable file: {error}"]
    entry = next((e for e in entries if e.get("name") == image.stack_name), None)
    if entry is None:
        return [f"/opt/mcore-images/env/stacks.json has no stack '{image.stack_name}'"]
    return [
        f"label {comp.oci_label}={image.label(comp.label)} but the shipped stacks.json has {entry.get(comp.key)}"
        for comp in components.CATALOGUE
        if image.label(comp.label) is not None and image.label(comp.label) != entry.get(comp.key)
    ]


LAYOUT_NAME = re.compile(r"\b(?:dp|tp|pp|vpp|ep|cp)\d+(?:-(?:dp|tp|pp|vpp|ep|cp)\d+)*\b")


def smoke_cpu_args(helptext: str, out: str) -> str:
    """A short CPU run from what the smoke suite's --help offers: two ranks, dense model, two steps,
    data parallel as the baseline and tensor parallel compared with it."""
    args = ["--cpu"]
    for option, value in (("--steps", "2"), ("--models", "dense"), ("--layouts", "tp2"), ("--out", out)):
        if option in helptext:
            args += [option, value]
    return " ".join(args)


def doctor_problems(report: Mapping[str, Any]) -> list[str]:
    """Every finding that failed or crashed, with its fix."""
    if "findings" not in report:
        return [f"the doctor's JSON has no findings: {sorted(report)}"]
    return [
        f"{f['id']}: {f['status']}: {f['finding']} (fix: {f.get('fix', '')})"
        for f in report["findings"]
        if f.get("status") in ("fail", "crash")
    ]
