"""examples/verl-grpo/grpo-megatron.sh asks the image's doctor which of verl's defaults run, with stand-ins for the
doctor (its exit code: 0 passed, 1 failed, 2 could not run) and for verl's trainer (python3, recording its
arguments). The real doctor and verl answer in tests/image/app/test_verl_example.py."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from mcore_images.catalogue import wgrad_fusion
from tests.unit.conftest import ROOT

SCRIPT = ROOT / "examples" / "verl-grpo" / "grpo-megatron.sh"
ATTENTION = "actor_rollout_ref.actor.megatron.override_transformer_config.attention_backend"


def launch(tmp_path: Path, doctor: str, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """The script with a doctor that runs ``doctor`` (a shell snippet given the doctor's arguments as $*)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "mcore-images").write_text(f"#!/usr/bin/env bash\necho \"$*\" >> {tmp_path}/doctor.log\n{doctor}\n")
    (bin_dir / "python3").write_text(f"#!/usr/bin/env bash\nprintf '%s\\n' \"$@\" > {tmp_path}/trainer.args\n")
    for tool in ("mcore-images", "python3"):
        (bin_dir / tool).chmod(0o755)
    done = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, check=False, timeout=60,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin", **env})
    trainer = tmp_path / "trainer.args"
    return done, trainer.read_text().splitlines() if trainer.exists() else []


def test_verls_flash_where_the_doctor_passes_it(tmp_path: Path) -> None:
    done, args = launch(tmp_path, "exit 0")
    assert done.returncode == 0, done.stderr
    assert f"{ATTENTION}=flash" in args and not [a for a in args if "gradient_accumulation_fusion" in a]
    assert (tmp_path / "doctor.log").read_text().splitlines() == [
        "doctor --only te.attention --attention-backend flash", "doctor --only wgrad.fusion"]


def test_fused_and_the_fusion_off_where_the_doctor_says_so(tmp_path: Path) -> None:
    """Before: the example set neither, so on today's images verl's flash found no backend at the first forward."""
    done, args = launch(tmp_path, '[[ " $* " == *" flash "* || " $* " == *" wgrad.fusion "* ]] && exit 1; exit 0')
    assert done.returncode == 0, done.stderr
    assert f"{ATTENTION}=fused" in args
    assert "critic.megatron.override_transformer_config.attention_backend=fused" in args
    assert wgrad_fusion.OFF_FLAGS["verl"] in args  # the one verl's Hydra takes (the key is not in its config)
    assert "attention_backend=fused: the image's doctor (te.attention) says it runs here" in done.stderr
    assert "gradient accumulation fusion off: the image's doctor (wgrad.fusion) says it cannot run here" in done.stderr
    assert args.index(wgrad_fusion.OFF_FLAGS["verl"]) > args.index("algorithm.adv_estimator=grpo")


def test_given_settings_skip_the_doctor(tmp_path: Path) -> None:
    done, args = launch(tmp_path, "exit 2", ATTENTION_BACKEND="unfused", WGRAD_FUSION="on")
    assert done.returncode == 0, done.stderr
    assert f"{ATTENTION}=unfused" in args and not (tmp_path / "doctor.log").exists()


@pytest.mark.parametrize(("doctor", "env", "said"), [
    ("exit 2", {}, "mcore-images doctor --only te.attention could not run (exit 2)"),
    ("exit 1", {}, "the image's doctor finds no attention backend TE can run here"),
    ("exit 0", {"ATTENTION_BACKEND": "flash-attn"}, "ATTENTION_BACKEND=flash-attn: give one of"),
    ("exit 0", {"WGRAD_FUSION": "yes"}, "WGRAD_FUSION=yes: give on or off"),
])
def test_what_cannot_be_decided_is_one_line_and_nothing_starts(tmp_path: Path, doctor: str, env: dict, said: str
                                                               ) -> None:
    done, args = launch(tmp_path, doctor, **env)
    assert done.returncode == 2 and said in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert args == []


def test_without_a_doctor_the_settings_are_asked_for(tmp_path: Path) -> None:
    done = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, check=False, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root")})
    assert done.returncode == 2 and "set ATTENTION_BACKEND (e.g. fused) and WGRAD_FUSION" in done.stderr
