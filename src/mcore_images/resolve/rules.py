"""Compatibility rules, checked by `mcore-images plan` (and `build`) before any build starts.

Each rule has an id, and each violation is one line that names the problem and the fix.
The thresholds are facts about upstream packages; the source of each is given beside it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from mcore_images.catalogue import components, flash_attention, fused_attention, gpu_archs, platforms, tags
from mcore_images.catalogue.components import FROM_BASE
from mcore_images.catalogue.stacks import NONE, Stack, canonical
from mcore_images.catalogue.upstream import (
    MBRIDGE_OLD_NAMES,
    MCORE_NEW_FLOOR,
    MCORE_PYTHON,
    MCORE_TORCH,
    TE_FIRST_CU13,
    TE_MIN_CUDNN,
    TE_MIN_TORCH,
    TORCH_PYPI_CUDA,
    VERL_ENGINE_BRIDGE,
    VERL_MCORE,
    VERL_PYTHON_BELOW,
)
from mcore_images.catalogue.versions import (
    InvalidVersion,
    Requirement,
    SpecifierSet,
    Version,
    after,
    at_least,
    bounded_below,
    can_meet,
    major_minor,
)
from mcore_images.resolve import engines, pypi


@dataclass(frozen=True)
class Violation:
    rule: str
    stack: str
    message: str
    fix: str

    def __str__(self) -> str:
        return f"[{self.rule}] stack '{self.stack}': {self.message}; fix: {self.fix}"


Rule = Callable[[Stack], Iterator[tuple[str, str]]]
RULES: dict[str, Rule] = {}
DESCRIPTIONS: dict[str, str] = {}
"""What each rule holds, in one sentence: docs/rules.md is generated from these."""


def rule(rule_id: str, description: str) -> Callable[[Rule], Rule]:
    def register(func: Rule) -> Rule:
        RULES[rule_id] = func
        DESCRIPTIONS[rule_id] = description
        return func
    return register


@rule("flavor", 'a debian stack names its Debian suite, and only a debian stack does')
def _flavor(s: Stack) -> Iterator[tuple[str, str]]:
    # The flavor's name is checked by env/stacks.schema.json; here, what it implies.
    if s.flavor == "debian" and not s.debian_suite:
        yield "the debian flavor needs debian_suite", "set debian_suite, e.g. 'trixie'"
    if s.flavor != "debian" and s.debian_suite:
        yield f"debian_suite is set on a {s.flavor} stack", "set debian_suite to ''"


@rule("sources", "torch comes from the base image only on NGC; TE's pin and TE's source are both 'none' or neither")
def _sources(s: Stack) -> Iterator[tuple[str, str]]:
    if s.torch_source == "base" and s.flavor != "ngc":
        yield "only NGC images provide torch", "set torch_source='pypi'"
    if (s.te == NONE) != (s.te_source == NONE):
        yield f"te='{s.te}' with te_source='{s.te_source}'", "use te='none' together with te_source='none'"


@rule("release-pinned",
      'the release group takes only a registry base pinned by digest (not a tag alone, not a locally built '
      'one)')
def _release_pinned(s: Stack) -> Iterator[tuple[str, str]]:
    # A released image must name a base anyone can pull and check: a registry image by its digest. A base made
    # on the build machine (debootstrap) has no digest a user can fetch.
    if "release" not in s.groups:
        return
    if s.flavor == "debian":
        yield (f"the release group refuses a locally built base ({s.base_image}, debootstrap): nobody can pull or "
               "check it"), "release an ngc or cuda stack, or take 'release' out of this stack's groups"
    elif not s.base_digest:
        yield f"the release group refuses tag-only base {s.base_image}", \
            "set base_digest to the image's sha256 digest"


@rule("python-for-mcore", f'megatron-core {MCORE_NEW_FLOOR} and newer need Python {MCORE_PYTHON} or newer')
def _python_for_mcore(s: Stack) -> Iterator[tuple[str, str]]:
    if s.has("mcore") and at_least(s.mcore, MCORE_NEW_FLOOR) and not at_least(s.python, MCORE_PYTHON):
        yield f"megatron-core {s.mcore} needs Python >= {MCORE_PYTHON}, stack has {s.python}", \
            f"use Python {MCORE_PYTHON}+ or megatron-core older than {MCORE_NEW_FLOOR}"


@rule("torch-min", f"torch {MCORE_TORCH} or newer (megatron-core's own requirement)")
def _torch_min(s: Stack) -> Iterator[tuple[str, str]]:
    if not at_least(s.torch, MCORE_TORCH):
        yield f"torch {s.torch} is older than {MCORE_TORCH}", f"use torch >= {MCORE_TORCH}"


@rule("mcore-min", f"megatron-core {major_minor(VERL_MCORE)} or newer (verl's assertion)")
def _mcore_min(s: Stack) -> Iterator[tuple[str, str]]:
    if not s.has("mcore"):
        yield "no megatron-core pinned", f"pin mcore (>= {VERL_MCORE})"
    elif not at_least(s.mcore, VERL_MCORE):
        yield (f"megatron-core {s.mcore} is older than {VERL_MCORE} (verl's minimum)",
               f"use megatron-core >= {VERL_MCORE}")


@rule("mbridge-mcore",
      f'mbridge up to {MBRIDGE_OLD_NAMES} cannot build models on megatron-core {MCORE_NEW_FLOOR} or newer '
      '(ModelType.encoder_and_decoder was removed; verl #6936)')
def _mbridge_mcore(s: Stack) -> Iterator[tuple[str, str]]:
    if (s.has("mbridge") and s.has("mcore") and not after(s.mbridge, MBRIDGE_OLD_NAMES)
            and at_least(s.mcore, MCORE_NEW_FLOOR)):
        yield (f"mbridge {s.mbridge} cannot build models on megatron-core {s.mcore} "
               f"(ModelType.encoder_and_decoder was removed in {MCORE_NEW_FLOOR}; verl #6936)"), \
            (f"use megatron-core older than {MCORE_NEW_FLOOR} with this mbridge, or set mbridge='none' and use "
             "Megatron-Bridge")


def constraint_on(s: Stack, name: str) -> SpecifierSet:
    """Every constraint of the stack on one distribution, as one specifier set (empty: unconstrained)."""
    found = SpecifierSet()
    for text in s.constraints:
        requirement = Requirement(text)
        if requirement.name.lower() == name:
            found &= requirement.specifier
    return found


@rule("verl-bridge",
      f"verl {VERL_ENGINE_BRIDGE} and newer build Megatron models only through a bridge: Megatron-Bridge or mbridge")
def _verl_bridge(s: Stack) -> Iterator[tuple[str, str]]:
    if s.has("verl") and s.has("mcore") and at_least(s.verl, VERL_ENGINE_BRIDGE) and not (
            s.has("megatron_bridge") or s.has("mbridge")):
        yield (f"verl {s.verl}'s Megatron engine builds models only through Megatron-Bridge or mbridge "
               "(it asserts use_mbridge), and the stack carries neither",
               f"pin megatron_bridge (it needs Python >= {MCORE_PYTHON}), or mbridge with a transformers it reads")


@rule("mbridge-transformers", f'mbridge up to {MBRIDGE_OLD_NAMES} needs transformers < 5 (it reads config.rope_theta)')
def _mbridge_transformers(s: Stack) -> Iterator[tuple[str, str]]:
    if s.has("mbridge") and not after(s.mbridge, MBRIDGE_OLD_NAMES) and not bounded_below(
            constraint_on(s, "transformers"), "5"):
        yield (f"mbridge {s.mbridge} fails on transformers 5 (config.rope_theta moved into rope_parameters)",
               "add 'transformers<5' to the stack's constraints")


@rule("te-flash-attn", 'FlashAttention 4 is pinned only beside a TE that knows it (2.15 or newer)')
def _te_flash_attn(s: Stack) -> Iterator[tuple[str, str]]:
    # TE knows FlashAttention 4 from 2.15 (flash_attention.py); an older TE never selects it.
    if not s.has("flash_attn"):
        return
    line = flash_attention.te_line(s.te) if s.has("te") else None
    if line is None or not line.fa4:
        yield (f"FlashAttention {s.flash_attn} is FlashAttention 4, which TE {s.te} does not know: nothing selects "
               "it", "use TE >= 2.15, or set flash_attn='none'")


@rule("flash-attn-cutlass",
      'FlashAttention 4 comes with an exact nvidia-cutlass-dsl pin its code runs on (flash_attention.py)')
def _flash_attn_cutlass(s: Stack) -> Iterator[tuple[str, str]]:
    # FlashAttention 4 compiles its kernels with NVIDIA's CuTe DSL at run time; a release pairs with a range of
    # nvidia-cutlass-dsl releases, and its own metadata does not bound it (flash_attention.FA4_CUTLASS).
    if not s.has("flash_attn"):
        return
    pinned = [spec.version for spec in constraint_on(s, flash_attention.CUTLASS_DSL) if spec.operator == "=="]
    if len(pinned) != 1:
        yield (f"FlashAttention {s.flash_attn} runs on the nvidia-cutlass-dsl release the stack pins, and it pins "
               "none", f"add '{flash_attention.CUTLASS_DSL}==VERSION' to the stack's constraints (e.g. 4.8.1)")
    elif problem := flash_attention.cutlass_problem(s.flash_attn, pinned[0]):
        yield problem, "pin a flash-attn-4 and nvidia-cutlass-dsl pair the table admits"


@rule("flash-attn-archs",
      'no GPU the stack serves is one where its TE selects FlashAttention 4 but FlashAttention 4 has no '
      'backward (sm80 under TE 2.15 to 2.17)')
def _flash_attn_archs(s: Stack) -> Iterator[tuple[str, str]]:
    # TE 2.15 to 2.17 let FlashAttention 4 serve sm80, whose backward FlashAttention 4 lacks: training under
    # attention_backend=flash then fails in the first backward on an A100.
    line = flash_attention.te_line(s.te) if s.has("flash_attn") and s.has("te") else None
    if line is None or not line.fa4:
        return
    older = [a for a in s.cuda_archs.split(";") if a.isdigit() and line.fa4_min_sm <= int(a) < 90]
    if older:
        yield (f"TE {s.te} selects FlashAttention 4 on sm_{', sm_'.join(older)}, where FlashAttention 4 has no "
               "backward: training with attention_backend=flash fails there"), \
            ("drop those from cuda_archs, use TE >= 2.20 (it serves FlashAttention 4 from sm_90), or set "
             "flash_attn='none'")


def _fa4_judgements(s: Stack) -> Iterator[tuple[int, flash_attention.Judgement]]:
    """What the measurements say of the stack's FlashAttention 4 pair under its TE on each GPU it claims where TE
    selects FlashAttention 4 for training (sm_90 and newer, from the TE line's floor)."""
    line = flash_attention.te_line(s.te) if s.has("flash_attn") and s.has("te") else None
    if line is None or not line.fa4:
        return  # te-flash-attn: nothing selects it
    pinned = [spec.version for spec in constraint_on(s, flash_attention.CUTLASS_DSL) if spec.operator == "=="]
    sms = sorted({n for a in gpu_archs.parse(s.cuda_archs)
                  if (n := gpu_archs.number(a)) is not None and n >= max(90, line.fa4_min_sm)})
    for sm in sms:
        yield sm, flash_attention.judge(s.flash_attn, pinned[0] if len(pinned) == 1 else None, s.te, sm)


@rule("flash-attn-measured",
      'no stack ships FlashAttention 4 where a measurement against a reference found it wrong on a GPU architecture '
      'the stack claims: beside a TE release series whose flash backend was wrong while FlashAttention 4 called '
      'directly was right (with any pair), or a pair wrong on its own (under any TE) (flash_attention.MEASURED)')
def _flash_attn_measured(s: Stack) -> Iterator[tuple[str, str]]:
    # TE selects FlashAttention under attention_backend=flash (verl's default); a wrong one trains on while the loss
    # still falls, so nothing but a reference sees it. Refused: what a measurement found wrong; a TE release with no
    # measurement is told (the note flash-attn-unmeasured), not refused.
    for sm, judged in _fa4_judgements(s):
        if judged.verdict == flash_attention.WRONG:
            yield (f"FlashAttention {s.flash_attn} beside TE {s.te} on sm_{sm}, under attention_backend=flash "
                   f"(verl's default): {judged.why}"), \
                ("set flash_attn='none' (attention_backend=fused then serves training on cuDNN), or pin a TE release "
                 "measured right with it (`mcore-images outdated` names the candidate to measure and its command)")


Note = Callable[[Stack], Iterator[str]]
NOTES: dict[str, Note] = {}
"""Told where a stack is chosen (`plan`, `build`), never refused: what no measurement or fact decides yet."""


def note(note_id: str, description: str) -> Callable[[Note], Note]:
    def register(func: Note) -> Note:
        NOTES[note_id] = func
        DESCRIPTIONS[note_id] = f"(a note, never a refusal) {description}"
        return func
    return register


@note("flash-attn-unmeasured",
      'a stack whose TE release series has no measurement of its flash backend with FlashAttention 4 on a GPU it '
      'claims is told so, with the one command that measures it')
def _flash_attn_unmeasured(s: Stack) -> Iterator[str]:
    unmeasured = [(sm, judged.why) for sm, judged in _fa4_judgements(s) if judged.verdict is None]
    if unmeasured:
        on = ", ".join(f"sm_{sm}" for sm, _ in unmeasured)
        why = "; ".join(dict.fromkeys(why for _, why in unmeasured))
        yield (f"FlashAttention {s.flash_attn} under TE {s.te} (attention_backend=flash, verl's default) is unchecked "
               f"against a reference on {on}: {why}; the GPU script measures it on an H200 (sm_90): "
               f"{flash_attention.measure_command(s.te)}")


def _fused_pairs(s: Stack) -> Iterator[tuple[int, fused_attention.FusedMeasurement | None]]:
    """The stack's TE × cuDNN pair on each GPU architecture it serves: its measurement there, or None."""
    if not (s.has("te") and s.has("cudnn")) or FROM_BASE in (s.te, s.cudnn):
        return
    for sm in sorted({n for a in gpu_archs.parse(s.cuda_archs) if (n := gpu_archs.number(a)) is not None}):
        yield sm, fused_attention.measurement(s.te, s.cudnn, sm)


@rule("te-fused-attention",
      "no stack pairs a TE release with a cuDNN release whose cuDNN fused attention (megatron-core's default "
      "attention_backend, and `fused`) was measured failing on a GPU the stack serves (fused_attention.MEASURED)")
def _te_fused_attention(s: Stack) -> Iterator[tuple[str, str]]:
    for sm, found in _fused_pairs(s):
        if found is not None and found.verdict != fused_attention.RIGHT:
            right = [m.te for m in fused_attention.others(s.cudnn, sm) if m.verdict == fused_attention.RIGHT]
            yield (f"TE {s.te}'s cuDNN fused attention with cuDNN {s.cudnn} {found.verdict} on sm_{sm} "
                   f"({found.date}, {found.evidence}): {found.detail}"), \
                (f"pin a TE release measured right with this cuDNN ({', '.join(right) or 'none yet'}), or a cuDNN TE "
                 f"{s.te} runs with, and measure it ({fused_attention.MEASURE_COMMAND})")


@note("te-fused-attention-unmeasured",
      "a stack whose TE × cuDNN pair has no measurement of its cuDNN fused attention on sm_90 (the architecture of "
      "the GPUs lent for measuring), where it serves sm_90, is told so, with what was measured beside it")
def _te_fused_attention_unmeasured(s: Stack) -> Iterator[str]:
    sm = fused_attention.MEASURABLE_SM
    if any(at == sm and found is None for at, found in _fused_pairs(s)):
        beside = ", ".join(f"{m.te} {m.verdict}" for m in fused_attention.others(s.cudnn, sm))
        yield (f"TE {s.te} × cuDNN {s.cudnn}: fused attention unchecked on sm_{sm}"
               f"{f' (with this cuDNN: TE {beside})' if beside else ''}; measure: {fused_attention.MEASURE_COMMAND}")


@rule("te-cuda", f"a transformer-engine-cuXX wheel exists for the stack's CUDA major (cu13 from TE "
                 f"{major_minor(TE_FIRST_CU13)})")
def _te_cuda(s: Stack) -> Iterator[tuple[str, str]]:
    if s.te_source not in ("build", "pypi"):
        return
    major = s.cuda.split(".")[0]
    if major not in ("12", "13"):
        yield f"no transformer-engine-cu{major} wheel exists", "use CUDA 12.x or 13.x"
    elif major == "13" and not at_least(s.te, TE_FIRST_CU13):
        yield f"TE {s.te} has no transformer-engine-cu13 wheel", f"use TE >= {TE_FIRST_CU13} or CUDA 12"


def _te_floor_missed(table: dict[str, str], te: str, have: str) -> str | None:
    """The floor a TE release needs from one of the tables above (TE release line → oldest version of the
    other side: the entry of the newest line ``te`` has reached) where ``have`` is below it; None where ``have``
    meets it or ``te`` predates the first line."""
    reached = [line for line in table if at_least(te, line)]
    floor = table[max(reached, key=Version)] if reached else None
    return floor if floor is not None and not at_least(have, floor) else None


def _te_compiles_against(s: Stack, table: dict[str, str], side: str, have: str, why: str,
                         instead: str) -> Iterator[tuple[str, str]]:
    """The problem where the ``side`` (at ``have``) TE's extension compiles against is below the floor ``s.te``
    needs from ``table``: ``why`` and ``instead`` (the other way out than an older TE) name it, ``{floor}`` in
    them standing for that floor."""
    if floor := _te_floor_missed(table, s.te, have):
        yield (f"TE {s.te}'s extension compiles only against {side} >= {why.format(floor=floor)}",
               f"pin a TE release before {min(table)} for this torch, or {instead.format(floor=floor)}")


@rule("cuda-archs", "every GPU architecture in cuda_archs is one the stack's CUDA compiles (gpu_archs.py)")
def _cuda_archs(s: Stack) -> Iterator[tuple[str, str]]:
    # The GPU architectures the stack serves (its kernels are compiled for them: apex's TORCH_CUDA_ARCH_LIST) must
    # be ones the stack's CUDA can compile; an "a"/"f" suffix (arch-specific features) names the same GPU.
    for arch in gpu_archs.parse(s.cuda_archs):
        entry = gpu_archs.known(arch)
        if entry is None:
            yield (f"cuda_archs names '{arch}', which is not a GPU architecture this project knows",
                   f"use some of {', '.join(str(a.sm) for a in gpu_archs.TABLE)} (e.g. 90 for Hopper, 100 for "
                   "B200/GB200); src/mcore_images/catalogue/gpu_archs.py lists them")
        elif not at_least(s.cuda, entry.first_cuda):
            yield (f"CUDA {s.cuda} cannot compile sm_{entry.sm} (nvcc first compiles it in CUDA {entry.first_cuda})",
                   f"drop {arch} from cuda_archs or use CUDA >= {entry.first_cuda}")
        elif entry.dropped_cuda and at_least(s.cuda, entry.dropped_cuda):
            yield (f"CUDA {s.cuda} no longer compiles sm_{entry.sm} (dropped in CUDA {entry.dropped_cuda})",
                   f"drop {arch} from cuda_archs (CUDA 13 calls that GPU sm_110)")


@rule("cudnn-torch",
      "the cuDNN pin is the release the stack's torch wheel requires exactly ('base' where torch comes with "
      'the base image)')
def _cudnn_torch(s: Stack) -> Iterator[tuple[str, str]]:
    # torch's wheel requires one cuDNN release exactly (nvidia-cudnn-cuXX==…, read from its metadata into
    # env/engines.json when the stack is locked): the one torch loads and TE compiles against. NGC builds torch
    # against its own cuDNN, so a stack on NGC's torch takes the base image's.

    if s.torch_source != "pypi":
        if s.cudnn != FROM_BASE:
            yield (f"torch comes with the base image {s.base_image} and so does its cuDNN, but the stack pins "
                   f"cuDNN {s.cudnn}", "set cudnn to 'base'")
        return
    wanted = engines.torch_cudnn(s)
    if wanted is None:
        yield (f"the cuDNN requirement of torch {s.torch} is not recorded in env/engines.json",
               f"run `mcore-images lock --stack {s.name}`, which reads it from the index")
    elif not wanted:
        if s.has("cudnn"):
            yield f"torch {s.torch} requires no cuDNN wheel, the stack pins cuDNN {s.cudnn}", "set cudnn to 'none'"
    elif s.cudnn in (NONE, FROM_BASE) or not Requirement(wanted).specifier.contains(s.cudnn, prereleases=True):
        exact = next(iter(Requirement(wanted).specifier)).version
        yield (f"torch {s.torch} requires {wanted} (the cuDNN it loads), the stack pins cuDNN {s.cudnn}",
               f"set cudnn to '{exact}'")


@rule("te-archs", "every GPU architecture in cuda_archs is one the TE release's own build carries code for")
def _te_archs(s: Stack) -> Iterator[tuple[str, str]]:
    # TE's core library is never compiled here (its transformer-engine-cuXX wheel or the NGC base brings it), so
    # a GPU the stack serves must be one the TE release's own build carries code for.
    if not s.has("te"):
        return
    for arch in gpu_archs.parse(s.cuda_archs):
        entry = gpu_archs.known(arch)
        if entry is not None and entry.first_te and not at_least(s.te, entry.first_te):
            yield (f"TE {s.te} carries no code for sm_{entry.sm} ({entry.gpus}); TE builds it from {entry.first_te}",
                   f"drop {arch} from cuda_archs or use TE >= {entry.first_te}")


@rule("te-cudnn", "the cuDNN TE's extension compiles against is one that TE release builds with")
def _te_cudnn(s: Stack) -> Iterator[tuple[str, str]]:
    # The stack's cuDNN (torch's, held to torch's requirement by cudnn-torch) is what TE's extension compiles
    # against.
    if s.te_source == "build" and s.cudnn not in (NONE, FROM_BASE):
        yield from _te_compiles_against(s, TE_MIN_CUDNN, "cuDNN", s.cudnn,
                                        f"{{floor}} headers, and torch {s.torch} brings cuDNN {s.cudnn}",
                                        "a torch with newer cuDNN")


@rule("te-torch", "the torch TE's extension compiles against is one that TE release builds with")
def _te_torch(s: Stack) -> Iterator[tuple[str, str]]:
    if s.te_source == "build":
        yield from _te_compiles_against(s, TE_MIN_TORCH, "torch", s.torch,
                                        f"{{floor}} (it includes c10d/symm_mem/nccl_dev_cap.hpp), the stack pins "
                                        f"torch {s.torch}", "torch >= {floor}")


@rule("torch-cuda", "torch's CUDA build on PyPI is the stack's CUDA")
def _torch_cuda(s: Stack) -> Iterator[tuple[str, str]]:
    if s.torch_source != "pypi":
        return
    expected = TORCH_PYPI_CUDA.get(major_minor(s.torch))
    if expected is None:
        yield f"the CUDA build of torch {s.torch} on PyPI is not recorded", \
            "add it to TORCH_PYPI_CUDA in src/mcore_images/catalogue/upstream.py after checking its nvidia-* wheels"
    elif expected != major_minor(s.cuda):
        yield f"torch {s.torch} from PyPI is built for CUDA {expected}, stack says {s.cuda}", \
            f"set cuda to {expected} or pick the torch matching CUDA {s.cuda}"


@rule("platform-torch",
      "each platform the stack lists has a CUDA build of its torch (PyPI's aarch64 torch 2.8/2.9 are CPU "
      'builds)')
def _platform_torch(s: Stack) -> Iterator[tuple[str, str]]:
    # Each platform of a stack needs a CUDA build of its torch: PyPI's wheel for that machine must require the CUDA
    # runtime there (env/engines.json, read from the wheel's metadata and the index when the stack is locked). NGC's
    # torch comes with its base, whose index has an arm64 child (Grace hosts). Every flavor builds either platform:
    # NGC's and nvidia/cuda's tags are multi-arch indexes, the debian base is made with debootstrap --arch.

    if s.torch_source != "pypi":
        return
    for name in s.platforms:
        machine = platforms.BY_NAME[name].machine
        wheel = engines.torch_wheel(s, machine)
        if wheel is None:
            yield (f"PyPI's torch {s.torch} wheel for {machine} (Python {s.python}) is not recorded in "
                   "env/engines.json",
                   f"run `mcore-images lock --stack {s.name}`, which reads it from the index")
        elif not wheel["cuda_runtime"]:
            size = f" ({wheel['bytes'] / 1e6:.0f} MB)" if isinstance(wheel.get("bytes"), int) else ""
            yield (f"torch {s.torch} has no CUDA build for {machine} on PyPI, so no {name} image: {wheel['wheel']}"
                   f"{size} requires no CUDA runtime on {machine} (a CPU build)",
                   f"drop {name} from platforms, or pin a torch whose {machine} wheel is a CUDA build")


@rule("verl-python", f'verl and Megatron-Bridge need Python < {VERL_PYTHON_BELOW}')
def _verl_python(s: Stack) -> Iterator[tuple[str, str]]:
    if s.has("verl") and at_least(s.python, VERL_PYTHON_BELOW):
        yield f"the app layer (verl {s.verl}) needs Python < {VERL_PYTHON_BELOW}, stack has {s.python}", \
            f"set verl='none' on this stack, or use a Python {MCORE_PYTHON} stack for the app layer"
    if s.has("megatron_bridge") and at_least(s.python, VERL_PYTHON_BELOW):
        yield f"Megatron-Bridge {s.megatron_bridge} needs Python < {VERL_PYTHON_BELOW}, stack has {s.python}", \
            f"set megatron_bridge='none', or use Python {MCORE_PYTHON}"


@rule("apex-base", 'apex comes from the base image only on NGC')
def _apex(s: Stack) -> Iterator[tuple[str, str]]:
    # A commit's shape is checked when env/stacks.json is read; here, where 'base' can come from.
    if s.apex == "base" and s.flavor != "ngc":
        yield "apex='base' but only NGC images ship apex", "pin an apex commit or 'none'"


@rule("size-budget", 'every layer the stack builds has a size budget')
def _budget(s: Stack) -> Iterator[tuple[str, str]]:
    missing = [layer for layer in s.layers if layer not in s.size_budget_gb]
    if missing:
        yield f"no size budget for layer(s) {', '.join(missing)}", "add them to size_budget_gb (GB)"


@rule("engine-torch", "a rollout engine's exact torch pin (vLLM's, SGLang's) is the stack's torch")
def _engine_torch(s: Stack) -> Iterator[tuple[str, str]]:

    for engine in engines.ENGINES:
        if not s.has(engine.key):
            continue
        wanted = engines.torch_requirement(s, engine)
        if wanted is None:
            yield (f"the torch requirement of {engine.title} {s.pins[engine.key]} is not recorded in env/engines.json",
                   f"run `mcore-images lock --stack {s.name}`, which reads it from the index")
        elif wanted and not SpecifierSet(wanted).contains(s.torch, prereleases=True):
            yield (f"{engine.title} {s.pins[engine.key]} requires torch{wanted}, the stack pins torch {s.torch}",
                   f"pin the {engine.title} release whose torch requirement holds {s.torch}, or that torch")


@rule("bridge-mcore",
      "every name Megatron-Bridge imports at import time from megatron-core exists in the stack's release")
def _bridge_mcore(s: Stack) -> Iterator[tuple[str, str]]:
    # Megatron-Bridge declares megatron-core with no version; what its modules import when `import
    # megatron.bridge` runs must exist in the stack's megatron-core (env/engines.json, read from both wheels).

    if not (s.has("megatron_bridge") and s.has("mcore")):
        return
    lacking = engines.bridge_missing(s)
    if lacking is None:
        yield (f"what Megatron-Bridge {s.megatron_bridge} imports from megatron-core {s.mcore} is not recorded in "
               "env/engines.json", f"run `mcore-images lock --stack {s.name}`, which reads both wheels")
    elif lacking:
        yield (f"Megatron-Bridge {s.megatron_bridge} imports {len(lacking)} names megatron-core {s.mcore} lacks "
               f"(e.g. {lacking[0]}): `import megatron.bridge` fails",
               "pin the megatron-core release this Megatron-Bridge was made with, or a bridge release for "
               f"megatron-core {s.mcore}")




@functools.cache
def _requirement(text: str) -> Requirement:
    """A requirement parsed once: many stacks share one verl release's list."""
    return Requirement(text)


@functools.cache
def _distribution(name: str) -> str:
    """A distribution name as the catalogue and the index compare it (PEP 503, lower case, '-' for '_' and '.')."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _applies(requirement: Requirement, python: str, extras: frozenset[str]) -> bool:
    """Whether a requirement of verl's applies to a stack: its marker under the stack's Python, for verl itself
    or one of the extras the stack carries."""
    if requirement.marker is None:
        return True
    env = {**pypi.MARKER_ENV, "python_version": python, "python_full_version": f"{python}.0"}
    return any(requirement.marker.evaluate({**env, "extra": extra}) for extra in ("", *extras))


@rule("verl-requirements",
      "the stack keeps to what its verl release declares (Python, its own and its extras' requirements, the "
      "constraints); a release PyPI lacks or the base image brings is named in the stack's substitutes, "
      'with why, and each substitute stands in for such a release')
def _verl_requirements(s: Stack) -> Iterator[tuple[str, str]]:
    # What the stack's verl release declares (env/engines.json, read from its metadata by `lock`): its Python,
    # its own requirements and those of the extras the stack carries (mcore; the rollout engine's).

    if not s.has("verl"):
        if s.substitutes:
            yield (f"substitutes names {', '.join(sorted(s.substitutes))}, but the stack has no verl, whose "
                   "requirements they stand in for", "drop substitutes from the stack")
        return
    declared = engines.verl_requirements(s)
    if declared is None:
        yield (f"what verl {s.verl} requires is not recorded in env/engines.json",
               f"run `mcore-images lock --stack {s.name}`, which reads it from the index")
        return
    if declared["requires_python"] and not SpecifierSet(declared["requires_python"]).contains(f"{s.python}.0"):
        yield (f"verl {s.verl} requires Python {declared['requires_python']}, the stack has {s.python}",
               "pick a verl release for this Python, or a stack of another Python")
    # verl's Megatron extra is "mcore" up to 0.8 and "megatron" from 0.9; a rollout engine's is its own name.
    extras = frozenset({"mcore", "megatron"} | {e.key for e in engines.ENGINES if s.has(e.key)})
    absent = set(declared.get("absent_from_pypi") or [])
    by_dist = {_distribution(d): c for c in components.CATALOGUE for d in c.distributions}
    constraints = {Requirement(c).name.lower(): Requirement(c).specifier for c in s.constraints}
    substitutes = {_distribution(n): n for n in s.substitutes}
    excused: set[str] = set()
    for text in declared["requires_dist"]:
        requirement = _requirement(text)
        if not _applies(requirement, s.python, extras):
            continue
        name = _distribution(requirement.name)
        comp = by_dist.get(name)
        if comp is not None and s.has(comp.key) and requirement.specifier and not requirement.specifier.contains(
                s.pins[comp.key], prereleases=True):
            # What no stack of this flavor can follow: a release PyPI does not have, or a component the base image
            # brings (NGC's own torch build). The stack says what it pins instead, and why.
            cannot = ("which PyPI does not have" if f"{name}{requirement.specifier}" in absent else
                      f"and the stack's {comp.title} comes with its base image" if comp.source and
                      getattr(s, comp.source) == FROM_BASE else None)
            if cannot and name in substitutes:
                excused.add(name)
                continue
            if cannot:
                yield (f"verl {s.verl} requires {requirement.name}{requirement.specifier}, {cannot}; the stack pins "
                       f"{comp.title} {s.pins[comp.key]} without saying why",
                       f"name the substitute in the stack's substitutes ({name!r}: why {s.pins[comp.key]})")
                continue
            yield (f"verl {s.verl} requires {requirement.name}{requirement.specifier}, the stack pins "
                   f"{comp.title} {s.pins[comp.key]}",
                   f"pin a {comp.title} release verl {s.verl} admits, or a verl release that admits {s.pins[comp.key]}")
        elif name in constraints and requirement.specifier and not can_meet(requirement.specifier, constraints[name]):
            yield (f"verl {s.verl} requires {requirement.name}{requirement.specifier}, the stack's constraints say "
                   f"{name}{constraints[name]}", "change the constraint, or pick a verl release that fits it")
    for name in sorted(set(substitutes) - excused):  # an entry that excuses nothing says something untrue
        comp = by_dist.get(name)
        why = (f"no component of the catalogue is {name!r}" if comp is None
               else f"the stack carries no {comp.title}" if not s.has(comp.key)
               else f"verl {s.verl} admits {comp.title} {s.pins[comp.key]}, or PyPI has the release it names")
        yield (f"substitutes names {substitutes[name]!r}, which stands in for nothing: {why}",
               f"drop {substitutes[name]!r} from the stack's substitutes, or name the distribution the stack pins "
               "another release of")


@rule("overrides",
      "a declared override pins one release of a package that is no component of the stack, over another package's "
      "requirement it names, and says why; a distribution left out of the locks is no component either, is not also "
      "overridden, and says who requires and imports it; `lock` proves each needed (docs/stacks.md lists them)")
def _overrides(s: Stack) -> Iterator[tuple[str, str]]:
    # uv's --override replaces every requirement on the distribution. What an override or a left-out distribution may
    # be is judged here, offline; that each is needed (uv finds no lock without the override; some package requires
    # the left-out one) and an override hides no other requirement, `lock` proves with uv before it writes the locks
    # (declared_overrides.py), and `lock --check` holds the locks to it.
    by_dist = {d: c for c in components.CATALOGUE for d in c.distributions}
    constrained = {Requirement(c).name.lower().replace("_", "-") for c in s.constraints}
    overridden = {o.name for o in s.overrides}
    for override in s.overrides:
        name = override.name
        written = override.version
        try:
            normal = str(Version(written))
        except InvalidVersion:
            yield (f"override {override.pin} pins {written!r}, which is not a version", "write a release that PyPI has")
        else:
            if normal != written:  # every lock writes the normal form: `lock --check` would find it stale forever
                yield (f"override {override.pin} writes its version as {written!r}, which the locks write as "
                       f"{normal}", f"write {override.pin.rsplit('==', 1)[0]}=={normal}")
        if canonical(override.over) == name:
            yield (f"override {override.pin} names {override.over} as the package it overrides, itself",
                   "name in 'over' the package whose own requirement on it the override replaces")
    seen: set[tuple[str, bool]] = set()
    entries = [(f"override {o.pin}", o.name, o.why, False) for o in s.overrides]
    entries += [(f"left_out {o.distribution}", o.name, o.why, True) for o in s.left_out]
    for label, name, why, left in entries:
        if not why.strip():
            yield (f"{label} says no why",
                   "say in 'why' who requires it, who imports it and why the image runs without it" if left
                   else "say in 'why' which requirement it overrides and why it runs")
        if name in by_dist:
            comp = by_dist[name]
            yield (f"{label} {'leaves out' if left else 'pins'} {comp.title}, a component of the stack",
                   f"set the stack's '{comp.key}' to 'none' instead" if left
                   else f"pin {comp.title} in the stack's '{comp.key}' field instead")
        if name in constrained:
            yield (f"{label} and a constraint of the stack both pin {name}",
                   "drop the constraint on a distribution the locks leave out" if left
                   else "keep one: the override when another package's requirement must give way, else the constraint")
        if left and name in overridden:
            yield f"{label}: an override pins it too", "keep one: the override, or leaving it out"
        if (name, left) in seen:
            yield (f"left_out names {name} twice" if left else f"two overrides pin {name}",
                   "keep one entry per distribution" if left else "keep one override per package")
        seen.add((name, left))


@rule("tag-length", "every tag fits OCI's 128 characters, candidate and immutable tags included")
def _tag_length(s: Stack) -> Iterator[tuple[str, str]]:

    for layer in s.built_layers:
        content = tags.layer_tag(layer, s)
        immutable = tags.immutable_length(content)
        if immutable > tags.OCI_TAG_MAX:
            yield (f"the {layer} tag {content!r} leaves no room for the immutable tag's date and digest "
                   f"({len(content)} + {immutable - len(content)} > {tags.OCI_TAG_MAX} characters)",
                   "shorten the stack's versions or its base")
        target = tags.target(layer, s)
        longest = tags.longest_candidate(target, s.multi_platform)
        if longest > tags.OCI_TAG_MAX:
            yield (f"the candidate tag of target {target!r} would be {longest} characters (at most "
                   f"{tags.OCI_TAG_MAX})", "give the stack a shorter name")


def check(stack: Stack) -> list[Violation]:
    """Every violation of every rule for one stack."""
    out = []
    for rule_id, func in RULES.items():
        for message, fix in func(stack):
            out.append(Violation(rule_id, stack.name, message, fix))
    return out


def notes(stack: Stack) -> list[str]:
    """Every note for one stack, one line each."""
    return [f"[{note_id}] stack '{stack.name}': {text}" for note_id, func in NOTES.items() for text in func(stack)]
