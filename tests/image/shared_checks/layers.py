"""What the saved layers show: no build secret anywhere, no build host's name or resolver, torch written by one
layer only and unchanged since the base image."""

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
        problems.append(f"{scan.source or 'the scan'} gave no manifest: the layers could not be identified")
    return problems


def host_identity_problems(scan: LayerScan) -> list[str]:
    """/etc/resolv.conf and /etc/hostname are empty in every layer that writes them: the container runtime
    mounts its own at start, and a layer's copy tells the build host's name and resolvers (and is what a
    runtime without those mounts, such as a Slurm container plugin, would use)."""
    return [
        f"{scan.layer_index(blob)}: {path} holds {content.strip()[:80].decode(errors='replace')!r} (a build "
        "host's); a layer must leave it empty"
        for path, layers in sorted(scan.host_files.items())
        for blob, content in sorted(layers.items(), key=lambda kv: scan.layer_index(kv[0]))
        if content.strip()
    ]


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
