"""Which parallel layouts to run on a given number of ranks, and which model/spec each one can run.

Pure logic (no torch): the launcher plans before any rank starts, ``--dry-run`` prints the plan in
images without megatron-core, and every rank re-plans from the same inputs to get the same list.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field, replace

from mcore_images.smoke.kit import gpt_builder
from mcore_images.smoke.kit.errors import CouldNotRun
from mcore_images.smoke.kit.model_size import ModelSize

DIMS = ("dp", "tp", "pp", "vpp", "ep", "cp")

CATALOGUE: dict[int, tuple[str, ...]] = {
    1: ("dp1",),
    2: ("dp2", "tp2", "pp2", "ep2", "cp2"),
    4: ("tp2-pp2", "tp2-ep2", "pp2-ep2", "dp2-tp2", "dp2-pp2-vpp2", "tp4"),
    8: ("tp2-pp2-ep2", "tp2-pp2-dp2", "dp2-pp4-vpp2", "ep8", "tp8"),
}
"""The layouts the suite knows, by the number of ranks they need (dp not named counts as 1)."""

ROUND_TRIPS: dict[int, tuple[tuple[str, str, str], ...]] = {
    1: (("dp1", "dp1", "dense"), ("dp1", "dp1", "moe")),
    2: (("tp2", "pp2", "dense"), ("pp2", "dp2", "dense"), ("pp2", "dp2", "moe")),
    4: (("tp2-pp2", "dp4", "dense"), ("ep4", "ep2", "moe")),
    8: (("tp2-pp2", "pp4", "dense"), ("ep8", "pp2-ep2", "moe")),
}
"""Checkpoint round trips by world size: (saved in, loaded in, model). Both layouts of an MoE pair keep
the expert optimizer apart from the dense one or both merge it (ep > 1 on both sides, or on neither):
megatron-core cannot load a checkpoint whose optimizer was split in two into one that is not."""

MODELS = ("dense", "moe")
SPECS = gpt_builder.SPECS

_TOKEN = re.compile(r"^(dp|tp|pp|vpp|ep|cp)(\d+)$")


@dataclass(frozen=True)
class Layout:
    """One parallel layout; ``dp`` is filled in when the layout is spread over more ranks."""

    tp: int = 1
    pp: int = 1
    vpp: int = 1
    ep: int = 1
    cp: int = 1
    dp: int = 1

    @property
    def size(self) -> int:
        """Ranks needed: tp·pp·cp·dp, with dp at least what ep needs (experts spread over dp·cp)."""
        min_dp = self.ep // self.cp if self.ep % self.cp == 0 else self.ep
        return self.tp * self.pp * self.cp * max(self.dp, min_dp)

    @property
    def name(self) -> str:
        """Canonical name such as ``tp2-pp2`` or ``dp4``; dp shown only when nothing else is > 1."""
        parts = [f"{d}{getattr(self, d)}" for d in DIMS[1:] if getattr(self, d) > 1]
        if self.dp > 1 or not parts:
            parts.insert(0, f"dp{self.dp}")
        return "-".join(parts)

    def filled(self, world: int) -> Layout:
        """The same layout with data parallelism grown so it covers ``world`` ranks."""
        inner = self.tp * self.pp * self.cp
        if world % inner:
            raise CouldNotRun(
                f"layout {self.name} needs a multiple of {inner} ranks, the run has {world}: "
                f"drop it from --layouts or change --nproc"
            )
        return replace(self, dp=world // inner)


def parse_layout(text: str) -> Layout:
    """Parse ``tp2-pp2`` / ``tp2xpp2`` / ``tp2×pp2`` into a Layout; one-line error on bad input."""
    tokens = [t for t in re.split(r"[-x×*,+]", text.strip().lower()) if t]
    if not tokens:
        raise CouldNotRun(f"empty layout {text!r}: use names like tp2, pp2-vpp2, tp2-ep2")
    values: dict[str, int] = {}
    for token in tokens:
        match = _TOKEN.match(token)
        if not match:
            raise CouldNotRun(
                f"bad layout part {token!r} in {text!r}: use dpN, tpN, ppN, vppN, epN, cpN joined by '-'"
            )
        dim, num = match.group(1), int(match.group(2))
        if num < 1 or dim in values:
            raise CouldNotRun(f"bad layout {text!r}: each of dp/tp/pp/vpp/ep/cp at most once, each >= 1")
        values[dim] = num
    layout = Layout(**values)
    if layout.vpp > 1 and layout.pp < 2:
        raise CouldNotRun(f"layout {text!r}: vpp needs pp >= 2 (interleaving needs several stages)")
    return layout


def parse_layouts(text: str | None) -> list[Layout] | None:
    """Parse a comma-separated ``--layouts`` value; None means "every layout that fits"."""
    if text is None or text.strip() in ("", "all"):
        return None
    return [parse_layout(item) for item in text.split(",") if item.strip()]


def default_layouts(world: int) -> list[Layout]:
    """Every catalogue layout whose size divides ``world`` (smaller ones get their dp grown)."""
    return [parse_layout(n) for size, names in sorted(CATALOGUE.items()) if world % size == 0 for n in names]


def choose_world(available: int, selected: list[Layout] | None) -> int:
    """Ranks to start: the largest layout asked for (or the largest catalogue size that fits)."""
    if available < 1:
        raise CouldNotRun("no GPU visible: run on a GPU machine, or pass --cpu for a CPU (gloo) run")
    if selected is None:
        return max(size for size in CATALOGUE if size <= available)
    need = max(layout.size for layout in selected)
    if need > available:
        worst = max(selected, key=lambda lay: lay.size)
        raise CouldNotRun(
            f"layout {worst.name} needs {need} GPUs but {available} are available: "
            f"drop it from --layouts or run on a bigger machine"
        )
    return need


def split_problem(shape: ModelSize, lay: Layout, model: str) -> str | None:
    """Why ``shape`` cannot be split by ``lay`` (None when it can); its MoE sizes count for the moe model."""
    checks = [
        (shape.layers % (lay.pp * lay.vpp) == 0, f"layers {shape.layers} not divisible by pp·vpp"),
        (shape.heads % lay.tp == 0, f"heads {shape.heads} not divisible by tp"),
        (shape.vocab % lay.tp == 0 and shape.ffn % lay.tp == 0, "vocab/ffn not divisible by tp"),
        (shape.seq % (2 * lay.cp) == 0, f"seq {shape.seq} not divisible by 2·cp"),
    ]
    if model == "moe":
        checks += [
            (shape.experts % lay.ep == 0, f"experts {shape.experts} not divisible by ep"),
            ((lay.dp * lay.cp) % lay.ep == 0, "ep must divide dp·cp"),
            (shape.moe_ffn % lay.tp == 0, "moe ffn not divisible by tp"),
        ]
    return next((why for ok, why in checks if not ok), None)


GPU_SHAPE = ModelSize(layers=8, hidden=256, heads=8, ffn=1024, vocab=1024, seq=256, experts=8, topk=2, moe_ffn=512)
"""The small GPT of every run, its MoE sizes those of the moe model; sizes chosen so every catalogue layout divides
them."""
CPU_SHAPE = dataclasses.replace(GPU_SHAPE, hidden=64, heads=8, ffn=128, vocab=256, seq=32, moe_ffn=64)


@dataclass(frozen=True)
class Run:
    """One (layout, model, spec) training run; ``skip`` says why it will not run."""

    layout: Layout
    model: str
    spec: str
    baseline: bool = False
    skip: str | None = None
    repeat: bool = False  # the dp baseline again, under deterministic settings: must match it bitwise

    @property
    def id(self) -> str:
        return f"{self.layout.name}/{self.model}/{self.spec}" + ("/repeat" if self.repeat else "")

    @property
    def baseline_id(self) -> str:
        """The dp-only run of the same model and spec that this run's step 0 must match."""
        return f"dp{self.layout.size}/{self.model}/{self.spec}"


@dataclass(frozen=True)
class RoundTrip:
    """Train ``save``'s layout, checkpoint it, and resume in ``load``'s; the first pair saves in the
    background (``async_save``)."""

    save: Run
    load: Run
    async_save: bool
    skip: str | None = None

    @property
    def id(self) -> str:
        return f"{self.save.layout.name}→{self.load.layout.name}/{self.save.model}/{self.save.spec}"


@dataclass
class Plan:
    """Everything the ranks will run, in order; baselines come first for each model/spec, the checkpoint
    round trips last."""

    world: int
    runs: list[Run] = field(default_factory=list)
    round_trips: list[RoundTrip] = field(default_factory=list)

    @property
    def to_run(self) -> list[Run]:
        return [r for r in self.runs if r.skip is None]


def skip_reason(lay: Layout, model: str, spec: str, te: bool, shape: ModelSize) -> str | None:
    """Why megatron-core (or this image) cannot run the combination; None when it can."""
    if spec == "te" and not te:
        return "Transformer Engine is not importable in this image"
    if lay.cp > 1 and spec != "te":
        return "context parallelism needs Transformer Engine attention"
    if model == "moe" and lay.tp > 1 and spec == "local":
        return "MoE with tp>1 needs sequence parallelism, which the local spec's torch norm refuses"
    return split_problem(shape, lay, model)


def plan(
    world: int,
    selected: list[Layout] | None,
    *,
    te: bool,
    models: tuple[str, ...] = MODELS,
    specs: tuple[str, ...] = SPECS,
    shape: ModelSize = GPU_SHAPE,
    repeat: bool = False,
    checkpoint: bool = True,
) -> Plan:
    """Order the runs: for each spec and model the dp-only baseline (and with ``repeat``, the same run
    again, for the determinism check), then every other layout.

    Expert-parallel layouts are planned for the MoE model only (a dense model has no experts).
    """
    layouts = default_layouts(world) if selected is None else list(selected)
    filled: list[Layout] = []
    for layout in layouts:
        full = layout.filled(world)
        if full not in filled:
            filled.append(full)
    baseline = Layout(dp=world)
    result = Plan(world=world)
    for spec in specs:
        for model in models:
            why = skip_reason(baseline, model, spec, te, shape)
            result.runs.append(Run(baseline, model, spec, True, why))
            if repeat:
                result.runs.append(Run(baseline, model, spec, False, why, repeat=True))
            for layout in filled:
                if layout != baseline and not (model == "dense" and layout.ep > 1):
                    result.runs.append(Run(layout, model, spec, False, skip_reason(layout, model, spec, te, shape)))
    if checkpoint:
        result.round_trips = round_trips(world, te=te, models=models, specs=specs, shape=shape)
    return result


def round_trips(world: int, *, te: bool, models: tuple[str, ...], specs: tuple[str, ...],
                shape: ModelSize) -> list[RoundTrip]:
    """The world size's checkpoint pairs for the selected models, in the richest spec selected (TE where
    it runs: the layers production checkpoints hold)."""
    spec = "te" if "te" in specs and te else specs[0]
    pairs: list[RoundTrip] = []
    for save_name, load_name, model in ROUND_TRIPS.get(world, ()):
        if model not in models:
            continue
        save, load = (parse_layout(name).filled(world) for name in (save_name, load_name))
        why = skip_reason(save, model, spec, te, shape) or skip_reason(load, model, spec, te, shape)
        pairs.append(RoundTrip(Run(save, model, spec), Run(load, model, spec), async_save=not pairs, skip=why))
    return pairs


def render_plan(p: Plan) -> str:
    """Human-readable plan, one line per run (what ``--dry-run`` prints)."""
    pairs = sum(1 for pair in p.round_trips if pair.skip is None)
    lines = [f"smoke plan: {p.world} rank(s), {len(p.to_run)} run(s) of {len(p.runs)}, "
             f"{pairs} checkpoint round trip(s) of {len(p.round_trips)}"]
    for run in p.runs:
        role = ("baseline" if run.baseline else f"bitwise vs {run.baseline_id} (deterministic)" if run.repeat
                else f"parity vs {run.baseline_id}")
        state = f"skip: {run.skip}" if run.skip else role
        name = run.layout.name + (" again" if run.repeat else "")
        lines.append(f"  {name:<14} {run.model:<5} {run.spec:<5} {state}")
    for pair in p.round_trips:
        how = f"skip: {pair.skip}" if pair.skip else (
            "checkpoint round trip" + (", background save" if pair.async_save else ""))
        lines.append(f"  {pair.save.layout.name + ' → ' + pair.load.layout.name:<14} {pair.save.model:<5} "
                     f"{pair.save.spec:<5} {how}")
    return "\n".join(lines)
