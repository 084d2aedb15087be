"""examples/verl-grpo in the app image, the part a CPU can check: a Ray head starts and sees its CPUs, verl composes
the Megatron GRPO config from the example's own overrides, with the settings the image's doctor says run here
(attention_backend, gradient accumulation fusion), and that config passes verl's own validate_config, as verl's
trainer judges it before it starts its workers (nothing is trained)."""

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
    for line in ("strategy: megatron", "adv_estimator: grpo", "name: vllm", "pipeline_model_parallel_size: 2",
                 "expert_model_parallel_size: 2", "nnodes: 2", "address: auto"):
        assert line in result.stdout, f"'{line}' not in the composed config:\n{result.stdout[-3000:]}"


VALIDATE = """
import sys
from omegaconf import OmegaConf
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import validate_config

config = OmegaConf.load(sys.argv[1])
OmegaConf.resolve(config)
validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
for part in ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic"):
    settings = OmegaConf.select(config, part + ".megatron.override_transformer_config")
    print(part, settings.get("attention_backend"), settings.get("gradient_accumulation_fusion", "default"))
"""
"""verl's trainer (verl/trainer/main_ppo.py) validates its config this way before it starts any worker."""


def composed(host: Any, example: str, settings: str, name: str, overrides: str = "") -> tuple[Any, str]:
    """The example's composed config (`--cfg job`) under ``settings`` (its variables) and a user's Hydra
    ``overrides``, written to a file in the container: (the run, the file)."""
    path = f"/tmp/verl-grpo-{name}.yaml"
    done = host.run(f"cd /tmp && {settings} timeout 600 bash {example}/grpo-megatron.sh --cfg job {overrides} > {path}")
    return done, path


def verls_verdict(host: Any, path: str) -> Any:
    host.run(f"cat > /tmp/validate.py <<'PY'\n{VALIDATE}\nPY")
    return host.run(f"cd /tmp && timeout 300 python3 /tmp/validate.py {path}")


@pytest.mark.parametrize(("settings", "name"), [
    ("", "one-node"), ("TP=2 PP=2 EP=2 NNODES=2", "two-nodes"), ("TP=4 GPUS_PER_NODE=4 ROLLOUT_TP=4", "tp4"),
])
def test_the_composed_config_passes_verls_own_validation(host: Any, example: str, settings: str, name: str) -> None:
    """Before: the example set no attention_backend (verl's flash finds no backend in these images) and its config
    was never shown to verl's own validation; a layout verl refuses was found when the trainer started."""
    done, path = composed(host, example, settings, name)
    assert done.rc == 0, (done.stdout + done.stderr)[-3000:]
    assert "attention_backend=fused: the image's doctor (te.attention) says it runs here" in done.stderr, done.stderr
    verdict = verls_verdict(host, path)
    assert verdict.rc == 0, (verdict.stdout + verdict.stderr)[-3000:]
    parts = dict(line.split(" ", 1) for line in verdict.stdout.splitlines() if line.startswith(("actor", "critic")))
    everywhere = dict.fromkeys(("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic"), "fused default")
    assert parts == everywhere, parts


def test_a_layout_that_does_not_divide_the_gpus_is_refused_in_one_line(host: Any, example: str) -> None:
    """The script judges its own counts before Hydra sees them: TP=3 on 8 GPUs is one line and exit 2."""
    done, _ = composed(host, example, "TP=3", "tp3")
    assert done.rc == 2 and done.stderr.strip().splitlines() == [
        "grpo-megatron.sh: TP=3 x PP=1 must divide the 8 GPUs (NNODES x GPUS_PER_NODE)"], done.stderr


def test_a_layout_verl_refuses_fails_its_validation(host: Any, example: str) -> None:
    """The check is verl's own: a tensor-parallel size that does not divide the GPUs, given as a user's Hydra
    override (which wins over the script's), is refused by verl's validation."""
    done, path = composed(host, example, "", "tp3-override",
                          "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=3")
    assert done.rc == 0, (done.stdout + done.stderr)[-3000:]
    verdict = verls_verdict(host, path)
    assert verdict.rc != 0 and "must be divisible" in verdict.stderr, (verdict.stdout + verdict.stderr)[-3000:]


def test_without_the_fusion_module_the_launch_turns_the_fusion_off(host: Any, example: str) -> None:
    """An image whose fused_weight_gradient_mlp_cuda does not import (hidden here from every process of the launch):
    the doctor's wgrad.fusion fails and the launch turns verl's gradient accumulation fusion off, where megatron-core
    would stop at the first step."""
    hide = "import sys\nsys.modules['fused_weight_gradient_mlp_cuda'] = None\n"
    host.run(f"mkdir -p /tmp/no-wgrad && cat > /tmp/no-wgrad/sitecustomize.py <<'PY'\n{hide}PY")
    done, path = composed(host, example, "PYTHONPATH=/tmp/no-wgrad", "no-wgrad")
    assert done.rc == 0, (done.stdout + done.stderr)[-3000:]
    assert "gradient accumulation fusion off: the image's doctor (wgrad.fusion) says it cannot run here" in done.stderr
    verdict = verls_verdict(host, path)
    assert verdict.rc == 0, (verdict.stdout + verdict.stderr)[-3000:]
    assert "actor_rollout_ref.actor fused False" in verdict.stdout and "critic fused False" in verdict.stdout


def test_the_users_overrides_win_over_the_scripts(host: Any, example: str) -> None:
    """Hydra keeps the last value of a key: the script passes the user's overrides after its own (before, a
    user's data.train_batch_size=32 was silently replaced by the script's 256)."""
    result = host.run(f"cd /tmp && timeout 600 bash {example}/grpo-megatron.sh --cfg job data.train_batch_size=32 "
                      "trainer.total_epochs=3")
    assert result.rc == 0, (result.stdout + result.stderr)[-3000:]
    for line in ("train_batch_size: 32", "total_epochs: 3"):
        assert line in result.stdout, f"'{line}' not in the composed config:\n{result.stdout[-3000:]}"
    assert "train_batch_size: 256" not in result.stdout and "total_epochs: 1\n" not in result.stdout
