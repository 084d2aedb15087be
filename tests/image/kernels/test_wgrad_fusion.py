"""megatron-core's gradient accumulation fusion in every image from the kernels layer up.

With ``gradient_accumulation_fusion`` on (Megatron-LM's, Megatron-Bridge's and verl's default) megatron-core imports
``fused_weight_gradient_mlp_cuda`` and stops without it. The image's label ``io.mcore-images.wgrad-fusion`` names
who provides it (apex where the stack has apex, this project's module over TE's GEMM where it has none): the module
imports, from that distribution; where megatron-core is installed too, its own layers accumulate through the module
to the exact sum (on the CPU, the contract; the kernel's numbers on a GPU are the GPU script's). Each promise fails
on a negative image that breaks it: the module uninstalled, the module made to overwrite main_grad instead of
adding.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.image.utils import docker, layers, negatives
from tests.image.utils.negatives import Negative

from mcore_images.catalogue import wgrad_fusion

PROVIDER = ("python -c \"import importlib.metadata as m, fused_weight_gradient_mlp_cuda; "
            "print((m.packages_distributions().get('fused_weight_gradient_mlp_cuda') or ['(none)'])[0])\"")
CHECK = "cd /tmp && timeout 600 python -m mcore_images.smoke.wgrad_fusion --cpu --json"


def provider_problems(host: Any, labels: dict[str, str]) -> list[str]:
    """The module imports, from the distribution the label names."""
    want = labels.get(wgrad_fusion.LABEL)
    if want not in (wgrad_fusion.OURS, wgrad_fusion.APEX):
        return [f"label {wgrad_fusion.LABEL}={want!r}: every kernels+ image names {wgrad_fusion.OURS} or "
                f"{wgrad_fusion.APEX}"]
    result = host.run(PROVIDER)
    if result.rc != 0:
        return [f"{wgrad_fusion.MODULE} does not import: {(result.stderr or result.stdout).strip()[-300:]}"]
    have = result.stdout.strip()
    return [] if have == want else [f"{wgrad_fusion.MODULE} comes from {have}, the label says {want}"]


def accumulation_problems(host: Any) -> list[str]:
    """megatron-core's ColumnParallelLinear and RowParallelLinear (and their sequence-parallel function) accumulate
    into main_grad through the module, within the stated bound of the exact sum."""
    result = host.run(CHECK)
    if result.rc not in (0, 1):
        return [f"the check could not run (exit {result.rc}): {(result.stderr or result.stdout).strip()[-400:]}"]
    doc = json.loads(result.stdout)
    problems = [f"{r['case']}: error {r['max_error_over_limit']:.3g} of its limit, {r['weight_grad']}"
                for r in doc["rows"] if not r["passed"]]
    kinds = {(r["layer"], r["sequence_parallel"]) for r in doc["rows"]}
    if kinds != {(layer, sp) for layer in ("column", "row") for sp in (False, True)}:
        problems.append(f"the check ran {sorted(kinds)}, not both layers with and without sequence parallelism")
    return problems


def _carried(image: docker.ImageInfo) -> None:
    if not layers.layer_applies("kernels", image.layer or ""):
        pytest.skip(f"{image.shown} is a {image.layer} image; the module comes with the kernels layer")


def _not_ours_with_megatron(image: docker.ImageInfo) -> str | None:
    """Why the accumulation check (and a defect in this project's module) does not apply: no megatron-core below
    the runtime layer, and apex's extension runs on CUDA only."""
    if not layers.layer_applies("runtime", image.layer or ""):
        return f"{image.shown} is a {image.layer} image: megatron-core comes with the runtime layer"
    have = image.labels.get(wgrad_fusion.LABEL)
    return None if have == wgrad_fusion.OURS else f"{wgrad_fusion.LABEL}={have}: apex's extension runs on CUDA only"


def _ours_with_megatron(image: docker.ImageInfo) -> None:
    reason = _not_ours_with_megatron(image)
    if reason:
        pytest.skip(reason)


def test_the_fusion_module_imports_from_its_labelled_provider(host: Any, image: docker.ImageInfo,
                                                               labels: dict[str, str]) -> None:
    _carried(image)
    problems = provider_problems(host, labels)
    assert not problems, "\n".join(problems)


def test_megatron_core_layers_accumulate_through_it(host: Any, image: docker.ImageInfo) -> None:
    _ours_with_megatron(image)
    problems = accumulation_problems(host)
    assert not problems, "\n".join(problems)


UNINSTALLED = Negative("wgrad-uninstalled", f"RUN pip uninstall -y {wgrad_fusion.OURS}\n",
                       skip=lambda u: _not_ours_with_megatron(u.image))
OVERWRITES = Negative(
    "wgrad-overwrites",
    # The GPU path's accumulate=True and the CPU path's add_ both become a copy: main_grad is overwritten.
    "RUN f=\"$(python -c 'import fused_weight_gradient_mlp_cuda as m; print(m.__file__)')\" && "
    "sed -i -e 's/main_grad.add_(/main_grad.copy_(/' -e 's/accumulate=True/accumulate=False/' \"$f\" && "
    "grep -q 'main_grad.copy_(' \"$f\"\n",
    skip=lambda u: _not_ours_with_megatron(u.image))


@pytest.mark.negatives(UNINSTALLED)
def test_negative_without_the_module_the_provider_check_fails(negative_images: negatives.NegativeImages) -> None:
    """With this project's module uninstalled, the provider check says the module does not import."""
    output = negatives.fails_only(negative_images.ref(UNINSTALLED),
                                  "test_the_fusion_module_imports_from_its_labelled_provider",
                                  test_the_fusion_module_imports_from_its_labelled_provider)
    assert f"{wgrad_fusion.MODULE} does not import" in output, output[-3000:]


@pytest.mark.negatives(OVERWRITES)
def test_negative_overwriting_main_grad_the_accumulation_check_fails(
        negative_images: negatives.NegativeImages) -> None:
    """With the module overwriting main_grad instead of adding to it, megatron-core's layers miss the exact sum."""
    output = negatives.fails_only(negative_images.ref(OVERWRITES), "test_megatron_core_layers_accumulate_through_it",
                                  test_megatron_core_layers_accumulate_through_it)
    assert "of its limit" in output, output[-3000:]  # the sums are wrong, not the check unable to run
