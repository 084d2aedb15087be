"""Generated regions of hand-written files: each has a writer (`make update`) and a checker (`make validate`).

A region sits between two marker lines in its file and is rendered from the one place its facts live:

- docs/stacks.md, the stacks table: from env/stacks.json and the component catalogue;
- docs/rules.md, the list of compatibility rules: from the rules' own descriptions (rules.py, tag_content.py);
- docs/tags.md, each layer's tag pattern and an example: from the tag scheme (tags.py and the catalogue);
- examples/verl-grpo/README.md, the app images the example names, their versions and GPU runs: from those
  stacks' pins and catalogue/proven.py;
- README.md, the image table (what each image holds, which carry a FlashAttention, what was proven on a CPU and on a
  GPU, how to get it): from the pins of the stacks it names (``README_IMAGES``), their groups and their GPU runs
  (catalogue/proven.py).

The other generated files are written whole: docker-bake.json, every bake target and group (bake_file.py), and
the locks (env/locks; lock_update.py writes them and lock_check.py checks them).
`validate` also holds the Dockerfile's hand-written ARG and check-version lines to the catalogue (dockerfile.py).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mcore_images.catalogue import components, images, proven, tags
from mcore_images.catalogue.stacks import Stack, checkout_root, load_stacks, stacks_file
from mcore_images.command import Command, print_json
from mcore_images.errors import InputError
from mcore_images.image_build import bake_file, dockerfile
from mcore_images.resolve import lock_check, lock_update, plan, rules, tag_content


@dataclass(frozen=True)
class Region:
    path: str
    begin: str
    end: str
    render: Callable[[Path], str]

    def current(self, root: Path) -> tuple[str, int, int]:
        """(file text, start, stop): the region's body is text[start:stop]."""
        text = (root / self.path).read_text()
        start, stop = text.find(self.begin), text.find(self.end)
        if start < 0 or stop < start:
            raise InputError(f"{self.path}: the generated region's markers are missing ({self.begin!r} … "
                             f"{self.end!r}); restore them from git")
        start = text.index("\n", start) + 1
        return text, start, stop


def _readme_table(root: Path) -> str:
    stacks = load_stacks(stacks_file(root))
    return plan.render_markdown(plan.make_plan(list(stacks.values()))) + "\n"


def _rules_list(root: Path) -> str:
    described = {**rules.DESCRIPTIONS, tag_content.RULE: tag_content.DESCRIPTION}
    return "".join(f"- `{rule_id}`: {text}.\n" for rule_id, text in described.items())


VERL_EXAMPLE_STACKS = {"cuda": "to train on", "debian-verl": "where CI checks the launch, on a CPU"}
"""The stacks whose app images examples/verl-grpo names, and what each is for there."""


def _verl_example_versions(root: Path) -> str:
    stacks = load_stacks(stacks_file(root))
    lines = []
    for name, role in VERL_EXAMPLE_STACKS.items():
        stack = stacks[name]
        top = [c for layer in reversed(components.LAYERS) for c in components.of_layer(layer)
               if stack.has(c.key) and c.distributions and stack.pins[c.key] != components.FROM_BASE]
        named = ", ".join(f"{c.title} {c.short(stack.pins[c.key])}" for c in top)
        lines.append(f"- {role}: `mcore-images:{tags.target('app', stack)}` (stack `{stack.name}`), {named} on Python "
                     f"{stack.python}; on a GPU: {proven.GPU[name].said()}.")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class ReadmeImage:
    """One row of README's image table: who it is for, the stack, the layers it names (the top one is described),
    and what it carries that the pins cannot say."""

    reader: str
    stack: str
    layers: tuple[str, ...]
    also: str = ""


README_IMAGES: tuple[ReadmeImage, ...] = (
    ReadmeImage("verl, Megatron backend, or Megatron-Bridge: the release recipe", "cuda", ("app", "runtime"), "Ray"),
    ReadmeImage("the same on NVIDIA's PyTorch container", "ngc", ("app", "runtime"), "Ray"),
    ReadmeImage("Megatron-LM (a checkout of the image's release)", "debian", ("runtime",),
                "Megatron-LM's extras, gcc, make and the Python headers"),
    ReadmeImage("Megatron-LM on the newest megatron-core", "debian-mcore019", ("runtime",),
                "Megatron-LM's extras, gcc, make and the Python headers"),
    ReadmeImage("nothing on a GPU: CI's image, for verl's own CPU tests and the stack beneath them", "debian-verl",
                ("app",), "Ray"),
)
"""The rows, in the order a user looks for what they train with."""
ON_A_CPU = {
    "ci": "CI, every commit",
    "nightly": "nightly",
    "release": "the release workflow (none published yet)",
}
"""Who certifies a stack's images on a CPU, by its group (every stack has one: tests/unit/repo)."""


def _holds(stack: Stack, layer: str) -> dict[str, str]:
    """The versioned components an image of ``layer`` carries, its own layer's first, FlashAttention aside: title →
    how the table names it."""
    upto = components.LAYERS[:components.LAYERS.index(layer) + 1]
    named = {}
    for c in (c for below in reversed(upto) for c in components.of_layer(below)):
        if c.key == "flash_attn" or not c.distributions or not stack.has(c.key):
            continue
        pin = stack.pins[c.key]
        named[c.title] = f"{c.title} of the base image" if pin == components.FROM_BASE else f"{c.title} {c.short(pin)}"
    return named


def _get_it(stack: Stack) -> str:
    """How to get the stack's images today: build them (no release is published), and what the build must reach."""
    command = "make build" if "default" in stack.groups else f"make build STACK={stack.name}"
    if stack.flavor == "debian":
        return f"`{command}`: a Debian mirror and PyPI"
    base = images.parse(stack.base_image)
    return f"`{command}` where {base.host or 'Docker Hub'} is reachable (its base, `{base.repository}`)"


def _readme_images(root: Path) -> str:
    stacks = load_stacks(stacks_file(root))
    rows = ["| you train with | image (alias) | holds | FlashAttention | proven | get it |",
            "|---|---|---|---|---|---|"]
    for row in README_IMAGES:
        if row.stack not in stacks:
            raise InputError(f"README_IMAGES names stack {row.stack!r}, which env/stacks.json lacks: name a stack of "
                             "env/stacks.json in src/mcore_images/image_build/regions.py")
        if row.stack not in proven.GPU:
            raise InputError(f"stack {row.stack!r} has no entry in src/mcore_images/catalogue/proven.py GPU: add its "
                             "GPU run, or NotYet()")
        stack = stacks[row.stack]
        top, *lower = row.layers
        holds = ", ".join([*_holds(stack, top).values(), *([row.also] if row.also else [])])
        holds += f"; CUDA {stack.cuda}, Python {stack.python}"
        for layer in lower:
            dropped = [title for title in _holds(stack, top) if title not in _holds(stack, layer)]
            holds += f"; `{tags.target(layer, stack)}` without {', '.join(dropped)}" + (
                f", {row.also}" if row.also else "")
        flash = stack.pins["flash_attn"]
        flash = "none" if flash == components.NONE else "of the base image" if flash == components.FROM_BASE else flash
        cpu = next((words for group, words in ON_A_CPU.items() if group in stack.groups), "not yet (in no group)")
        gpu = proven.GPU[row.stack].said()
        aliases = ", ".join(f"`{tags.target(layer, stack)}`" for layer in row.layers)
        rows.append(f"| {row.reader} | {aliases} | {holds} | {flash} | CPU: {cpu}. GPU: {gpu} | {_get_it(stack)} |")
    return "\n".join(rows) + "\n"


def _tag_parts(root: Path) -> str:
    """Each layer's tag pattern, from the tag scheme (tags.parts and the catalogue's in_tag), with the content tags
    of the first stack of env/stacks.json as the example."""
    example = next(iter(load_stacks(stacks_file(root)).values()))
    rows = ["| layer | its tag | e.g. (stack `" + example.name + "`) |", "|---|---|---|"]
    for layer in components.LAYERS:
        named = [f"{c.in_tag.prefix}<{c.key}>" + ("?" if c.in_tag.optional else "")
                 for c in tags.parts(layer) if c.in_tag]
        pattern = "-".join([layer, *named, "<origin>"])
        rows.append(f"| {layer} | `{pattern}` | `{tags.layer_tag(layer, example)}` |")
    return "\n".join(rows) + "\n\n`?`: named only where the stack carries it.\n"


REGIONS: tuple[Region, ...] = (
    Region("docs/stacks.md", "<!-- stacks:begin", "<!-- stacks:end -->", _readme_table),
    Region("docs/rules.md", "<!-- rules:begin", "<!-- rules:end -->", _rules_list),
    Region("docs/tags.md", "<!-- tag-parts:begin", "<!-- tag-parts:end -->", _tag_parts),
    Region("examples/verl-grpo/README.md", "<!-- versions:begin", "<!-- versions:end -->", _verl_example_versions),
    Region("README.md", "<!-- images:begin", "<!-- images:end -->", _readme_images),
)


def stale(root: Path) -> list[str]:
    """Regions whose text differs from what their source renders, one line each with the fix."""
    problems = []
    for region in REGIONS:
        text, start, stop = region.current(root)
        if text[start:stop] != region.render(root):
            problems.append(f"{region.path}: the generated region after {region.begin!r} is out of date; "
                            "run `make update`")
    return problems


def update(root: Path) -> list[str]:
    """Rewrite every stale region; returns the files changed."""
    changed = []
    for region in REGIONS:
        text, start, stop = region.current(root)
        body = region.render(root)
        if text[start:stop] != body:
            (root / region.path).write_text(text[:start] + body + text[stop:])
            changed += [] if region.path in changed else [region.path]
    return changed


def _update_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-locks", action="store_true",
                   help="rewrite the generated regions only, not the locks (the locks need uv and PyPI)")


def _update(args: argparse.Namespace) -> int:
    root = checkout_root("update")
    changed = update(root)
    if bake_file.write(load_stacks(stacks_file(root)).values(), root / bake_file.PATH):
        changed.append(bake_file.PATH)
    report: dict[str, object] = {"regions": changed, "locks": {}}
    if not args.no_locks:
        for stack in load_stacks().values():
            first, written = lock_update.update_locks(stack)
            report["locks"][stack.name] = {"from_layer": first, "written": [str(p) for p in written]}  # type: ignore[index]
    if args.json:
        print_json(report)
        return 0
    for path in report["regions"]:  # type: ignore[attr-defined]
        print(f"rewrote the generated part of {path}")
    for name, result in report["locks"].items():  # type: ignore[attr-defined]
        print(f"{name}: locks current" if result["from_layer"] is None
              else f"{name}: locks re-resolved from layer '{result['from_layer']}' up")
    if not report["regions"] and args.no_locks:
        print("generated regions current")
    return 0


def validation_problems(root: Path) -> list[str]:
    """Every stack that breaks a compatibility rule (what `plan` and `build` refuse: a stack can be locked and its
    files regenerated and still break one), every derived file out of step with its source (env/stacks.json is
    read, so its schema is checked), and the Dockerfile's build args and version checks out of step with the
    catalogue. The rules first: they are the cause of what follows from them."""
    stacks = load_stacks(stacks_file(root))
    problems = [str(v) for p in plan.make_plan(list(stacks.values()), every=stacks) for v in p.violations]
    problems += stale(root) + bake_file.stale(stacks.values(), root) + dockerfile.problems(root)
    for stack in stacks.values():
        problems += lock_check.check_locks(stack, root)
    return problems


def _validate(args: argparse.Namespace) -> int:
    problems = validation_problems(checkout_root("validate"))
    if args.json:
        print_json({"problems": problems})
    else:
        for problem in problems:
            print(f"error: {problem}", file=sys.stderr)
        if not problems:
            print("every stack keeps the compatibility rules; generated files current: the stacks and rules pages, "
                  "the bake file's targets and groups, locks of every platform; "
                  "the Dockerfile's build args and version checks follow the catalogue")
    return 1 if problems else 0


COMMANDS = (
    Command("update", "Rewrite every generated file from its source: the pages' tables, the bake file and the locks.",
            _update_arguments, _update, prints_data=True),
    Command("validate", "Check the rules, and every generated file and the Dockerfile against their sources.",
            lambda p: None, _validate, prints_data=True),
)
