"""Every compatibility rule: the real stacks pass, and each bad input breaks exactly its rule."""

from __future__ import annotations

import pytest

from mcore_images import gpu_archs, rules
from mcore_images.stacks import Stack
from tests.unit.conftest import variant


def test_every_stack_in_env_passes(stacks: dict[str, Stack]) -> None:
    for stack in stacks.values():
        assert rules.check(stack) == [], stack.name


BAD = [
    ("python-for-mcore", "debian", {"mcore": "0.19.2", "mbridge": "none", "python": "3.11"}),
    ("torch-min", "debian", {"torch": "2.5.1"}),
    ("mcore-min", "debian", {"mcore": "0.12.3"}),
    ("mcore-min", "debian", {"mcore": "none"}),
    ("mbridge-mcore", "debian", {"mcore": "0.19.2"}),
    ("mbridge-mcore", "verl-mcore013", {"mcore": "0.17.0", "python": "3.12"}),
    ("te-cuda", "debian", {"te": "2.6.0"}),
    ("te-cuda", "debian", {"cuda": "11.8"}),
    ("torch-cuda", "debian", {"cuda": "12.8"}),
    ("torch-cuda", "debian", {"torch": "2.9.1"}),
    ("verl-python", "debian", {"verl": "0.9.1"}),
    ("verl-python", "debian", {"megatron_bridge": "0.6.2"}),
    ("apex-base", "cuda", {"apex": "base"}),
    ("release-pinned", "cuda", {"base_digest": ""}),
    ("flavor", "debian", {"debian_suite": ""}),
    ("sources", "debian", {"torch_source": "base"}),
    ("sources", "debian", {"te_source": "none"}),
    ("mbridge-transformers", "debian", {"constraints": ()}),
    ("size-budget", "debian", {"size_budget_gb": {"base": 1.0}}),
    ("te-torch", "debian-verl", {"te": "2.19.0"}),
    ("te-cudnn", "debian-verl", {"te": "2.20.2"}),
    ("verl-requirements", "debian-verl", {"vllm": "0.14.0", "torch": "2.9.1"}),
    ("tag-length", "debian", {"name": "d" * 100}),
    ("cuda-archs", "debian-verl", {"cuda_archs": "90;103"}),
    ("cuda-archs", "debian", {"cuda_archs": "90;101"}),
    ("cuda-archs", "debian", {"cuda_archs": "90;95"}),
    ("te-archs", "verl-mcore013", {"te": "1.13.0", "cuda_archs": "90;100"}),
]


@pytest.mark.parametrize(("rule_id", "stack_name", "changes"), BAD, ids=[f"{r}-{i}" for i, (r, _, _) in enumerate(BAD)])
def test_bad_input_breaks_its_rule(stacks: dict[str, Stack], rule_id: str, stack_name: str,
                                   changes: dict) -> None:
    violations = rules.check(variant(stacks[stack_name], **changes))
    assert rule_id in {v.rule for v in violations}, violations
    line = str(next(v for v in violations if v.rule == rule_id))
    assert "\n" not in line and "fix:" in line


def test_mbridge_boundary_is_measured_release(stacks: dict[str, Stack]) -> None:
    ok = variant(stacks["debian"], mcore="0.16.1", mbridge="0.15.1")
    assert not [v for v in rules.check(ok) if v.rule == "mbridge-mcore"]


@pytest.mark.parametrize("constraint", ["transformers<5", "transformers<5.0", "transformers<=4.57.6",
                                        "transformers>=4.40,<5", "transformers==4.*"])
def test_any_spelling_of_an_upper_bound_below_5_satisfies_the_transformers_rule(
        stacks: dict[str, Stack], constraint: str) -> None:
    stack = variant(stacks["debian"], constraints=(constraint,))
    assert "mbridge-transformers" not in {v.rule for v in rules.check(stack)}


@pytest.mark.parametrize("constraint", ["transformers<6", "transformers!=5.0.0", "transformers>4", "torch<5"])
def test_a_constraint_that_admits_transformers_5_breaks_the_rule(stacks: dict[str, Stack], constraint: str) -> None:
    stack = variant(stacks["debian"], constraints=(constraint,))
    assert "mbridge-transformers" in {v.rule for v in rules.check(stack)}


def test_bridge_mcore_refuses_a_bridge_whose_imports_the_core_lacks(stacks: dict[str, Stack],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from mcore_images import engines

    monkeypatch.setattr(engines, "bridge_missing", lambda s, root=None: ["megatron.core._slurm_utils"])
    line = str(next(v for v in rules.check(stacks["cuda"]) if v.rule == "bridge-mcore"))
    assert "imports 1 names megatron-core 0.19.2 lacks (e.g. megatron.core._slurm_utils)" in line and "fix:" in line
    monkeypatch.setattr(engines, "bridge_missing", lambda s, root=None: None)
    line = str(next(v for v in rules.check(stacks["cuda"]) if v.rule == "bridge-mcore"))
    assert "not recorded" in line and "mcore-images lock --stack cuda" in line


@pytest.mark.parametrize(("cuda", "archs", "found"), [
    ("12.8", "80;90;100;120", None), ("12.8", "100a", None), ("12.9", "90;100;103", None),
    ("13.0", "90;100;103;110;120", None), ("12.8", "90;103", "CUDA 12.8 cannot compile sm_103"),
    ("13.0", "101", "CUDA 13.0 no longer compiles sm_101"), ("13.0", "70", "'70', which is not a GPU architecture"),
])
def test_cuda_archs_are_the_ones_the_stacks_cuda_compiles(stacks: dict[str, Stack], cuda: str, archs: str,
                                                         found: str | None) -> None:
    lines = [str(v) for v in rules.check(variant(stacks["debian"], cuda=cuda, cuda_archs=archs))
             if v.rule == "cuda-archs"]
    assert (lines == []) if found is None else (len(lines) == 1 and found in lines[0]), lines


@pytest.mark.parametrize(("te", "archs", "found"), [
    ("2.0.0", "90;100;103;120", None), ("1.13.0", "80;90", None), ("none", "100", None),
    ("1.13.0", "90;100a", "TE 1.13.0 carries no code for sm_100 (B200/GB200); TE builds it from 2.0"),
    ("1.13.0", "120", "TE 1.13.0 carries no code for sm_120"),
])
def test_te_archs_are_the_ones_the_te_release_carries(stacks: dict[str, Stack], te: str, archs: str,
                                                     found: str | None) -> None:
    stack = variant(stacks["verl-mcore013"], te=te, te_source="none" if te == "none" else "build", cuda_archs=archs)
    lines = [str(v) for v in rules.check(stack) if v.rule == "te-archs"]
    assert (lines == []) if found is None else (len(lines) == 1 and found in lines[0]), lines


def test_release_stacks_serve_hopper_and_blackwell(stacks: dict[str, Stack]) -> None:
    for stack in (s for s in stacks.values() if "release" in s.groups):
        assert {"90", "100", "103", "120"} <= set(gpu_archs.parse(stack.cuda_archs)), stack.name
