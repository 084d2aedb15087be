"""docs/megatron-lm.md's torchvision section says the debian stacks' runtime images lack torchvision: held to their
locks, so that a stack that gains it makes the page say so."""

from __future__ import annotations

import re
import subprocess

from mcore_images.catalogue.stacks import load_stacks
from tests.unit.conftest import ROOT


def test_the_debian_runtime_images_lack_torchvision_as_the_page_says() -> None:
    page = (ROOT / "docs" / "megatron-lm.md").read_text()
    assert "## torchvision" in page and "the debian stacks' runtime\nimages do not carry" in page
    for stack in load_stacks().values():
        if stack.flavor != "debian":
            continue
        layers = ("base", "kernels", "runtime")
        held = [f"{stack.layer_stack(layer)}/{layer}.txt" for layer in layers
                if (ROOT / "env" / "locks" / stack.layer_stack(layer) / f"{layer}.txt").is_file()
                and re.search(r"^torchvision==", (ROOT / "env" / "locks" / stack.layer_stack(layer) /
                                                  f"{layer}.txt").read_text(), re.M)]
        assert not held, f"{stack.name}'s runtime image now has torchvision ({held}): update docs/megatron-lm.md"


def _defaults_block() -> str:
    page = (ROOT / "docs" / "megatron-lm.md").read_text()
    after = page[page.index("<!-- megatron-lm-defaults"):]
    return after[after.index("```bash\n") + len("```bash\n"): after.index("\n```", after.index("```bash"))]


def test_the_defaults_command_turns_nothing_off_and_is_what_the_gpu_step_runs() -> None:
    """The page's Megatron-LM defaults block leaves gradient accumulation fusion and the attention backend at
    Megatron-LM's defaults, and .ci/gpu/replica-stack.sh's megatron-lm step runs that very block (it reads it from
    the page: one command, written once)."""
    block = _defaults_block()
    assert block.startswith('torchrun --nproc-per-node 1 "$MEGATRON_LM_CHECKOUT/pretrain_gpt.py"')
    for flag in ("--no-gradient-accumulation-fusion", "--attention-backend", "--transformer-impl", "--no-"):
        assert flag not in block, f"the defaults command sets {flag}"
    assert "--mock-data" in block and "--train-iters" in block
    script = ROOT / ".ci" / "gpu" / "replica-stack.sh"
    done = subprocess.run(["bash", "-c", f'source <(sed -n "/^megatron_lm_command()/,/^}}/p" {script}); '
                          f'ROOT={ROOT}; megatron_lm_command'], capture_output=True, text=True, check=True)
    assert done.stdout.rstrip("\n") == block
