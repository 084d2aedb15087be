"""The Dockerfile held to the catalogue: the build args bake passes, where each is read, and each layer's
version checks (`make validate` runs these checks).

The Dockerfile's ARG and check-version lines stay hand-written rather than generated: BuildKit keys a RUN step's
cache on its text and on the build args declared before it, so rewriting them would rebuild every stack, and
where a pin is read is a choice about which steps it may invalidate. What can drift is checked instead:

- every build arg bake passes (a component's ``build_arg``, or a setting of bake_file.py's ``SETTINGS``) is
  declared, and every declared ARG is one bake passes;
- a stage that reads an arg declares it (an undeclared one expands to '' without a word);
- a component's arg is declared only in stages of its own layer or above (a higher layer's pin in a lower layer's
  cache key would rebuild that layer on every bump), and a stage of its layer reads it;
- the stage that ends each layer checks every PyPI release the layer adds (docker/check-version.sh DIST
  "${ARG}"), and each check names a component's distribution and build arg.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from mcore_images.catalogue import components
from mcore_images.catalogue.components import LAYERS, Component
from mcore_images.image_build import bake_file

PLATFORM_ARGS = frozenset({
    "TARGETPLATFORM", "TARGETOS", "TARGETARCH", "TARGETVARIANT", "BUILDPLATFORM", "BUILDOS", "BUILDARCH",
    "BUILDVARIANT",
})
"""BuildKit's platform args: set in the global scope, so a FROM may read them without an ARG before it."""
PREDEFINED = PLATFORM_ARGS | {"HTTP_PROXY", "HTTPS_PROXY", "FTP_PROXY", "NO_PROXY", "ALL_PROXY"}
"""Args BuildKit itself provides: a stage may declare them without bake passing them."""

_REF = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")
_CHECK = re.compile(r'check-version\.sh\s+([a-z][\w.-]*)\s+"?\$\{?([A-Z][A-Z0-9_]*)')
_FROM_STAGE = re.compile(r"(?:--from=|\bfrom=)([\w.${}-]+)")


@dataclass
class Stage:
    """One ``FROM … AS name`` stage: what it declares, reads, checks and builds on."""

    name: str
    parents: list[str] = field(default_factory=list)
    """Stage references it builds on (FROM, --mount from=, COPY --from=); ``${X}`` in them matches any name."""
    declared: list[str] = field(default_factory=list)
    reads: set[str] = field(default_factory=set)
    from_reads: set[str] = field(default_factory=set)
    """Args its FROM line reads: only those declared before the first FROM are set there."""
    checks: list[tuple[str, str]] = field(default_factory=list)
    """(distribution, build arg) of each docker/check-version.sh call."""


def instructions(text: str) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) of each instruction: continuation lines joined, comment lines dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        pending += line[:-1] + " " if line.endswith("\\") else line
        if line.endswith("\\"):
            continue
        keyword, _, rest = pending.strip().partition(" ")
        if keyword:
            out.append((keyword.upper(), rest.strip()))
        pending = ""
    return out


def parse(text: str) -> tuple[list[str], list[Stage]]:
    """The args declared before the first FROM, and the stages in order."""
    global_args: list[str] = []
    stages: list[Stage] = []
    for keyword, rest in instructions(text):
        if keyword == "FROM":
            words = [w for w in rest.split() if not w.startswith("--")]
            name = words[-1] if len(words) >= 3 and words[-2].upper() == "AS" else f"stage{len(stages)}"
            stages.append(Stage(name, parents=words[:1], from_reads=set(_REF.findall(words[0]))))
            continue
        if keyword == "ARG":
            names = [word.split("=", 1)[0] for word in rest.split()]
            (stages[-1].declared if stages else global_args).extend(names)
            continue
        if not stages:
            continue
        stage = stages[-1]
        stage.reads |= set(_REF.findall(rest))
        stage.checks += _CHECK.findall(rest)
        stage.parents += _FROM_STAGE.findall(rest)
    return global_args, stages


def _matches(reference: str, name: str) -> bool:
    """Whether a stage reference (``os-${FLAVOR}`` matches every os-… stage) names the stage ``name``; one that is
    all variable (``${BASE_IMAGE}``) is an image, not a stage."""
    if re.fullmatch(r"(\$\{[^}]*\})+", reference):
        return False
    pattern = re.sub(r"\\\$\\\{[^}]*\\\}", ".+", re.escape(reference))
    return re.fullmatch(pattern, name) is not None


def layer_of(stages: list[Stage]) -> dict[str, str]:
    """Each stage's image layer: the lowest layer whose stage builds on it (or is it)."""
    by_name = {s.name: s for s in stages}
    owner: dict[str, str] = {}
    for layer in reversed(LAYERS):
        if layer not in by_name:
            continue
        todo, seen = [layer], set()
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            owner[name] = layer
            todo += [s.name for ref in by_name[name].parents for s in stages if _matches(ref, s.name)]
    return owner


def stage_layers(root: Path) -> dict[str, str]:
    """Each stage of the checkout's Dockerfile and the layer its work is for (`layer_of`): the builder stages,
    and the cross compiler an emulated builder uses, make the kernels layer's wheels. Empty without a Dockerfile."""
    path = root / "Dockerfile"
    return layer_of(parse(path.read_text())[1]) if path.is_file() else {}


def check_name(c: Component) -> str:
    """What docker/check-version.sh is given for a component: its distribution (``python``: the interpreter)."""
    return c.distribution or c.key


def problems(root: Path) -> list[str]:
    """Where the Dockerfile and the catalogue (with bake's settings) disagree, one line each with the fix."""
    dockerfile = root / "Dockerfile"
    if not dockerfile.is_file():
        return ["Dockerfile is missing; restore it from git"]
    global_args, stages = parse(dockerfile.read_text())
    return edge_problems(global_args, stages, list(bake_file.SETTINGS))


def edge_problems(global_args: list[str], stages: list[Stage], settings: list[str]) -> list[str]:
    by_arg = {c.build_arg: c for c in components.CATALOGUE if c.build_arg}
    passed = set(settings) | set(by_arg)
    layers = layer_of(stages)
    out = [f"bake_file.py: SETTINGS names {arg}, and bake passes it as {by_arg[arg].key}'s build_arg too "
           "(the catalogue's would win); rename one of them" for arg in sorted(set(settings) & set(by_arg))]
    declared_anywhere = set(global_args) | {a for s in stages for a in s.declared}
    for arg in sorted(passed - declared_anywhere):
        owner = (f"components.py's {by_arg[arg].key}" if arg in by_arg else "bake_file.py's SETTINGS")
        out.append(f"Dockerfile: bake passes {arg} ({owner}) but no stage declares it; add `ARG {arg}` to the "
                   "stage that reads it, or drop it there")
    for where, names in [("before the first FROM", global_args), *((f"stage {s.name}", s.declared) for s in stages)]:
        out += [f"Dockerfile {where}: ARG {a} is not a build arg bake passes; name it as a component's build_arg in "
                "components.py (or a setting in bake_file.py's SETTINGS), or drop the ARG"
                for a in names if a not in passed and a not in PREDEFINED]
    for stage in stages:
        layer = layers.get(stage.name)
        out += [f"Dockerfile stage {stage.name} reads ${{{a}}} but does not declare it (it expands to ''); add "
                f"`ARG {a}` to the stage" for a in sorted(stage.reads & (passed - set(stage.declared)))]
        out += [f"Dockerfile stage {stage.name}: its FROM reads ${{{a}}}, which only an ARG before the first FROM "
                f"sets; add `ARG {a}` there" for a in sorted(stage.from_reads - set(global_args) - PLATFORM_ARGS)]
        for arg in stage.declared:
            c = by_arg.get(arg)
            if c and layer and LAYERS.index(c.layer) > LAYERS.index(layer):
                out.append(f"Dockerfile stage {stage.name} ({layer} layer) declares ARG {arg}, {c.title}'s pin of the "
                           f"{c.layer} layer: every bump would rebuild the {layer} layer; declare it from the "
                           f"{c.layer} layer up")
        for dist, arg in stage.checks:
            c = by_arg.get(arg)
            if c is None or dist != check_name(c):
                out.append(f"Dockerfile stage {stage.name}: check-version.sh {dist} \"${{{arg}}}\" names no component "
                           "(components.py: a distribution and its build_arg); check a component's distribution "
                           "against its own build arg")
    for c in by_arg.values():
        own = [s for s in stages if layers.get(s.name) == c.layer]
        if not any(c.build_arg in s.reads for s in own):
            out.append(f"Dockerfile: no stage of the {c.layer} layer reads {c.build_arg} ({c.title}); read it where "
                       "the layer installs or checks it, or drop build_arg from components.py")
        last = next((s for s in stages if s.name == c.layer), None)
        if c.pin == "version" and c.distribution and last and (check_name(c), c.build_arg) not in last.checks:
            out.append(f"Dockerfile stage {c.layer} does not check {c.title}'s release: add "
                       f"`/mnt/build/check-version.sh {check_name(c)} \"${{{c.build_arg}}}\"` to its install step")
    return out
