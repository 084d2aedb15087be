"""Megatron workers on Ray, the way verl runs them: `python -m mcore_images.smoke --ray` starts a Ray head in the
container, places one actor per rank, and each actor joins one torch.distributed group (gloo on CPU) and runs the
smoke's TP/PP/EP forward-backward. The certificate says it ran under Ray; a rank that raises inside an actor
fails the run in seconds."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from mcore_images.catalogue.images import label
from mcore_images.smoke.layouts import parse_layout

RUNS = {2: "tp2,pp2,ep2", 4: "tp2-pp2,pp2-ep2"}
"""Layouts per actor count: tensor, pipeline and expert parallel among them (MoE with tp > 1 needs TE's
sequence parallelism, which a CPU run lacks)."""
FAIL_FAST_S = 120.0
"""A raising rank ends the run within this (imports and the Ray head's start included; the failure itself
is seen within the poll interval)."""


def smoke_under_ray(host: Any, actors: int, out: str, extra: str = "") -> tuple[Any, dict[str, Any] | None, float]:
    started = time.monotonic()
    result = host.run(f"cd /tmp && timeout 900 python -m mcore_images.smoke --cpu --ray --nproc {actors} "
                      f"--layouts {RUNS[actors]} --no-checkpoint --no-attention --steps 3 --out {out} {extra}")
    seconds = time.monotonic() - started
    found = host.file(f"{out}/certificate.json")
    return result, json.loads(found.content_string) if found.exists else None, seconds


@pytest.fixture(autouse=True)
def _needs_ray(labels: dict[str, str], facts: dict[str, Any]) -> None:
    """Skipped only where nothing needs Ray: an image with verl must carry it (verl runs its Megatron workers as
    Ray actors), so there a missing ray fails the tests below instead of skipping them."""
    if "ray" not in facts["dists"] and labels.get(label("verl"), "none") == "none":
        pytest.skip("ray is not installed and the image carries no verl, which would need it")
    if labels.get(label("mcore"), "none") == "none":
        pytest.skip("no megatron-core in this image")


@pytest.mark.parametrize("actors", sorted(RUNS))
def test_the_smoke_runs_as_ray_actors(host: Any, actors: int) -> None:
    result, cert, seconds = smoke_under_ray(host, actors, f"/tmp/ray-smoke-{actors}")
    output = (result.stdout + result.stderr)[-3000:]
    assert result.rc == 0 and cert is not None, output
    assert cert["status"] == "passed", cert.get("error")
    settings = cert["settings"]
    assert settings["launcher"] == "ray" and settings["world_size"] == actors, settings
    assert settings["ray"]["actors"] == actors and settings["ray"]["first_failure"] is None, settings["ray"]
    ran = {r["layout"] for r in cert["runs"] if r.get("status") == "passed"}
    asked = {parse_layout(name).filled(actors).name for name in RUNS[actors].split(",")}  # ep2 on 2 ranks: dp2-ep2
    assert asked <= ran, f"layouts passed: {sorted(ran)}, asked: {sorted(asked)}"
    print(f"{actors} actors: {seconds:.1f} s (Ray head {settings['ray']['head_start_s']} s)")


def test_a_rank_that_raises_in_its_actor_fails_the_run_in_seconds(host: Any) -> None:
    result, cert, seconds = smoke_under_ray(host, 2, "/tmp/ray-smoke-fault", "--inject-fault raise --fault-rank 1")
    assert result.rc == 1, (result.stdout + result.stderr)[-3000:]
    assert seconds < FAIL_FAST_S, f"the run took {seconds:.0f} s to fail"
    assert cert is not None and cert["status"] == "failed", cert
    assert "rank 1" in (cert.get("error") or "") or "rank 1" in result.stdout, cert.get("error")
    print(f"failed in {seconds:.1f} s: {cert.get('error')}")
