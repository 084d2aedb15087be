"""`python -m mcore_images.smoke.verl_step` on a machine without a GPU: the one-line refusal comes before anything
heavy is imported; bad inputs are one line; the dry run needs no torch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mcore_images.smoke.verl_step import cli, spec
from tests.unit.conftest import PYTHONPATH

HEAVY = ("torch", "verl", "transformers", "tokenizers", "hydra", "megatron", "transformer_engine", "vllm", "ray",
         "pandas", "pyarrow")
BLOCKED = ("import sys\n"
           "class Block:\n"
           "    def find_spec(self, name, path=None, target=None):\n"
           f"        if name.split('.')[0] in {HEAVY!r}:\n"
           "            raise ImportError('imported before the GPU check: ' + name)\n"
           "sys.meta_path.insert(0, Block())\n"
           "from mcore_images.smoke.verl_step.cli import main\n"
           "raise SystemExit(main(sys.argv[1:]))\n")


def program(*args: str, **env: str) -> subprocess.CompletedProcess:
    """The program with every heavy package blocked: a run that imports one fails with that name."""
    clean = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    clean.update(PYTHONPATH=PYTHONPATH, **env)
    return subprocess.run([sys.executable, "-c", BLOCKED, *args], capture_output=True, text=True, env=clean,
                          timeout=60)


def test_no_gpu_is_one_line_and_exit_2_before_any_heavy_import() -> None:
    out = program(CUDA_VISIBLE_DEVICES="")
    assert out.returncode == 2, out.stderr
    assert out.stderr == f"smoke.verl_step: could not run: {cli.NO_GPU}\n"
    assert "GPU" in cli.NO_GPU and "--cpu-check" in cli.NO_GPU
    assert out.stdout == ""


def test_a_gpu_hidden_by_minus_one_counts_as_none() -> None:
    out = program(CUDA_VISIBLE_DEVICES="-1")
    assert out.returncode == 2 and cli.NO_GPU in out.stderr


@pytest.mark.parametrize(("args", "message"), [
    (("--parts", "engine,rollout"), "--parts 'engine,rollout': use a comma-separated subset of engine, grpo"),
    (("--timeout", "0"), "argument --timeout: 0 is out of range: give a number greater than 0, e.g. 1200"),
    (("--timeout", "nan"), "argument --timeout: nan is not a finite number: give a number greater than 0"),
    (("--timeout", "inf"), "argument --timeout: inf is not a finite number: give a number greater than 0"),
    (("--out", ""), "--out is empty (an unset shell variable?)"),
    (("--seed", "-1"), "seed"),
    (("--certificate", "/nonexistent"), "--certificate /nonexistent not found: name a smoke certificate folder"),
    (("--certificate", "/dev/null"), "--certificate /dev/null is a character device, not a folder"),
    (("--cpu-check", "--certificate", "."), "--cpu-check runs none of the GPU parts a certificate records"),
    (("--seed", "99999999999999999999"), "out of range: give a whole number from 0 to 4294967295"),
])
def test_bad_inputs_are_one_line_and_exit_2(args: tuple[str, ...], message: str) -> None:
    out = program(*args, CUDA_VISIBLE_DEVICES="")
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and message in out.stderr, out.stderr


def test_keep_refuses_a_folder_that_exists(tmp_path: Path) -> None:
    out = program("--keep", str(tmp_path), CUDA_VISIBLE_DEVICES="")
    assert out.returncode == 2 and f"--keep {tmp_path} exists" in out.stderr
    assert list(tmp_path.iterdir()) == []


def test_the_dry_run_needs_no_torch_and_prints_the_trainers_command_and_tolerance() -> None:
    out = program("--dry-run", CUDA_VISIBLE_DEVICES="")
    assert out.returncode == 0, out.stderr
    assert "python -m verl.trainer.main_ppo model_engine=megatron" in out.stdout
    assert "actor_rollout_ref.actor.strategy=megatron" in out.stdout
    assert "attention_backend flash and fused" in out.stdout and "0.0625 × max|logit|" in out.stdout


def test_parts_parse_in_order_without_repeats() -> None:
    assert cli.parse_parts("grpo, engine,grpo") == ("grpo", "engine")
    assert cli.parse_parts(",".join(spec.PARTS)) == spec.PARTS


def test_a_missing_package_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    real = cli.importlib.util.find_spec
    monkeypatch.setattr(cli.importlib.util, "find_spec",
                        lambda name, *a: None if name.split(".")[0] in ("vllm", "verl") else real(name, *a))
    assert "vllm" in cli.missing_modules(("grpo",)) and "verl" in cli.missing_modules(())
    assert "vllm" not in cli.missing_modules(("engine",))
