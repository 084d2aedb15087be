"""Known needs of models and recipes on a component's version (env/needs.json), told where a stack is chosen.

A need is the model's, not the stack's: verl's GPT-OSS training needs a newer cuDNN than most verl stacks carry,
and those stacks still serve every other model. So a stack below a need is never refused; `mcore-images plan`
tells it in one line per need, and the README's stacks table lists, under it, the stacks each need leaves out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from mcore_images import jsonfiles
from mcore_images.catalogue import components
from mcore_images.catalogue.components import FROM_BASE, NONE
from mcore_images.catalogue.stacks import Stack, repo_root
from mcore_images.catalogue.versions import InvalidSpecifier, SpecifierSet
from mcore_images.errors import InputError


@dataclass(frozen=True)
class Need:
    """One entry of env/needs.json."""

    name: str
    what: str
    component: str
    requires: str
    with_: tuple[str, ...]
    """The recipe runs on stacks that carry any of these components (all stacks when empty)."""
    why: str
    source: str

    @property
    def title(self) -> str:
        return components.BY_KEY[self.component].title

    def concerns(self, stack: Stack) -> bool:
        return not self.with_ or any(stack.has(key) for key in self.with_)

    def shortfall(self, stack: Stack) -> str | None:
        """What the stack has instead, when it falls short ("pins cuDNN 9.1.0"); None when it meets the need or
        the recipe does not run on it."""
        if not self.concerns(stack):
            return None
        pin = stack.pins[self.component]
        if pin == NONE:
            return f"carries no {self.title}"
        if pin == FROM_BASE:
            return f"takes {self.title} from its base image {stack.base_image}, whose version is not pinned here"
        if SpecifierSet(self.requires).contains(pin, prereleases=True):
            return None
        return f"pins {self.title} {pin}"

    def line(self, stack: Stack, why: bool = True) -> str | None:
        """The one line for a stack that falls short of this need: with its source and why (`plan --json`), or
        without them (`plan` and `build` print that one, which names where the why is)."""
        short = self.shortfall(stack)
        if short is None:
            return None
        said = f"[need {self.name}] stack '{stack.name}' {short}; {self.what} needs {self.title} {self.requires}"
        return f"{said} ({self.source}): {self.why}" if why else f"{said} (why: `mcore-images plan --json`)"


def needs_file(root: Path | None = None) -> Path:
    return (root or repo_root()) / "env" / "needs.json"


def load(root: Path | None = None) -> list[Need]:
    """Every need of env/needs.json (none where a tree has no such file, like env/engines.json); InputError (one
    line) for a file that is not well-formed."""
    path = needs_file(root)
    if not path.is_file():
        return []
    data = jsonfiles.load(path, "the needs file", "fix it, or restore it from git", path.with_name("needs.schema.json"))
    out = []
    for entry in data["needs"]:
        where = f"{path}: need '{entry['name']}'"
        unknown = [key for key in (entry["component"], *entry["with"]) if key not in components.BY_KEY]
        if unknown:
            raise InputError(f"{where}: {', '.join(unknown)} is not a component; use one of "
                             f"{', '.join(components.KEYS)}")
        try:
            SpecifierSet(entry["requires"])
        except InvalidSpecifier:
            raise InputError(f"{where}: requires {entry['requires']!r} is not a version specifier; write one "
                             "such as '>=1.2'") from None
        out.append(Need(entry["name"], entry["what"], entry["component"], entry["requires"], tuple(entry["with"]),
                        entry["why"], entry["source"]))
    return out


def lines(stack: Stack, needs: Iterable[Need], why: bool = True) -> list[str]:
    """One line per need the stack falls short of (``why``: with its source and why)."""
    return [text for need in needs if (text := need.line(stack, why))]


def summary(stacks: Iterable[Stack], needs: Iterable[Need]) -> list[str]:
    """The README's lines under the stacks table: per need, the stacks it concerns that fall short of it, and
    those whose version of the component the base image decides (not known here)."""
    out = []
    stacks = list(stacks)
    for need in needs:
        short = [s for s in stacks if need.shortfall(s) is not None]
        below = [f"`{s.name}` ({need.shortfall(s)})" for s in short if s.pins[need.component] != FROM_BASE]
        unknown = [f"`{s.name}`" for s in short if s.pins[need.component] == FROM_BASE]
        verdict = "; ".join([*(["below it: " + ", ".join(below)] if below else []),
                             *([f"unknown for {', '.join(unknown)} ({need.title} from the base image)"]
                               if unknown else [])]) or "every stack it runs on meets it"
        out.append(f"- {need.what} needs {need.title} {need.requires} ({need.source}): {verdict}.")
    return out
