"""Hygiene: no caches, build trees, credentials or secrets in any layer, installed files as their packages shipped
them, no PATH entry others can write; the size stays in its budget."""

from __future__ import annotations

from typing import Any

import pytest
from tests.image.shared_checks import hygiene, installed
from tests.image.shared_checks import layers as layer_checks
from tests.image.utils import docker, saved_layers


def test_no_build_leftovers(host: Any, container: str) -> None:
    problems = hygiene.leftover_problems(host.run, ignore=docker.container_added(container))
    assert not problems, "\n".join(problems)


def test_no_build_trees_or_git(fs_trees: list[str], container: str) -> None:
    problems = hygiene.tree_problems(fs_trees, ignore=docker.container_added(container))
    assert not problems, "\n".join(problems)


def test_no_credentials(host: Any, container: str) -> None:
    """No tool's credential file (netrc, docker, cloud, git, pip, ssh keys) and no PEM private key anywhere in the
    file system, but what an OS package or a pip distribution ships unchanged (hygiene.credential_problems says
    why those are exempt; the output lists them)."""
    found = hygiene.credential_findings(host.run, ignore=docker.container_added(container))
    problems = hygiene.unshipped_credentials(found)
    assert not problems, "\n".join(problems)
    print("; ".join(f"{path} (shipped by {owner})" for path, owner in found.items()) or "none found, none exempt")


def test_installed_files_match_their_records(host: Any, facts: dict[str, Any]) -> None:
    """Every file pip installed in the image's Python still has the hash a RECORD lists for it: no package was
    patched or edited in place after pip installed it (the version checks cannot see that). A path two wheels both
    ship holds the last one's copy, which its RECORD lists: said, not failed."""
    verified = installed.verify_records(host.run)
    problems = installed.record_problems(verified, facts)
    assert not problems, "\n".join(problems)
    print(
        f"{len(verified['distributions'])} distributions, {verified['files']} files, "
        f"{verified['bytes'] / docker.GB:.2f} GB hashed in {verified['seconds']} s"
    )
    for path, dists, kept in verified.get("shared", []):
        print(f"shipped by {', '.join(dists)}: {path} is {kept}'s copy (installed last)")


def test_path_entries_not_writable_by_others(host: Any, image: docker.ImageInfo) -> None:
    """No entry of the PATH the image config, docker exec, `bash -i` and `bash -l` give can be written (or, where
    it does not exist, made) by anyone but its owner: a program put there would run in place of the image's."""
    sources = hygiene.path_sources(image.env, host.run)
    assert sources, "no PATH found: neither the image config nor a shell in the container gives one"
    problems = hygiene.path_problems(sources, host.run)
    assert not problems, "\n".join(problems)
    print("; ".join(f"{name}: {value}" for name, value in sources.items()))


def test_file_permissions(host: Any, container: str) -> None:
    """No world-writable file or unsticky folder, no file of an unknown user or group, no setuid/setgid
    program beyond the OS packages' own (what the image holds, not what tests ran in its container wrote)."""
    problems = hygiene.permission_problems(host.run, ignore=docker.container_added(container))
    assert not problems, "\n".join(problems)


def test_run_secrets_empty(host: Any) -> None:
    """BuildKit mounts secrets at /run/secrets for one RUN; nothing may stay there."""
    out = host.run("find /run/secrets -mindepth 1 2>/dev/null || true").stdout
    assert not out.strip(), f"/run/secrets holds: {out.strip()}"


def test_size_within_budget(image: docker.ImageInfo) -> None:
    """Content size (compressed, what a pull downloads) <= io.mcore-images.size-budget-gb."""
    if not docker.containerd_store():
        pytest.skip(
            "the budget is for the compressed content size, which only containerd's image store "
            "reports; this engine uses the classic store (enable the containerd-snapshotter feature)"
        )
    problems = hygiene.size_problems(image)
    assert not problems, "\n".join(problems)
    print(
        f"content {image.content_size / docker.GB:.3f} GB, unpacked {image.size / docker.GB:.2f} GB, "
        f"budget {image.label('size-budget-gb')} GB"
    )


def test_no_secret_in_any_layer(layer_scan: saved_layers.LayerScan, secrets: list[saved_layers.Secret]) -> None:
    """Every layer of the image (deleted files too): no copy of a secret file, no piece of its content."""
    problems = layer_checks.secret_problems(layer_scan)
    assert not problems, "\n".join(problems)
    assert layer_scan.files > 0, "the scan read no files"
    print(
        f"scanned {len(layer_scan.layers)} layers, {layer_scan.files} files, "
        f"{layer_scan.bytes / docker.GB:.2f} GB in {layer_scan.seconds} s from {layer_scan.source}; secrets: "
        + "; ".join(f"{s.path}: {s.note}, {len(s.probes)} probes" for s in secrets)
    )


def test_no_build_host_identity_in_any_layer(layer_scan: saved_layers.LayerScan) -> None:
    """No layer keeps a build host's /etc/resolv.conf or /etc/hostname (debootstrap copies both)."""
    problems = layer_checks.host_identity_problems(layer_scan)
    assert not problems, "\n".join(problems)
    print("; ".join(f"{path}: {len(layers)} layer(s), empty" for path, layers in sorted(layer_scan.host_files.items()))
          or "no layer writes /etc/resolv.conf or /etc/hostname")
