"""Every compatibility rule: the real stacks pass, and each bad input breaks exactly its rule."""

from __future__ import annotations

import dataclasses

import pytest

from mcore_images.catalogue import gpu_archs
from mcore_images.catalogue.stacks import Stack
from mcore_images.resolve import rules
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
    ("mbridge-mcore", "debian-verl", {"mcore": "0.17.0", "python": "3.12"}),
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
    ("cudnn-torch", "debian", {"cudnn": "9.18.0.1"}),
    ("cudnn-torch", "debian", {"cudnn": "base"}),
    ("cudnn-torch", "debian", {"cudnn": "none"}),
    ("cudnn-torch", "debian", {"torch": "2.10.0"}),
    ("cudnn-torch", "ngc", {"cudnn": "9.19.0.56"}),
    ("verl-requirements", "debian-verl", {"vllm": "0.14.0", "torch": "2.9.1"}),
    ("tag-length", "debian", {"name": "d" * 100}),
    ("cuda-archs", "debian-verl", {"cuda_archs": "90;103"}),
    ("cuda-archs", "debian", {"cuda_archs": "90;101"}),
    ("cuda-archs", "debian", {"cuda_archs": "90;95"}),
    ("te-archs", "debian-verl", {"te": "1.13.0", "cuda_archs": "90;100"}),
    ("te-flash-attn", "debian-verl", {"te": "2.6.0", "flash_attn": "4.0.0b36",
                                      "constraints": ("nvidia-cutlass-dsl==4.8.1", "transformers<5")}),
    ("flash-attn-cutlass", "debian", {"flash_attn": "4.0.0b37", "constraints": ("transformers<5",)}),
    ("flash-attn-cutlass", "debian", {"flash_attn": "4.0.0b11"}),  # TE's own install hint, on cutlass-dsl 4.8.1
    ("flash-attn-cutlass", "debian", {"flash_attn": "4.0.0b24"}),
    ("flash-attn-archs", "debian-verl", {"cuda_archs": "80;90;100", "flash_attn": "4.0.0b37"}),
    # TE 2.17.1 with cuDNN 9.19.0.56: its fused attention raised on an H200 (fused_attention.MEASURED), the cuda
    # stack's recipe of 50d7c45
    ("te-fused-attention", "cuda", {"te": "2.17.1"}),
    # the pair measured wrong on an H200 under TE 2.20.2 (flash_attention.MEASURED), shipped where sm_90 is claimed
    ("flash-attn-measured", "debian", {"flash_attn": "4.0.0b36"}),
    ("flash-attn-measured", "debian-mcore019", {"flash_attn": "4.0.0b36", "cuda_archs": "90a"}),
    ("verl-requirements", "cuda", {"substitutes": {}}),  # verl 0.9.1 names megatron-bridge 0.5.2: not on PyPI
    ("verl-requirements", "ngc", {"substitutes": {"megatron-bridge": "not on PyPI"}}),  # and NGC's own torch
    # a substitute is for what no stack can follow, not for a release PyPI has
    ("verl-requirements", "debian-verl", {"vllm": "0.14.0", "torch": "2.9.1", "substitutes": {"vllm": "newer"}}),
]


@pytest.mark.parametrize(("rule_id", "stack_name", "changes"), BAD, ids=[f"{r}-{i}" for i, (r, _, _) in enumerate(BAD)])
def test_bad_input_breaks_its_rule(stacks: dict[str, Stack], rule_id: str, stack_name: str,
                                   changes: dict) -> None:
    violations = rules.check(variant(stacks[stack_name], **changes))
    assert rule_id in {v.rule for v in violations}, violations
    line = str(next(v for v in violations if v.rule == rule_id))
    assert "\n" not in line and "fix:" in line


@pytest.mark.parametrize(("stack_name", "entry", "said"), [
    ("ngc", "vllm", "substitutes names 'vllm', which stands in for nothing: the stack carries no vLLM"),
    ("cuda", "megatron-brige", "substitutes names 'megatron-brige', which stands in for nothing: no component of the "
     "catalogue is 'megatron-brige'"),
    ("cuda", "torch", "substitutes names 'torch', which stands in for nothing: verl 0.9.1 admits torch 2.11.0, or PyPI "
     "has the release it names"),
    ("debian", "torch", "substitutes names torch, but the stack has no verl, whose requirements they stand in for"),
])
def test_a_substitute_that_stands_in_for_nothing_breaks_the_verl_rule(stacks: dict[str, Stack], stack_name: str,
                                                                      entry: str, said: str) -> None:
    """Before: a substitutes entry naming a package the stack does not have passed plan, validate and build."""
    stack = stacks[stack_name]
    assert "verl-requirements" not in {v.rule for v in rules.check(stack)}
    broken = [v for v in rules.check(variant(stack, substitutes={**stack.substitutes, entry: "why"}))
              if v.rule == "verl-requirements"]
    assert [v.message for v in broken] == [said] and "fix: drop" in str(broken[0])


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
    from mcore_images.resolve import engines

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


def cudnn_lines(stack: Stack) -> list[str]:
    return [str(v) for v in rules.check(stack) if v.rule == "cudnn-torch"]


@pytest.mark.parametrize("name", ["debian", "debian-verl"])
def test_a_cudnn_pin_other_than_torchs_requirement_is_refused_naming_it(stacks: dict[str, Stack], name: str) -> None:
    # Before: no stack pinned cuDNN; torch's nvidia-cudnn-cuXX came along unseen, read only by te-cudnn from the lock.
    from mcore_images.resolve import engines

    stack = stacks[name]
    wanted = engines.torch_cudnn(stack)
    assert wanted and wanted.endswith(f"=={stack.cudnn}") and cudnn_lines(stack) == []
    assert wanted.startswith(f"nvidia-cudnn-cu{stack.cuda.split('.')[0]}==")
    assert cudnn_lines(variant(stack, cudnn="9.18.0.1")) == [
        f"[cudnn-torch] stack '{name}': torch {stack.torch} requires {wanted} (the cuDNN it loads), the stack pins "
        f"cuDNN 9.18.0.1; fix: set cudnn to '{stack.cudnn}'"]


def test_cudnn_comes_with_torch_from_the_base_image(stacks: dict[str, Stack]) -> None:
    assert stacks["ngc"].cudnn == "base" and cudnn_lines(stacks["ngc"]) == []
    lines = cudnn_lines(variant(stacks["ngc"], cudnn="9.19.0.56"))
    assert len(lines) == 1 and "torch comes with the base image" in lines[0] and "set cudnn to 'base'" in lines[0]


def test_an_unrecorded_torch_names_the_command_that_reads_its_cudnn(stacks: dict[str, Stack]) -> None:
    lines = cudnn_lines(variant(stacks["debian"], torch="2.10.0"))
    assert lines == ["[cudnn-torch] stack 'debian': the cuDNN requirement of torch 2.10.0 is not recorded in "
                     "env/engines.json; fix: run `mcore-images lock --stack debian`, which reads it from the index"]


def test_te_cudnn_judges_the_stacks_cudnn_pin(stacks: dict[str, Stack]) -> None:
    # Before, te-cudnn re-read torch's cuDNN from the stack's base lock: a stack without committed locks (a new one,
    # or an override) passed unjudged, and the lock's cuDNN stood in for the pin. Now the pin is the one fact.
    renamed = variant(stacks["debian-verl"], name="verl-next", te="2.20.2")
    assert "te-cudnn" in {v.rule for v in rules.check(renamed)}
    older = variant(stacks["debian"], cudnn="9.11.0.98")  # debian's base lock holds a newer cuDNN
    line = next(str(v) for v in rules.check(older) if v.rule == "te-cudnn")
    assert "compiles only against cuDNN >= 9.12 headers, and torch 2.11.0 brings cuDNN 9.11.0.98" in line
@pytest.mark.parametrize(("te", "archs", "found"), [
    ("2.0.0", "90;100;103;120", None), ("1.13.0", "80;90", None), ("none", "100", None),
    ("1.13.0", "90;100a", "TE 1.13.0 carries no code for sm_100 (B200/GB200); TE builds it from 2.0"),
    ("1.13.0", "120", "TE 1.13.0 carries no code for sm_120"),
])
def test_te_archs_are_the_ones_the_te_release_carries(stacks: dict[str, Stack], te: str, archs: str,
                                                     found: str | None) -> None:
    stack = variant(stacks["debian-verl"], te=te, te_source="none" if te == "none" else "build", cuda_archs=archs)
    lines = [str(v) for v in rules.check(stack) if v.rule == "te-archs"]
    assert (lines == []) if found is None else (len(lines) == 1 and found in lines[0]), lines


def test_release_stacks_serve_hopper_and_blackwell(stacks: dict[str, Stack]) -> None:
    for stack in (s for s in stacks.values() if "release" in s.groups):
        assert {"90", "100", "103", "120"} <= set(gpu_archs.parse(stack.cuda_archs)), stack.name


def test_flash_attention_4_pairs_with_the_cutlass_dsl_its_code_needs(stacks: dict[str, Stack]) -> None:
    """b11 runs on cutlass-dsl < 4.6 (cute.core.ThrMma), b36 on 4.8.1 (measured on an H200 under TE 2.20.2)."""
    def broken(fa4: str, cutlass: str) -> list[str]:
        stack = variant(stacks["debian"], flash_attn=fa4, constraints=(f"nvidia-cutlass-dsl=={cutlass}",
                                                                        "transformers<5"))
        return [str(v) for v in rules.check(stack) if v.rule == "flash-attn-cutlass"]

    assert broken("4.0.0b11", "4.5.3") == [] and broken("4.0.0b36", "4.8.1") == []
    assert "cute.core.ThrMma" in broken("4.0.0b11", "4.8.1")[0]
    assert "4.6.2 or newer" in broken("4.0.0b36", "4.5.3")[0]


def test_te_2_20_serves_flash_attention_4_from_hopper_only(stacks: dict[str, Stack]) -> None:
    """TE 2.20 leaves sm80 to another backend, so an sm80 stack with FlashAttention 4 still trains there."""
    stack = variant(stacks["debian"], flash_attn="4.0.0b37", cuda_archs="80;90;100")
    assert not [v for v in rules.check(stack) if v.rule == "flash-attn-archs"]


def _measured(stack: Stack) -> tuple[list[str], list[str]]:
    """The stack's flash-attn-measured refusals and its flash-attn-unmeasured notes."""
    return ([str(v) for v in rules.check(stack) if v.rule == "flash-attn-measured"],
            [n for n in rules.notes(stack) if n.startswith("[flash-attn-unmeasured]")])


@pytest.mark.parametrize("changes", [
    {"flash_attn": "4.0.0b36"},  # measured 2026-12-06 under TE 2.20.2 on an H200: every case wrong through TE
    {"flash_attn": "4.0.0b40"},
    {"flash_attn": "4.0.0b36", "te": "2.20.5"},  # a later patch of the series, not measured: the series' verdict
    {"flash_attn": "4.0.0b37"},  # FlashAttention 4 was right called directly: the fault is TE's, with every pair
    {"flash_attn": "4.0.0b36", "constraints": ("nvidia-cutlass-dsl==4.8.0", "transformers<5")},
])
def test_flash_attention_4_under_te_2_20_on_sm_90_is_refused_naming_the_measurement(
        stacks: dict[str, Stack], changes: dict) -> None:
    refused, _ = _measured(variant(stacks["debian"], **changes))
    assert len(refused) == 1, refused
    line = refused[0]
    assert "sm_90" in line and "2026-12-06" in line and "docs/measurements/2026-12-06-attention-pairs" in line
    assert "TE 2.20.2's flash backend" in line
    assert "FlashAttention 4 called directly on the same inputs was right" in line
    assert "not FlashAttention 4" in line and "flash_attn='none'" in line and "attention_backend=fused" in line


@pytest.mark.parametrize("changes", [
    {"flash_attn": "4.0.0b36", "te": "2.16.0", "te_source": "build"},  # right called directly; TE 2.16 not measured
    {"flash_attn": "4.0.0b36", "te": "2.21.0"},  # the next TE series: the candidate to measure
    {"flash_attn": "4.0.0b36", "cuda_archs": "100"},  # measured on sm_90 only
])
def test_flash_attention_4_under_a_te_release_with_no_measurement_is_a_plan_note_not_a_refusal(
        stacks: dict[str, Stack], changes: dict) -> None:
    from mcore_images.resolve import plan

    stack = variant(stacks["debian"], **changes)
    refused, told = _measured(stack)
    assert refused == [] and len(told) == 1, (refused, told)
    assert "no measurement" in told[0] and "bash .ci/gpu/attention-pairs.sh prepare" in told[0]
    made = plan.make_plan([stack], every=stacks)[0]
    assert not [v for v in made.violations if v.rule.startswith("flash-attn")] and told[0] in made.notes
    assert f"  NOTE {told[0]}" in plan.render_text([made]).splitlines()
    assert made.to_dict()["notes"] == made.notes


def test_the_note_names_the_command_that_measures_the_te_release(stacks: dict[str, Stack]) -> None:
    _, told = _measured(variant(stacks["debian"], flash_attn="4.0.0b40", te="2.21.0", cuda_archs="90"))
    assert told[0].endswith('PAIR_SET="te2.21.0-b36-c4.8.1 te2.21.0-b40-c4.8.1" bash .ci/gpu/attention-pairs.sh '
                            "prepare"), told


def test_flash_attention_4_called_directly_is_not_called_wrong(stacks: dict[str, Stack]) -> None:
    """Every pair measured: right called directly; the refusal blames TE's integration; under a TE series that was not
    measured wrong the same pair is not refused."""
    from mcore_images.catalogue import flash_attention

    for m in flash_attention.MEASURED:
        judged = flash_attention.judge(m.fa4, m.cutlass, None, m.sm)
        assert judged.verdict == flash_attention.RIGHT and "called directly was measured right" in judged.why
        assert m.direct is not None and m.direct.verdict == flash_attention.RIGHT
        other = variant(stacks["debian"], flash_attn=m.fa4, te="2.16.0", te_source="build")
        assert _measured(other)[0] == []
    refused, _ = _measured(variant(stacks["debian"], flash_attn="4.0.0b36"))
    assert "the fault is TE 2.20's integration, not FlashAttention 4" in refused[0]


def _half(wrong: int) -> object:
    from mcore_images.catalogue import flash_attention

    return flash_attention.Half(4, wrong, (3.9, 3.9) if wrong else (0.008, 0.009))


def test_a_later_patch_measured_right_takes_over_from_its_release(stacks: dict[str, Stack],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from mcore_images.catalogue import flash_attention

    fixed = dataclasses.replace(flash_attention.MEASURED[0], te="2.20.4", through_te=_half(0))
    monkeypatch.setattr(flash_attention, "MEASURED", (*flash_attention.MEASURED, fixed))
    refused, told = _measured(variant(stacks["debian"], flash_attn="4.0.0b36", te="2.20.4"))
    assert refused == [] and "unchecked against a reference on sm_100:" in told[0]  # right on sm_90
    assert _measured(variant(stacks["debian"], flash_attn="4.0.0b36", te="2.20.7"))[0] == []
    assert _measured(variant(stacks["debian"], flash_attn="4.0.0b36"))[0]  # 2.20.2 stays measured wrong
    # measured right with b36 only: another pair under 2.20.4 is a note, not passed and not refused
    refused, told = _measured(variant(stacks["debian"], flash_attn="4.0.0b40", te="2.20.4", cuda_archs="90"))
    assert refused == [] and "other FlashAttention 4 pairs only" in told[0]


def test_a_pair_wrong_called_directly_is_refused_under_every_te(stacks: dict[str, Stack],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from mcore_images.catalogue import flash_attention

    broken = dataclasses.replace(flash_attention.MEASURED[0], direct=_half(4))
    monkeypatch.setattr(flash_attention, "MEASURED", (broken,))
    refused, _ = _measured(variant(stacks["debian"], flash_attn="4.0.0b36", te="2.16.0", te_source="build"))
    assert refused and "was measured wrong on sm_90 called directly" in refused[0]
    assert _measured(variant(stacks["debian"], flash_attn="4.0.0b40", te="2.16.0", te_source="build"))[0] == []


def test_a_pair_wrong_through_te_and_not_called_directly_is_refused_under_every_te(
        stacks: dict[str, Stack], monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the direct half the fault may be the pair's own: it holds under every TE, for that pair alone."""
    from mcore_images.catalogue import flash_attention

    unsplit = dataclasses.replace(flash_attention.MEASURED[0], direct=None)
    monkeypatch.setattr(flash_attention, "MEASURED", (unsplit,))
    assert _measured(variant(stacks["debian"], flash_attn="4.0.0b36", te="2.16.0", te_source="build"))[0]
    assert _measured(variant(stacks["debian"], flash_attn="4.0.0b37"))[0] == []  # TE not blamed: other pairs unjudged


def test_verl_0_9_needs_a_bridge_and_on_python_3_11_has_none(stacks: dict[str, Stack]) -> None:
    """verl 0.9's Megatron engine asserts use_mbridge. On Python 3.11 (debian-verl's) Megatron-Bridge does not
    install and mbridge 0.15.1, the newest, cannot read transformers 5's configs, which verl 0.9.1 requires: no
    stack of verl 0.9.1 on Python 3.11 passes the rules."""
    bare = variant(stacks["cuda"], megatron_bridge="none")
    assert [v.rule for v in rules.check(bare) if v.rule == "verl-bridge"] == ["verl-bridge"]
    assert not [v for v in rules.check(stacks["cuda"]) if v.rule == "verl-bridge"]
    on_311 = variant(stacks["debian-verl"], verl="0.9.1", constraints=("packaging<26",))
    assert "mbridge-transformers" in {v.rule for v in rules.check(on_311)}
    with_cap = variant(stacks["debian-verl"], verl="0.9.1")  # transformers<5 keeps mbridge reading its configs
    assert any(v.rule == "verl-requirements" and "transformers" in v.message for v in rules.check(with_cap))


def test_a_te_and_cudnn_pair_with_no_fused_attention_measurement_on_sm90_is_a_note_naming_its_neighbours(
        stacks: dict[str, Stack]) -> None:
    """TE 2.19.1 with the cuda stack's cuDNN 9.19.0.56 is unmeasured: a note (never a refusal) that names what was
    measured with that cuDNN; the stack's own TE 2.18.0 and 2.20.2 were measured right (no note); a stack not
    serving sm_90 gets none."""
    cuda = stacks["cuda"]
    assert not [n for n in rules.notes(cuda) if n.startswith("[te-fused-attention")]
    unmeasured = variant(cuda, te="2.19.1")
    found = [n for n in rules.notes(unmeasured) if n.startswith("[te-fused-attention-unmeasured]")]
    assert found == ["[te-fused-attention-unmeasured] stack 'cuda': TE 2.19.1 × cuDNN 9.19.0.56: fused attention "
                     "unchecked on sm_90 (with this cuDNN: TE 2.17.1 raises, 2.20.2 right, 2.18.0 right); measure: "
                     "docs/verl-step.md, 'On a GPU' (the replica's smoke runs the attention check)"]
    assert not rules.check(cuda)
    measured = variant(cuda, te="2.20.2")
    assert not [n for n in rules.notes(measured) if n.startswith("[te-fused-attention-unmeasured]")]
    elsewhere = variant(unmeasured, cuda_archs="100;120")
    assert not [n for n in rules.notes(elsewhere) if n.startswith("[te-fused-attention-unmeasured]")]
    assert not [n for n in rules.notes(stacks["ngc"]) if n.startswith("[te-fused-attention")]  # NGC's own cuDNN


def test_the_fused_attention_refusal_names_the_measurement_and_a_release_measured_right(
        stacks: dict[str, Stack]) -> None:
    problems = rules.check(variant(stacks["cuda"], te="2.17.1"))
    (problem, fix), = [(v.message, v.fix) for v in problems if v.rule == "te-fused-attention"]
    assert "raises on sm_90" in problem and "docs/measurements/2026-12-06-cuda-replica/attention.json" in problem
    assert "CUDNN_ATTR_OPERATION_RESHAPE_MODE" in problem and "2.20.2" in fix
