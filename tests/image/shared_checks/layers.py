"""What the saved layers show: no build secret anywhere, torch written by one layer only and unchanged since
the base image."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tests.image.utils.docker import ImageInfo
from tests.image.utils.probing import probe_image
from tests.image.utils.saved_layers import LayerScan


def secret_problems(scan: LayerScan) -> list[str]:
    problems = [f"{scan.layer_index(blob)}: {path}: {what}" for blob, path, what in scan.hits]
    problems += [f"could not read {item}: a secret there would go unseen" for item in scan.unreadable]
    if not scan.layers:
        problems.append("docker save gave no manifest.json: the layers could not be identified")
    return problems


def torch_layer_problems(scan: LayerScan) -> list[str]:
    """torch's files come from exactly one layer (the base layer's install); no upper layer rewrites them."""
    layers = scan.touched.get("torch", {})
    if not layers:
        return ["no layer holds torch's files (is torch installed?)"]
    if len(layers) == 1:
        return []
    return [
        f"{scan.layer_index(blob)} writes {len(paths)} torch paths, e.g. {paths[0]}"
        for blob, paths in sorted(layers.items(), key=lambda kv: scan.layer_index(kv[0]))
    ]


def base_torch_problems(base: ImageInfo, facts: Mapping[str, Any]) -> list[str]:
    theirs = probe_image(base.ref, modules=())["dists"].get("torch")
    ours = facts["dists"].get("torch")
    if not theirs or not ours:
        return [f"torch missing: in {base.ref}: {bool(theirs)}, here: {bool(ours)}"]
    problems = []
    if theirs["version"] != ours["version"]:
        problems.append(f"torch {ours['version']} here, {theirs['version']} in {base.ref}: an upper layer swapped it")
    elif theirs["record_sha256"] != ours["record_sha256"]:
        problems.append(f"torch {ours['version']}'s RECORD differs from {base.ref}'s: it was reinstalled")
    return problems
