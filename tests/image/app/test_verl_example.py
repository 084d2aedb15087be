"""examples/verl-grpo in the app image, the part a CPU can check: a Ray head starts and sees its CPUs, and verl
composes the Megatron GRPO config from the example's own overrides (nothing is trained)."""

from __future__ import annotations

import io
import subprocess
import tarfile
from typing import Any

import pytest
from tests.image.shared_checks.hygiene import REPO

EXAMPLE = REPO / "examples" / "verl-grpo"
INSIDE = "/tmp/verl-grpo"


@pytest.fixture(scope="module")
def example(container: str, facts: dict[str, Any]) -> str:
    if "verl" not in facts["dists"]:
        pytest.skip("no verl in this image")
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        tar.add(EXAMPLE, arcname="verl-grpo")
    copied = subprocess.run(["docker", "cp", "-", f"{container}:/tmp"], input=out.getvalue(), capture_output=True,
                            check=False, timeout=120)
    assert copied.returncode == 0, copied.stderr.decode(errors="replace")
    return INSIDE


def test_a_ray_head_starts_and_sees_its_cpus(host: Any, example: str) -> None:
    result = host.run(f"cd /tmp && timeout 300 bash {example}/ray-node.sh check 2")
    assert result.rc == 0, (result.stdout + result.stderr)[-3000:]
    assert "2 CPU(s)" in result.stdout, result.stdout


def test_the_grpo_launch_composes_verls_megatron_config(host: Any, example: str) -> None:
    result = host.run(f"cd /tmp && TP=2 PP=2 EP=2 NNODES=2 timeout 600 bash {example}/grpo-megatron.sh --cfg job")
    assert result.rc == 0, (result.stdout + result.stderr)[-3000:]
    for line in ("strategy: megatron", "adv_estimator: grpo", "name: vllm", "vanilla_mbridge: true",
                 "pipeline_model_parallel_size: 2", "expert_model_parallel_size: 2", "nnodes: 2", "address: auto"):
        assert line in result.stdout, f"'{line}' not in the composed config:\n{result.stdout[-3000:]}"


def test_the_users_overrides_win_over_the_scripts(host: Any, example: str) -> None:
    """Hydra keeps the last value of a key: the script passes the user's overrides after its own (before, a
    user's data.train_batch_size=32 was silently replaced by the script's 256)."""
    result = host.run(f"cd /tmp && timeout 600 bash {example}/grpo-megatron.sh --cfg job data.train_batch_size=32 "
                      "trainer.total_epochs=3")
    assert result.rc == 0, (result.stdout + result.stderr)[-3000:]
    for line in ("train_batch_size: 32", "total_epochs: 3"):
        assert line in result.stdout, f"'{line}' not in the composed config:\n{result.stdout[-3000:]}"
    assert "train_batch_size: 256" not in result.stdout and "total_epochs: 1\n" not in result.stdout
