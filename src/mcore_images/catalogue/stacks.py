"""Read the pinned stacks from env/stacks.json, the one source of truth for every version.

Bake reads the stacks through docker-bake.json, which `make update` generates from this file
(image_build/bake_file.py), so no version is ever copied by hand into HCL, YAML or a Dockerfile. Its
shape is checked against env/stacks.schema.json (jsonschema), its component pins against the catalogue
(components.py, parsed with `packaging`), before any command uses a stack: a bad file is one line
naming the stack, the field and what to write instead.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcore_images import PACKAGE, SOURCE_TREE, jsonfiles, reading
from mcore_images.catalogue import components, platforms
from mcore_images.catalogue.components import FROM_BASE, LAYERS, NONE
from mcore_images.catalogue.versions import InvalidRequirement, InvalidVersion, Requirement, Version
from mcore_images.errors import InputError, shown

__all__ = ["LAYERS", "NONE", "LeftOut", "Override", "Stack", "get_stack", "groups", "load_stacks", "raw_entries",
           "repo_root", "stacks_file", "write_entries"]

_MAJOR_MINOR = re.compile(r"^\d+\.\d+$")

# The lowest lock layer a change of each stack setting touches (components carry their own in the
# catalogue); None: the setting changes no lock (an override of it re-uses the committed locks).
SETTING_LOCK_LAYER: dict[str, str | None] = {
    "base_image": "base", "base_digest": "base", "debian_suite": "base", "torch_source": "base",
    "te_source": "builder", "cuda_archs": None, "description": None, "notes": None, "layers_from": "base",
}


def canonical(name: str) -> str:
    """A distribution name as PEP 503 compares it (``Flashinfer_Python`` -> ``flashinfer-python``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Override:
    """A declared override: the lock takes ``pin`` over the requirement ``over`` (a package) itself declares on the
    same distribution, where no joint lock exists without it (uv's ``--override``). The lock proves it needed by
    resolving without it, and the image's pip check excepts that one broken requirement and no other."""

    pin: str
    """The exact pin the lock takes (``flashinfer-python==0.6.12``; extras as the install needs them)."""
    over: str
    """The package whose own requirement on the pinned distribution is overridden (``megatron-bridge``)."""
    why: str
    """Why it is needed and safe to run."""

    @property
    def name(self) -> str:
        """The pinned distribution, canonical (``nvidia-cutlass-dsl`` for ``nvidia-cutlass-dsl[cu13]==4.5.2``)."""
        return canonical(Requirement(self.pin).name)

    @property
    def version(self) -> str:
        return self.pin.rsplit("==", 1)[1]

    def to_entry(self) -> dict[str, str]:
        return {"pin": self.pin, "over": self.over, "why": self.why}


@dataclass(frozen=True)
class LeftOut:
    """A distribution the stack's locks leave out: uv still resolves it (so its own requirements hold the others), but
    no lock pins it and no image installs it (uv's ``--no-emit-package``), where it cannot be installed as the images
    install (an sdist whose build needs the network, or sources it does not ship). The lock headers name it, and the
    image's pip check excepts its absence, nothing else."""

    distribution: str
    """The distribution left out (``fast-hadamard-transform``)."""
    why: str
    """Who requires it, who imports it, and why the image runs without it."""

    @property
    def name(self) -> str:
        """The distribution, canonical."""
        return canonical(self.distribution)

    def to_entry(self) -> dict[str, str]:
        return {"name": self.distribution, "why": self.why}


INSTALLED_DATA = PACKAGE / "data"
"""Where an installed wheel keeps env/ (the pins, locks and baselines it was released with): in a checkout,
data/env links to the checkout's env/, so there is one copy."""


def repo_root() -> Path:
    """The tree that holds env/: $MCORE_IMAGES_ROOT, else the checkout this package lives in, else the
    installed package's own data (verify and plan work from any folder), else the current folder."""
    if env := os.environ.get("MCORE_IMAGES_ROOT"):
        return Path(env)
    here = SOURCE_TREE
    if (here / "env" / "stacks.json").is_file():
        return here
    return INSTALLED_DATA if (INSTALLED_DATA / "env" / "stacks.json").is_file() else Path.cwd()


def checkout_root(command: str) -> Path:
    """repo_root() for a command that reads or writes the checkout's own files (the Dockerfile, bake, README,
    the locks); one line naming the fix when the package runs without a checkout."""
    root = repo_root()
    if root == INSTALLED_DATA or not (root / "env" / "stacks.json").is_file():
        raise InputError(f"`mcore-images {command}` works in a checkout of mcore-images (it uses the Dockerfile, "
                         f"bake file and locks); clone it and run it there, or set MCORE_IMAGES_ROOT to one")
    return root


def stacks_file(root: Path | None = None) -> Path:
    return (root or repo_root()) / "env" / "stacks.json"


def schema_file() -> Path:
    """env/stacks.schema.json of the checkout this package lives in (the schema is the tool's contract),
    else of repo_root()."""
    own = SOURCE_TREE / "env" / "stacks.schema.json"
    return own if own.is_file() else repo_root() / "env" / "stacks.schema.json"


@dataclass(frozen=True)
class Stack:
    """One pinned stack: its settings, and one pin per catalogue component (``stack.torch``, ``stack.pins``).
    'none' marks a component the stack does not carry; `constraints` are extra requirement specifiers
    every lock of the stack is resolved under (known incompatibilities)."""

    name: str
    flavor: str
    description: str
    base_image: str
    base_digest: str
    debian_suite: str
    torch_source: str
    te_source: str
    constraints: tuple[str, ...]
    cuda_archs: str
    platforms: tuple[str, ...]
    """The OCI platforms its images are built for (``linux/amd64``, ``linux/arm64``: GH200/GB200 are Arm hosts); the
    rules refuse one the stack cannot have."""
    groups: tuple[str, ...]
    size_budget_gb: Mapping[str, float]
    notes: str
    pins: Mapping[str, str]
    layers_from: str = ""
    """Another stack whose base and kernels layers (images, tags and locks) this one builds on; '' = its own."""
    substitutes: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Distribution → why the stack pins another release of it than its verl's own extras name, where PyPI does not
    have the one verl names (the rule verl-requirements accepts nothing else)."""
    overrides: tuple[Override, ...] = ()
    """Declared overrides every lock of the stack is resolved with (the rule overrides judges their form; `lock`
    proves each needed)."""
    left_out: tuple[LeftOut, ...] = ()
    """Distributions its locks resolve but leave out (the rule overrides judges their form; `lock` refuses one no lock
    resolves)."""

    def __getattr__(self, name: str) -> str:
        """A component's pin by its key: ``stack.mcore``."""
        pins = self.__dict__.get("pins") or {}
        if name in pins:
            return pins[name]
        raise AttributeError(f"Stack has no field or component {name!r}")

    @property
    def layers(self) -> tuple[str, ...]:
        """Layers this stack builds: a layer above runtime only where a component of it is pinned."""
        top = [c.layer for c in components.CATALOGUE if self.has(c.key)]
        highest = max(LAYERS.index("runtime"), *(LAYERS.index(layer) for layer in top))
        return LAYERS[: highest + 1]

    @property
    def built_layers(self) -> tuple[str, ...]:
        """The layers this stack builds and tags itself: all of ``layers`` but those it takes from
        ``layers_from``."""
        return tuple(layer for layer in self.layers if self.layer_stack(layer) == self.name)

    def layer_stack(self, layer: str) -> str:
        """The stack that builds ``layer`` of this stack's images (a lock layer name works too)."""
        return self.layers_from if self.layers_from and layer in SHARED_LAYERS else self.name

    def has(self, component: str) -> bool:
        return self.pins[component] != NONE

    @property
    def machines(self) -> tuple[str, ...]:
        """Its platforms as machine names (``x86_64``, ``aarch64``): what its locks are resolved for."""
        return tuple(platforms.BY_NAME[name].machine for name in self.platforms)

    @property
    def multi_platform(self) -> bool:
        return len(self.platforms) > 1

    @property
    def base_ref(self) -> str:
        """The FROM reference: pinned by digest where one is known."""
        return f"{self.base_image}@{self.base_digest}" if self.base_digest else self.base_image

    @property
    def base_pinned(self) -> bool:
        return bool(self.base_digest) or self.flavor == "debian"

    def versions(self) -> dict[str, str]:
        """Every component pin, in catalogue order (labelled on the image, checked by the image tests)."""
        return dict(self.pins)

    def replace(self, **changes: Any) -> Stack:
        """A copy with settings and/or pins changed (``replace(mcore="0.16.0", notes="…")``)."""
        pins = {k: v for k, v in changes.items() if k in components.BY_KEY}
        settings = {k: v for k, v in changes.items() if k not in pins}
        return dataclasses.replace(self, pins={**self.pins, **pins}, **settings)

    def to_entry(self) -> dict[str, Any]:
        """The stack as env/stacks.json writes it (settings, then pins)."""
        entry: dict[str, Any] = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                                 if f.name != "pins" and not (f.name == "layers_from" and not self.layers_from)
                                 and not (f.name == "substitutes" and not self.substitutes)
                                 and not (f.name in ("overrides", "left_out") and not getattr(self, f.name))}
        entry.update(constraints=list(self.constraints), platforms=list(self.platforms), groups=list(self.groups),
                     size_budget_gb=dict(self.size_budget_gb), **self.pins)
        if self.substitutes:
            entry["substitutes"] = dict(self.substitutes)
        if self.overrides:
            entry["overrides"] = [o.to_entry() for o in self.overrides]
        if self.left_out:
            entry["left_out"] = [o.to_entry() for o in self.left_out]
        return entry


SETTINGS = tuple(f.name for f in dataclasses.fields(Stack) if f.name != "pins")
SHARED_LAYERS = ("base", "builder", "kernels")
"""What a stack with ``layers_from`` takes from that stack: the image layers below runtime and their locks."""
SHARED_SETTINGS = ("flavor", "base_image", "base_digest", "debian_suite", "torch_source", "te_source", "cuda_archs",
                   "constraints", "platforms")
"""Settings that shape those layers: a stack sharing them must have the same."""


def pin_problem(key: str, value: str) -> str | None:
    """Why ``value`` cannot be the pin of component ``key`` (None when it can): one phrase naming the fix."""
    comp = components.BY_KEY.get(key)
    if comp is None:
        return f"'{key}' is not a component; known: {', '.join(components.KEYS)}"
    if value == NONE and comp.pin != "major_minor":
        return None
    if value == FROM_BASE and (comp.source or comp.pin == "commit"):
        return None
    if comp.pin == "commit":
        if components.COMMIT.match(value):
            return None
        return f"{key}={value!r} is not a commit (a branch or tag moves); pin the full 40-hex commit, or 'none'"
    if comp.pin == "major_minor":
        if _MAJOR_MINOR.match(value):
            return None
        return f"{key}={value!r} is not MAJOR.MINOR; write e.g. '3.12' (any patch release matches)"
    try:
        Version(value)
    except InvalidVersion:
        return f"{key}={value!r} is not a version (PEP 440); write one such as '1.2.3', or 'none'"
    return None


def _stack_place(data: Any, where: Sequence[Any]) -> tuple[str, Sequence[Any]]:
    """Names the stack an error path runs through (stacks.<i>.field -> stack 'name')."""
    if len(where) >= 2 and isinstance(where[1], int):
        entry = data["stacks"][where[1]]
        return f"stack '{shown(entry.get('name', where[1]) if isinstance(entry, dict) else where[1])}'", where[2:]
    return "", where


def _parse(path: Path, entry: dict[str, Any]) -> Stack:
    name = entry["name"]
    pins = {k: v for k, v in entry.items() if k not in SETTINGS}
    missing = [k for k in components.KEYS if k not in pins]
    unknown = [k for k in pins if k not in components.BY_KEY]
    if missing or unknown:
        raise InputError(f"{path}: stack '{name}': " + "; ".join(
            ([f"no pin for {', '.join(missing)} (every stack pins every component; 'none' when absent)"]
             if missing else [])
            + ([f"unknown field(s) {', '.join(unknown)} (components are listed in "
                "src/mcore_images/catalogue/components.py)"] if unknown else [])))
    for key, value in pins.items():
        if problem := pin_problem(key, value):
            raise InputError(f"{path}: stack '{name}': {problem}")
    for text in entry["constraints"]:
        try:
            Requirement(text)
        except InvalidRequirement:
            raise InputError(f"{path}: stack '{name}': constraint {text!r} is not a requirement specifier; "
                             "write one such as 'transformers<5'") from None
    for text in entry["platforms"]:
        if problem := platforms.problem(text):
            raise InputError(f"{path}: stack '{name}': {problem}")
    if name in platforms.BY_MACHINE:
        raise InputError(f"{path}: stack '{name}': env/locks/{name}/ holds the {name} locks of every stack; rename the "
                         "stack")
    settings = {k: entry.get(k, "") for k in SETTINGS}
    overrides = tuple(Override(**item) for item in entry.get("overrides") or [])
    for override in overrides:
        try:
            Requirement(override.pin)
        except InvalidRequirement:
            raise InputError(f"{path}: stack '{name}': override pin {override.pin!r} is not a requirement; write one "
                             "such as 'flashinfer-python==0.6.12'") from None
    left_out = tuple(LeftOut(item["name"], item["why"]) for item in entry.get("left_out") or [])
    settings.update(substitutes=dict(entry.get("substitutes") or {}), overrides=overrides, left_out=left_out,
                    groups=tuple(entry["groups"]), constraints=tuple(entry["constraints"]),
                    platforms=tuple(entry["platforms"]),
                    size_budget_gb=dict(entry["size_budget_gb"]))
    return Stack(**settings, pins={c.key: pins[c.key] for c in components.CATALOGUE})


MAX_STACKS_BYTES = 4 << 20
"""The largest env/stacks.json this tool reads (4 MiB: about 2,500 stacks as they are written today; the
committed file is under 20 KB). A larger one is refused before it is parsed."""


FIX = "correct it (one entry per stack you build), or restore it from git"
"""What every error about env/stacks.json as a file says to do."""


def raw_entries(path: Path | None = None) -> list[dict[str, Any]]:
    """The stack entries of env/stacks.json (or ``path``) as the file writes them: the one reader of the file.
    Its shape is checked against the schema (InputError, one line), its pins are not: load_stacks parses the
    entries, and a command that edits the file (outdated --bump, an override's workspace) changes them and writes
    them back with write_entries. Inside an image the smoke reads the file without the schema library
    (gpu_archs.declared, smoke/kit/envinfo.py's stack_entries), so not through this."""
    path = path or stacks_file()
    data = reading.read_json(path, "", FIX, missing="run from the mcore-images checkout or set MCORE_IMAGES_ROOT",
                             max_bytes=MAX_STACKS_BYTES)
    jsonfiles.conform(data, path, "", FIX, schema_file(), place=_stack_place)
    return data["stacks"]


def write_entries(entries: list[dict[str, Any]], path: Path) -> None:
    """Write stack entries as env/stacks.json holds them (``{"stacks": [...]}``) at ``path``."""
    path.write_text(json.dumps({"stacks": entries}, indent=2) + "\n")


def load_stacks(path: Path | None = None) -> dict[str, Stack]:
    """All stacks by name, in file order; InputError (one line) for a file that is not well-formed."""
    path = path or stacks_file()
    return _stacks(raw_entries(path), path)


def parse_document(data: Any, path: Path) -> dict[str, Stack]:
    """Stacks from a parsed env/stacks.json document (``path`` only names it in errors)."""
    jsonfiles.conform(data, path, "", FIX, schema_file(), place=_stack_place)
    return _stacks(data["stacks"], path)


def _stacks(entries: list[dict[str, Any]], path: Path) -> dict[str, Stack]:
    stacks = [_parse(path, entry) for entry in entries]
    names = [s.name for s in stacks]
    twice = sorted(name for name, count in Counter(names).items() if count > 1)
    if twice:
        named = ", ".join("'" + shown(n) + "'" for n in twice[:5]) + (" …" if len(twice) > 5 else "")
        raise InputError(f"{path}: stack name{'s' if len(twice) > 1 else ''} {named} used more than once; give each "
                         "stack a unique name")
    by_name = {s.name: s for s in stacks}
    for stack in stacks:
        if problem := shared_layers_problem(stack, by_name):
            raise InputError(f"{path}: stack '{stack.name}': {problem}")
    return by_name


def shared_layers_problem(stack: Stack, stacks: Mapping[str, Stack]) -> str | None:
    """Why ``stack`` cannot take its base and kernels layers from ``layers_from`` (None when it can): the
    layers must be the very ones that stack builds — same settings, same pins of every component below runtime."""
    if not stack.layers_from:
        return None
    source = stacks.get(stack.layers_from)
    if source is None or source.layers_from or source is stack:
        return (f"layers_from '{stack.layers_from}' must name another stack that builds its own layers; "
                f"choose one of: {', '.join(n for n, s in stacks.items() if not s.layers_from and s is not stack)}")
    differ = [k for k in SHARED_SETTINGS if getattr(stack, k) != getattr(source, k)]
    differ += [c.key for c in components.CATALOGUE
               if c.layer in SHARED_LAYERS and stack.pins[c.key] != source.pins[c.key]]
    if differ:
        return (f"takes its base and kernels layers from '{source.name}' but its {', '.join(differ)} differ; "
                f"give them {source.name}'s values, or drop layers_from")
    return None


def get_stack(name: str, stacks: dict[str, Stack] | None = None) -> Stack:
    stacks = stacks if stacks is not None else load_stacks()
    if name not in stacks:
        raise InputError(f"unknown stack '{shown(name)}'; choose one of: {', '.join(stacks)} (see `mcore-images plan`)")
    return stacks[name]


def groups(stacks: dict[str, Stack]) -> dict[str, list[str]]:
    """Bake group -> stack names, as docker-bake.json's groups name them (plus 'all')."""
    out: dict[str, list[str]] = {}
    for stack in stacks.values():
        for group in stack.groups:
            out.setdefault(group, []).append(stack.name)
    out["all"] = list(stacks)
    return out
