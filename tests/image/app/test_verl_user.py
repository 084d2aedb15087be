"""What a verl user with the Megatron backend needs from the app image, checked on CPU: the rollout engine
and Ray import, vLLM's engine arguments parse, the image's constraints hold every certified component,
verl's Megatron PPO config composes with a working set of overrides, and verl's own mbridge path converts
HF configs and builds models that train a step."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.image.utils.docker import ImageInfo
from tests.image.utils.fake_wheel import FAKE_WHEEL

from mcore_images.catalogue import components
from mcore_images.catalogue.images import label

ENGINE_ARGS = r'''
import json, sys
import torch
import vllm.platforms
if not torch.cuda.is_available():
    # vLLM infers the device of its defaults from the platform it detects, and finds none without a GPU:
    # its CPU platform stands in, so the parser and the engine's config classes still run.
    from vllm.platforms.cpu import CpuPlatform
    vllm.platforms._current_platform = CpuPlatform()
from vllm.engine.arg_utils import EngineArgs
try:
    from vllm.utils.argparse_utils import FlexibleArgumentParser
except ImportError:
    from vllm.utils import FlexibleArgumentParser
parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
ns = parser.parse_args(["--model", "/tmp/no-such-model", "--tensor-parallel-size", "2", "--dtype", "bfloat16",
                        "--gpu-memory-utilization", "0.6", "--enforce-eager", "--max-model-len", "4096"])
args = EngineArgs.from_cli_args(ns)
print(json.dumps({"tp": args.tensor_parallel_size, "dtype": args.dtype, "eager": args.enforce_eager,
                  "max_len": args.max_model_len}))
'''

MEGATRON_PPO = (
    "actor_rollout_ref.actor.strategy=megatron critic.strategy=megatron "
    "actor_rollout_ref.model.path=/tmp/no-such-model "
    "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2 "
    "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=2 "
    "actor_rollout_ref.actor.megatron.expert_model_parallel_size=2 "
    "actor_rollout_ref.actor.megatron.vanilla_mbridge=True "
    "actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.tensor_model_parallel_size=2 "
    "algorithm.adv_estimator=grpo actor_rollout_ref.rollout.n=4 "
    "trainer.n_gpus_per_node=8 trainer.nnodes=2"
)
"""A GRPO job with the Megatron actor (TP 2, PP 2, EP 2 through verl's mbridge) and vLLM rollout (TP 2); the
example's own launch is composed and validated in test_verl_example.py."""


def engine(labels: dict[str, str]) -> components.Component | None:
    return next((c for c in components.CATALOGUE if c.rollout_engine and labels.get(c.oci_label, "none") != "none"),
                None)


def test_the_rollout_engine_and_ray_import(host: Any, labels: dict[str, str]) -> None:
    chosen = engine(labels)
    assert chosen is not None, "the app image labels no rollout engine (vLLM or SGLang)"
    module = chosen.modules[0]
    result = host.run(f"cd /tmp && timeout 600 python -c 'import {module}, ray; print({module}.__version__, "
                      "ray.__version__)'")
    assert result.rc == 0, f"import {module}, ray: {(result.stdout + result.stderr)[-2000:]}"
    print(result.stdout.strip())


def test_vllm_engine_arguments_parse_without_a_gpu(host: Any, labels: dict[str, str]) -> None:
    if labels.get(label("vllm"), "none") == "none":
        pytest.skip("no vLLM in this image")
    result = host.run("cd /tmp && timeout 600 python -c %s", ENGINE_ARGS)
    assert result.rc == 0, (result.stdout + result.stderr)[-3000:]
    got = json.loads(result.stdout.strip().splitlines()[-1])
    assert got == {"tp": 2, "dtype": "bfloat16", "eager": True, "max_len": 4096}, got


@pytest.mark.parametrize("dist", ["torch", "transformer-engine", "megatron-core", "mbridge", "megatron-bridge",
                                  "verl", "vllm", "sglang"])
def test_the_constraints_refuse_to_move(dist: str, host: Any, facts: dict[str, Any], image: ImageInfo) -> None:
    """A job's `pip install` of another release of a certified component is refused by PIP_CONSTRAINT (a fake
    wheel of that name, version 0.0.1, installed offline: without the constraint pip would take it)."""
    if dist not in facts["dists"]:
        pytest.skip(f"{dist} is not installed in {image.shown}")
    made = host.run("mkdir -p /tmp/fake-wheels && python -c %s %s 0.0.1 /tmp/fake-wheels", FAKE_WHEEL, dist)
    assert made.rc == 0, made.stderr[-1500:]
    wheel = made.stdout.strip()
    result = host.run(f"cd /tmp && python -m pip install --dry-run --no-deps --no-index {wheel}")
    output = result.stdout + result.stderr
    assert result.rc != 0, f"pip would move {dist} to 0.0.1 under the image's PIP_CONSTRAINT:\n{output[-1500:]}"
    assert "constraint" in output.lower(), output[-1500:]


def test_verl_composes_its_megatron_ppo_config(host: Any) -> None:
    """verl's Megatron PPO trainer config with the GRPO overrides, composed by Hydra and printed (`--cfg job`);
    nothing is started."""
    result = host.run("cd /tmp && timeout 600 python -m verl.trainer.main_ppo --config-name ppo_megatron_trainer "
                      f"--cfg job {MEGATRON_PPO}")
    output = result.stdout + result.stderr
    assert result.rc == 0, output[-3000:]
    for line in ("strategy: megatron", "tensor_model_parallel_size: 2", "expert_model_parallel_size: 2",
                 "name: vllm", "adv_estimator: grpo", "vanilla_mbridge: true"):
        assert line in result.stdout, f"'{line}' not in the composed config:\n{result.stdout[-3000:]}"


def test_verl_converts_hf_configs_and_builds_models_through_mbridge(host: Any, labels: dict[str, str]) -> None:
    """verl's own path (verl.models.mcore.mbridge.AutoBridge, its patches applied): tiny Qwen2, Qwen3-MoE and
    Mixtral configs made here converted, the models built (TE modules as CPU stand-ins), the weights round
    tripped exactly and a forward-backward run. Mixtral's logits differ from transformers' by mbridge's own
    router function (docs/bridge.md), so only its conversion, build, round trip and step are judged."""
    if labels.get(label("mbridge"), "none") == "none":
        pytest.skip("no mbridge in this image: verl builds through Megatron-Bridge here")
    out = "/tmp/verl-bridge"
    result = host.run(f"cd /tmp && timeout 900 python -m mcore_images.smoke.bridge --cpu --bridges verl-mbridge "
                      f"--archs qwen2,qwen3_moe,mixtral --out {out}")
    report = json.loads(host.file(f"{out}/bridge.json").content_string)
    by_arch = {r["arch"]: r for r in report["architectures"]}
    assert set(by_arch) == {"qwen2", "qwen3_moe", "mixtral"}, (result.stdout + result.stderr)[-3000:]
    for arch, got in by_arch.items():
        assert got["stage"] == "done" and got["roundtrip_exact"], f"{arch}: {got.get('stage')}: {got.get('reason')}"
        assert got["forward_backward"]["loss"] > 0, got["forward_backward"]
    for arch in ("qwen2", "qwen3_moe"):
        assert by_arch[arch]["passed"], f"{arch}: {by_arch[arch]['reason']}"
