"""Read the pinned stacks from env/stacks.json, the one source of truth for every version.

env/stacks.json is written in docker-bake's JSON form (a `STACKS` variable), so bake reads the
very same file through the `docker-bake.json` link at the top of the tree and no version is
ever copied into HCL, YAML or a Dockerfile.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, fields
from pathlib import Path

from mcore_images.errors import InputError

NONE = "none"
LAYERS = ("base", "kernels", "runtime", "app")


def repo_root() -> Path:
    """The checkout that holds env/: $MCORE_IMAGES_ROOT, else the tree this package lives in, else cwd."""
    if env := os.environ.get("MCORE_IMAGES_ROOT"):
        return Path(env)
    here = Path(__file__).resolve().parents[2]
    return here if (here / "env" / "stacks.json").is_file() else Path.cwd()


def stacks_file(root: Path | None = None) -> Path:
    return (root or repo_root()) / "env" / "stacks.json"


@dataclass(frozen=True)
class Stack:
    """One pinned stack. 'none' marks a component the stack does not carry; `constraints` are extra
    requirement specifiers every lock of the stack is resolved under (known incompatibilities)."""

    name: str
    flavor: str
    description: str
    base_image: str
    base_digest: str
    debian_suite: str
    python: str
    cuda: str
    torch: str
    torch_source: str
    te: str
    te_source: str
    apex: str
    mcore: str
    mbridge: str
    megatron_bridge: str
    verl: str
    constraints: tuple[str, ...]
    cuda_archs: str
    groups: tuple[str, ...]
    size_budget_gb: dict[str, float]
    notes: str

    @property
    def layers(self) -> tuple[str, ...]:
        """Layers this stack builds: the app layer only where it pins verl."""
        return LAYERS if self.has("verl") else LAYERS[:-1]

    def has(self, component: str) -> bool:
        return getattr(self, component) != NONE

    @property
    def base_ref(self) -> str:
        """The FROM reference: pinned by digest where one is known."""
        return f"{self.base_image}@{self.base_digest}" if self.base_digest else self.base_image

    @property
    def base_pinned(self) -> bool:
        return bool(self.base_digest) or self.flavor == "debian"

    def versions(self) -> dict[str, str]:
        """Every pinned component version, as labelled on the image and checked by the image tests."""
        keys = ("python", "cuda", "torch", "te", "apex", "mcore", "mbridge", "megatron_bridge", "verl")
        return {key: getattr(self, key) for key in keys}


_FIELDS = {f.name for f in fields(Stack)}


def _parse(entry: dict) -> Stack:
    missing = sorted(_FIELDS - entry.keys())
    extra = sorted(entry.keys() - _FIELDS)
    name = entry.get("name", "?")
    if missing or extra:
        raise InputError(
            f"env/stacks.json: stack '{name}' has missing fields {missing} / unknown fields {extra}; "
            "every stack carries the same keys (use 'none' for an absent component)"
        )
    values = dict(entry)
    values["groups"] = tuple(entry["groups"])
    values["constraints"] = tuple(entry["constraints"])
    values["size_budget_gb"] = dict(entry["size_budget_gb"])
    return Stack(**values)


def load_stacks(path: Path | None = None) -> dict[str, Stack]:
    """All stacks by name, in file order."""
    path = path or stacks_file()
    try:
        data = json.loads(path.read_text())
        entries = data["variable"]["STACKS"]["default"]
    except FileNotFoundError:
        raise InputError(f"{path} not found; run from the mcore-images checkout or set MCORE_IMAGES_ROOT") from None
    except (KeyError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: not a bake variable file with STACKS.default ({exc}); fix its JSON") from None
    stacks = [_parse(entry) for entry in entries]
    names = [s.name for s in stacks]
    if len(set(names)) != len(names):
        raise InputError(f"{path}: duplicate stack names {names}; give each stack a unique name")
    return {s.name: s for s in stacks}


def get_stack(name: str, stacks: dict[str, Stack] | None = None) -> Stack:
    stacks = stacks if stacks is not None else load_stacks()
    if name not in stacks:
        raise InputError(f"unknown stack '{name}'; choose one of: {', '.join(stacks)} (see `mcore-images plan`)")
    return stacks[name]


def groups(stacks: dict[str, Stack]) -> dict[str, list[str]]:
    """Bake group -> stack names, as docker-bake.hcl derives them (plus 'all')."""
    out: dict[str, list[str]] = {}
    for stack in stacks.values():
        for group in stack.groups:
            out.setdefault(group, []).append(stack.name)
    out["all"] = list(stacks)
    return out
