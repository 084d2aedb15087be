"""`mcore-images kube-manifest IMAGE`: the Job it prints, and the warning a name the cluster cannot pull gets."""

from __future__ import annotations

import pytest

from mcore_images import cli
from mcore_images.launch import kube


@pytest.mark.parametrize(("image", "said"), [
    ("mcore-images:runtime-debian", "names no registry, so each node pulls it from Docker Hub as "
                                    "docker.io/library/mcore-images: push the image"),
    ("acme/mcore-images:runtime-debian", "each node pulls it from Docker Hub as docker.io/acme/mcore-images"),
    ("127.0.0.1:5000/mcore-images:runtime-debian", "this machine's own registry (127.0.0.1:5000)"),
    ("localhost:5000/mcore-images:runtime-debian", "this machine's own registry (localhost:5000)"),
    ("[::1]:5000/mcore-images:runtime-debian", "this machine's own registry ([::1]:5000)"),
])
def test_a_name_the_nodes_cannot_pull_is_warned_and_the_job_still_printed(image: str, said: str,
                                                                         capsys: pytest.CaptureFixture) -> None:
    """Before: a local-only name went into the cluster's Job without a word."""
    assert cli.main(["kube-manifest", image]) == 0
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kube-manifest: warning: ") and said in lines[0], err
    assert f"image: {image}\n" in out


@pytest.mark.parametrize("image", ["ghcr.io/acme/mcore-images:runtime-ngc", "registry.local:5000/mcore-images:t",
                                   "10.0.0.5:5000/mcore-images@sha256:" + "1" * 64])
def test_a_registry_the_nodes_may_reach_is_not_warned(image: str) -> None:
    assert kube.pull_warning(image) is None


def test_the_printed_job_tells_how_to_apply_it_without_a_checkout() -> None:
    """Before: its comments told a wheel user to `kubectl apply -f deploy/k8s/…` and `make kube-smoke`."""
    text = kube.manifest("ghcr.io/acme/mcore-images:runtime-ngc", kube.default_job())
    head = "".join(line for line in text.splitlines(keepends=True) if line.startswith("#"))
    assert "| kubectl apply -f -" in head and "mcore-images kube-manifest" in head
    assert "deploy/k8s" not in head and "make " not in head
