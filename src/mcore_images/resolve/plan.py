"""`mcore-images plan`: every stack with its targets, tags, base pinning and rule verdicts."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field

from mcore_images.catalogue import components, drivers, gpu_archs, images, platforms, tags
from mcore_images.catalogue.stacks import Stack, get_stack, groups, load_stacks
from mcore_images.command import Command
from mcore_images.errors import InputError, shown
from mcore_images.resolve import needs, rules, tag_content


@dataclass
class StackPlan:
    stack: Stack
    targets: dict[str, list[str]] = field(default_factory=dict)
    violations: list[rules.Violation] = field(default_factory=list)
    needs: list[str] = field(default_factory=list)
    """Known needs of models and recipes the stack falls short of (env/needs.json), each with its why (JSON): told,
    never refused."""
    needs_brief: list[str] = field(default_factory=list)
    """The same, each a line short enough to read (where the why is: `plan --json`)."""
    notes: list[str] = field(default_factory=list)
    """The rules' notes (rules.NOTES): what no measurement decides yet, told, never refused."""

    @property
    def told(self) -> list[str]:
        """Every line `plan` and `build` tell and do not refuse: the rules' notes, then the needs."""
        return [*self.notes, *self.needs_brief]

    @property
    def base_status(self) -> str:
        s = self.stack
        if s.flavor == "debian":
            return "built locally (debootstrap)"
        return f"pinned {s.base_digest[:19]}…" if s.base_digest else "UNPINNED (tag only)"

    def to_dict(self) -> dict:
        return {
            "stack": self.stack.name,
            "flavor": self.stack.flavor,
            "base": self.stack.base_ref,
            "base_pinned": self.stack.base_pinned,
            "groups": list(self.stack.groups),
            "versions": self.stack.versions(),
            "cuda_archs": self.stack.cuda_archs,
            "gpus": gpu_archs.serves(self.stack.cuda_archs),
            "platforms": list(self.stack.platforms),
            "targets": self.targets,
            "violations": [str(v) for v in self.violations],
            "needs": self.needs,
            "notes": self.notes,
        }


def select(stacks: dict[str, Stack], stack: str | None = None, group: str | None = None) -> list[Stack]:
    """The stacks a command acts on: one stack, one bake group, or all."""
    if stack and group:
        raise InputError("give either STACK or GROUP, not both (e.g. `make build STACK=debian`)")
    if stack:
        return [get_stack(stack, stacks)]
    if group:
        by_group = groups(stacks)
        if group not in by_group:
            raise InputError(f"unknown group '{shown(group)}'; choose one of: {', '.join(sorted(by_group))}")
        return [stacks[name] for name in by_group[group]]
    return list(stacks.values())


def make_plan(selected: list[Stack], group: str | None = None, registry: str = "",
              every: dict[str, Stack] | None = None) -> list[StackPlan]:
    """Targets, tags and rule verdicts of the selected stacks; the tag-content rule compares each with ``every``
    stack of env/stacks.json (they push to one repository)."""
    every = load_stacks() if every is None else every
    known = needs.load()
    index = tag_content.TagIndex(every)
    plans = []
    for stack in selected:
        plan = StackPlan(stack)
        for layer in stack.built_layers:
            plan.targets[tags.target(layer, stack)] = tags.tags(layer, stack, registry)
        plan.violations = rules.check(stack) + tag_content.violations(stack, every, index)
        plan.needs = needs.lines(stack, known)
        plan.needs_brief = needs.lines(stack, known, why=False)
        plan.notes = rules.notes(stack)
        plans.append(plan)
    return plans


def render_text(plans: list[StackPlan]) -> str:
    lines = []
    for p in plans:
        s = p.stack
        verdict = "ok" if not p.violations else f"{len(p.violations)} rule(s) broken"
        lines.append(f"{s.name} [{s.flavor}] groups={','.join(s.groups) or '-'}  base: {s.base_image} "
                     f"({p.base_status})  platforms: {platforms.short(s.platforms)}  rules: {verdict}")
        versions = "  ".join(f"{k}={v}" for k, v in s.versions().items())
        lines.append(f"  {versions}")
        for target, target_tags in p.targets.items():
            lines.append(f"  {target:<24} {target_tags[0]}")
        lines.extend(f"  ERROR {v}" for v in p.violations)
        lines.extend(f"  NOTE {n}" for n in p.told)
    return "\n".join(lines)


def render_markdown(plans: list[StackPlan]) -> str:
    """The stacks table embedded in README.md (written by `make update`, checked by `make validate`);
    one column per catalogue component and the GPUs the stack's cuda_archs serve, and under it the known needs
    of models and recipes (env/needs.json) with the stacks that fall short of each. The platforms column is the
    stack's `platforms` (amd64, arm64: Grace hosts such as GH200/GB200)."""
    head = ["stack", "flavor", "base", *(c.title for c in components.CATALOGUE), "min driver", "GPU architectures",
            "platforms", "groups"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for p in plans:
        s = p.stack
        base = f"base and kernels of `{s.layers_from}`" if s.layers_from else f"`{s.base_image}` ({p.base_status})"
        cells = [f"`{s.name}`", s.flavor, base,
                 *(c.short(s.pins[c.key]) for c in components.CATALOGUE), drivers.min_driver(s.cuda) or "?",
                 gpu_archs.serves(s.cuda_archs), platforms.short(s.platforms), ", ".join(s.groups) or "—"]
        rows.append("| " + " | ".join(cells) + " |")
    declared = [f"- `{p.stack.name}`: {o.pin} over {o.over}'s own requirement. {o.why}"
                for p in plans for o in p.stack.overrides]
    if declared:
        rows += ["", "Declared overrides (env/stacks.json: the lock takes these pins over the requirement of the "
                 "package named, where no lock exists without them; `mcore-images lock` proves each needed, and the "
                 "image's pip check excepts exactly that requirement):", "", *declared]
    left_out = [f"- `{p.stack.name}`: {o.distribution}. {o.why}" for p in plans for o in p.stack.left_out]
    if left_out:
        rows += ["", "Left out of the locks (env/stacks.json: uv resolves these, so their own requirements hold, but "
                 "no lock pins them and no image installs them; each lock's header names them, and the image's pip "
                 "check excepts exactly their absence):", "", *left_out]
    known = needs.summary([p.stack for p in plans], needs.load())
    if known:
        rows += ["", "Known needs of models and recipes (env/needs.json; `mcore-images plan` tells each stack):", "",
                 *known]
    return "\n".join(rows)


def run(stack: str | None, group: str | None, fmt: str, registry: str = "") -> tuple[str, int]:
    plans = make_plan(select(load_stacks(), stack, group), group, registry)
    if fmt == "names":
        text = "\n".join(p.stack.name for p in plans)
    elif fmt == "top":
        text = "\n".join(tags.target(p.stack.built_layers[-1], p.stack) for p in plans)
    elif fmt == "json":
        text = json.dumps([p.to_dict() for p in plans], indent=2)
    elif fmt == "markdown":
        text = render_markdown(plans)
    else:
        text = render_text(plans)
    return text, 1 if any(p.violations for p in plans) else 0


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--stack", help="one stack (default: all)")
    p.add_argument("--group", help="the stacks of one bake group (default, ci, release, all)")
    p.add_argument("--registry", default="", help="prefix the tags with this registry, e.g. ghcr.io/acme")
    p.add_argument("--format", choices=("text", "markdown", "names", "top"), default="text",
                   help="text (default), the README table (markdown), stack names one per line, or the alias of "
                        "each stack's top layer (what release-local certifies: app-<stack> or runtime-<stack>)")


def _run(args: argparse.Namespace) -> int:
    if problem := images.registry_problem(args.registry, "--registry"):
        raise InputError(problem)
    text, code = run(args.stack, args.group, "json" if args.json else args.format, args.registry)
    print(text)
    return code


COMMANDS = (Command("plan",
                    "Show every stack: its images, their tags and the rules' verdicts (exit 1: a rule is broken).",
                    _arguments, _run, prints_data=True),)
