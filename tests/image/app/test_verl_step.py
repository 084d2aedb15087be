"""The verl step program in the app image, on CPU (src/mcore_images/smoke/verl_step/).

`python -m mcore_images.smoke.verl_step --cpu-check` runs what needs no GPU inside the container: the tiny Qwen2
model and its tokenizer made there, the prompts written as parquet and read back through verl's own RLHFDataset,
the GRPO step's trainer config composed from verl's own config folder and passed by verl's own validate_config.
Without --cpu-check and without a GPU it must refuse in one line (exit 2). An image whose verl predates the
program's APIs (0.8) must refuse in one line naming that, and the GPU parts are the device's (docs/verl-step.md).
"""

from __future__ import annotations

import json
import shlex
from typing import Any

import pytest
from packaging.version import Version
from tests.image.utils import docker

from mcore_images.catalogue.stacks import NONE
from mcore_images.smoke.verl_step import cli, spec

STEP = "cd /tmp && {env} timeout {t} python -m mcore_images.smoke.verl_step {args}"


@pytest.fixture(scope="module")
def verl_version(image: docker.ImageInfo, host: Any) -> str:
    version = image.label("verl")
    if version in (None, NONE):
        pytest.skip(f"{image.ref} labels no verl (io.mcore-images.verl={version}): nothing to run")
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('mcore_images.smoke.verl_step') is None)"
    if host.run(f'python -c "{probe}"').rc:
        pytest.skip("this image's smoke programs have no verl step (smoke.verl_step): it predates it")
    return str(version)


def run_step(host: Any, args: str, timeout: int = 900) -> tuple[Any, dict[str, Any]]:
    result = host.run(STEP.format(env="", t=timeout, args=args))
    try:
        report = json.loads(result.stdout)
    except ValueError:
        pytest.fail(f"python -m mcore_images.smoke.verl_step {args} printed no JSON report (exit {result.rc}): "
                    f"{(result.stdout + result.stderr).strip()[-3000:]}")
    return result, report


def expected_bridge(image: docker.ImageInfo) -> str:
    """What --bridge auto takes in this image: Megatron-Bridge where the image carries it, else mbridge."""
    return "megatron-bridge" if image.label("megatron-bridge") not in (None, NONE) else "mbridge"


def test_without_a_gpu_the_step_refuses_in_one_line(host: Any, verl_version: str) -> None:
    result = host.run(STEP.format(env="CUDA_VISIBLE_DEVICES=", t=300, args=""))
    assert result.rc == 2, result.stderr
    assert result.stderr.strip() == f"smoke.verl_step: could not run: {cli.NO_GPU}"


@pytest.fixture(scope="module")
def cpu_check(host: Any, verl_version: str) -> tuple[Any, dict[str, Any], str]:
    """One CPU check in the container, in a new folder it keeps for the tokenizer test."""
    folder = host.run("mktemp -u -d /tmp/verl-step-cpu.XXXXXX").stdout.strip()
    return (*run_step(host, f"--cpu-check --keep {folder}"), folder)


def test_cpu_check_makes_the_model_and_data_and_verl_accepts_them(image: docker.ImageInfo, verl_version: str,
                                                                  cpu_check: tuple[Any, dict[str, Any], str]) -> None:
    result, report, _ = cpu_check
    if Version(verl_version) < Version(".".join(map(str, spec.VERL_FROM))):
        assert result.rc == 2 and report["error"] == spec.verl_problem(verl_version), report["error"]
        return
    assert result.rc == 0, f"exit {result.rc}: {report.get('error')}\n{result.stderr[-3000:]}"
    check = report["cpu_check"]
    read = check["read_back"]
    assert read["rows"] == spec.SPLITS["train"] and set(spec.COLUMNS) <= set(read["columns"])
    assert read["prompt_text"].startswith("<|im_start|>user\nsay a number near n")
    assert read["prompt_text"].endswith("<|im_start|>assistant\n") and read["prompt_tokens"] <= spec.MAX_PROMPT_LENGTH
    assert read["data_source"] == spec.DATA_SOURCE
    config = check["config"]
    assert config["model_engine"] == "megatron" and config["actor_rollout_ref.actor.strategy"] == "megatron"
    assert config["actor_rollout_ref.ref.strategy"] == "megatron" and config["actor_rollout_ref.rollout.name"] == "vllm"
    assert config["actor_rollout_ref.actor.megatron.override_transformer_config.attention_backend"] == "fused"
    bridge = expected_bridge(image)
    assert report["verl"]["bridge"] == bridge
    assert config["actor_rollout_ref.ref.megatron.vanilla_mbridge"] is (bridge == "mbridge")
    assert report["verl"]["version"] == verl_version
    needs = report["verl"]["needs_flash_attn_2"]
    assert needs == [], f"verl's Megatron path reaches an unguarded flash_attn import: {', '.join(needs)}"
    listed = {(f["file"], f["module"]) for f in report["verl"]["flash_attn_imports"]}
    assert ("utils/attention_utils.py", "flash_attn.bert_padding") in listed


def test_the_kept_folder_holds_a_model_verls_tokenizer_reads_back(host: Any, verl_version: str,
                                                                   cpu_check: tuple[Any, dict[str, Any], str]) -> None:
    """The tokenizer saved by the CPU check is the one transformers gives back for a qwen2 folder (verl and vLLM
    load it with AutoTokenizer): the template's words are whole tokens, and every id decodes."""
    if Version(verl_version) < Version(".".join(map(str, spec.VERL_FROM))):
        pytest.skip(f"verl {verl_version}: the CPU check refuses it (test above)")
    code = ("from transformers import AutoTokenizer\n"
            f"t = AutoTokenizer.from_pretrained('{cpu_check[2]}/model')\n"
            "ids = t('user say a number near n17')['input_ids']\n"
            "print(len(t), t.convert_ids_to_tokens(ids), len(t.decode(list(range(len(t))))) > 0)\n")
    result = host.run(f"cd /tmp && python -c {shlex.quote(code)}")
    assert result.rc == 0, result.stderr[-2000:]
    assert result.stdout.split(" [")[0] == str(spec.VOCAB_SIZE)
    assert "'user'" in result.stdout and f"'{spec.SPACE}near'" in result.stdout
    assert result.stdout.strip().endswith("True")
