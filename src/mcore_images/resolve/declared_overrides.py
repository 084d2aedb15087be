"""A stack's declared overrides and left-out distributions (env/stacks.json ``overrides``, ``left_out``) in its
locks: how each lock's header names them, what `lock --check` holds offline, and what `lock` proves with uv before
it writes anything.

uv's ``--override`` replaces every requirement on the overridden distribution, not only the one the stack means to
override. So an override is accepted only when (1) without it uv finds no joint lock (it is needed), and (2) every
other package in the lock that requires the distribution accepts the overriding release (it hides nothing but the
one requirement it names). A left-out distribution is still resolved (its requirements hold the others) but not
emitted (``--no-emit-package``): a layer's header names it where uv resolved it for that layer or a layer below, as
uv's own list of what it left out says, and no lock pins it. The image's pip check then excepts exactly the
overridden requirement and the left-out distribution's absence: docker/pip-check.py reads the header lines written
here (tests/unit/docker/test_pip_check.py holds the formats together).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from mcore_images.catalogue.components import LOCK_LAYERS
from mcore_images.catalogue.stacks import LeftOut, Override, Stack, canonical
from mcore_images.catalogue.versions import InvalidVersion, Requirement, Version
from mcore_images.errors import InputError
from mcore_images.resolve import pypi, uv_compile
from mcore_images.resolve.lock_files import DEFAULT_MACHINE, SIDE_LAYERS, excluded, held_by_layer, pins

LINE = "# Override: {pin} over {over}'s own requirement on it (env/stacks.json says why).\n"
"""How a lock's header names a declared override (docker/pip-check.py parses it)."""
_LINE = re.compile(r"^# Override: (?P<pin>\S+) over (?P<over>\S+)'s own requirement")
LEFT_OUT_LINE = "# Left out: {name}, resolved but not installed (env/stacks.json says why).\n"
"""How a lock's header names a left-out distribution (docker/pip-check.py parses it)."""
_LEFT_OUT_LINE = re.compile(r"^# Left out: (?P<name>[^\s,]+),")
_BLOCK = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==(\S+)")


def header_lines(stack: Stack, held: Iterable[str], left_out: Iterable[str] = ()) -> str:
    """The header lines of a lock whose layer (with the layers below it) holds the distributions ``held`` and resolved
    the left-out distributions ``left_out``: one per override of a distribution held there and one per left-out one,
    so that each layer's pip check knows every override installed and every distribution left out so far."""
    names = {canonical(n) for n in held}
    gone = {canonical(n) for n in left_out}
    return ("".join(LINE.format(pin=o.pin, over=o.over) for o in stack.overrides if o.name in names)
            + "".join(LEFT_OUT_LINE.format(name=o.name) for o in stack.left_out if o.name in gone))


def _header(text: str) -> Iterator[str]:
    """A lock's header: its leading comment lines."""
    for line in text.splitlines():
        if not line.startswith("#"):
            return
        yield line


def named(text: str) -> list[tuple[str, str]]:
    """(pin, over) of every override line in a lock's header."""
    return [(match["pin"], match["over"]) for line in _header(text) if (match := _LINE.match(line))]


def named_left_out(text: str) -> list[str]:
    """Every distribution a lock's header names as left out."""
    return [match["name"] for line in _header(text) if (match := _LEFT_OUT_LINE.match(line))]


def left_out_by_layer(stack: Stack, texts: Mapping[str, str]) -> dict[str, list[str]]:
    """Each lock layer -> the stack's left-out distributions that uv resolved for it or for a layer below it (its list
    of what it left out of the lock text), in the stack's order: what the layer's header names."""
    found = held_by_layer(stack, dict(texts), excluded)
    return {layer: [o.name for o in stack.left_out if o.name in names] for layer, names in found.items()}


def problems(stack: Stack, held_by_layer: Mapping[str, Mapping[str, str]],
             texts: Mapping[str, str]) -> dict[str, list[str]]:
    """Offline, for each lock layer: what its header or pins disagree with the stack's overrides and left-out
    distributions on. ``held_by_layer`` maps a layer to {distribution: version} of it and the layers below it (its pip
    check sees them all), ``texts`` to its lock's text. A layer with a problem is stale: `lock` re-resolves it."""
    out: dict[str, list[str]] = {}
    resolved = left_out_by_layer(stack, texts)
    for layer, held in held_by_layer.items():
        found: list[str] = []
        text = texts.get(layer, "")
        wanted = [(o.pin, o.over) for o in stack.overrides if o.name in held]
        if named(text) != wanted:
            found.append(f"its header names overrides {named(text)}, the stack declares {wanted}")
        found += [f"it pins {o.name} {held[o.name]}, the stack's override {o.pin}" for o in stack.overrides
                  if o.name in held and not _same_release(held[o.name], o.version)]
        if named_left_out(text) != resolved.get(layer, []):
            found.append(f"its header names {named_left_out(text)} left out, uv left out {resolved.get(layer, [])} "
                         "of the stack's left_out")
        mine = pins(text)
        found += [f"it pins {o.name} {mine[o.name]}, which the stack leaves out" for o in stack.left_out
                  if o.name in mine]
        if found:
            out[layer] = found
    return out


def unresolved(stack: Stack, texts: Mapping[str, str]) -> list[LeftOut]:
    """Left-out distributions no lock of the stack resolves: nothing requires them, so leaving them out says nothing
    (one a lock still pins is not counted here: ``problems`` names it)."""
    resolved = {name for names in left_out_by_layer(stack, texts).values() for name in names}
    pinned = {name for text in texts.values() for name in pins(text)}
    return [o for o in stack.left_out if o.name not in resolved | pinned]


def _same_release(locked: str, pinned: str) -> bool:
    """Whether the lock's version is the override's release: equal as versions (``==0.6.12.0`` pins the release a lock
    writes as 0.6.12, and `lock` would otherwise rewrite the same locks at every run)."""
    try:
        return Version(locked) == Version(pinned)
    except InvalidVersion:
        return locked == pinned


def unheld(stack: Stack, held: Iterable[str]) -> list[Override]:
    """Overrides of a distribution no lock of the stack holds: not needed (the lock would have held it)."""
    names = {canonical(n) for n in held}
    return [o for o in stack.overrides if o.name not in names]


Resolve = Callable[[tuple[Override, ...]], tuple[bool, str]]
"""Resolve the stack's whole chain with these overrides: (resolved, uv's conclusion when it did not)."""


def prove_needed(stack: Stack, resolve: Resolve) -> dict[str, str]:
    """Each override is needed: without it (the others kept) uv finds no lock. Returns pin -> uv's conclusion
    without it; InputError, naming the fix, for one the lock does without."""
    proofs = {}
    for override in stack.overrides:
        resolved, reason = resolve(tuple(o for o in stack.overrides if o is not override))
        if resolved:
            raise InputError(f"stack '{stack.name}': override {override.pin} (over {override.over}) is not needed: "
                             "its locks resolve without it; remove it from the stack's overrides in env/stacks.json")
        proofs[override.pin] = reason
    return proofs


def prove(stack: Stack, inputs: dict[str, list[str]], machine: str = DEFAULT_MACHINE) -> None:
    """Before a stack with declared overrides is locked: each is needed (its whole chain resolves without none of
    them), and none overrides more than the one requirement it names (``hidden``). InputError naming the fix
    otherwise; nothing is written."""
    if not stack.overrides:
        return
    chain = [req for layer in LOCK_LAYERS if layer not in SIDE_LAYERS for req in inputs[layer]]

    def resolve(overrides: tuple[Override, ...]) -> tuple[bool, str]:
        result, _, _ = uv_compile.run(stack, chain, {}, None, machine, "", overrides)
        if result.returncode and uv_compile.NO_SOLUTION not in result.stderr:
            raise InputError(f"uv could not read the index for stack '{stack.name}': "
                             f"{uv_compile.uv_reason(result.stderr)}")
        return result.returncode == 0, uv_compile.uv_reason(result.stderr)

    prove_needed(stack, resolve)
    result, text, _ = uv_compile.run(stack, chain, {}, None, machine, "", stack.overrides)
    if result.returncode:
        raise InputError(f"uv could not resolve stack '{stack.name}' with its overrides: "
                         f"{uv_compile.uv_reason(result.stderr)}")
    found = hidden(stack, text)
    if found:
        raise InputError(found[0])


def requirers(lock_text: str, name: str) -> dict[str, str]:
    """The packages a uv lock text says require ``name`` (its ``# via`` notes), with their locked versions."""
    versions: dict[str, str] = {}
    via: dict[str, list[str]] = {}
    current = None
    for line in lock_text.splitlines():
        if match := _BLOCK.match(line):
            current = canonical(match[1])
            versions[current] = match[2]
            via[current] = []
        elif not line.startswith(" "):  # a comment of the file's own (uv's list of packages left out)
            current = None
        elif current and (stripped := line.strip().lstrip("#").strip()):
            entry = stripped.removeprefix("via").strip()
            if entry and not entry.startswith("-") and _BLOCK.match(f"{entry}==0"):
                via[current].append(canonical(entry))
    return {r: versions[r] for r in via.get(canonical(name), []) if r in versions}


Metadata = Callable[[str, str, str], Mapping[str, Any]]


def hidden(stack: Stack, lock_text: str, metadata: Metadata | None = None) -> list[str]:
    """What each override would override beyond the one requirement it names: a requirement on the overridden
    distribution, by another package of the joint lock ``lock_text``, that the overriding release does not meet
    (under any of its markers' extras: the lock may install them). One line per requirement, naming the fix."""
    read = metadata or _metadata
    out = []
    for override in stack.overrides:
        for package, version in sorted(requirers(lock_text, override.name).items()):
            if package == canonical(override.over):
                continue
            for text in read(package, version, stack.python).get("requires_dist") or []:
                requirement = Requirement(text)
                if canonical(requirement.name) != override.name or not _applies(requirement, stack.python):
                    continue
                if not requirement.specifier.contains(override.version, prereleases=True):
                    out.append(f"stack '{stack.name}': override {override.pin} also overrides {package} {version}'s "
                               f"requirement {text}; hold {package} to a release that accepts {override.version} in "
                               "the stack's constraints")
    return out


@functools.cache
def _metadata(name: str, version: str, python: str) -> Mapping[str, Any]:
    return pypi.read_metadata(name, version, python)


def _applies(requirement: Requirement, python: str) -> bool:
    """Whether the requirement holds in an image of this Python, for the package itself or any of its extras."""
    if requirement.marker is None:
        return True
    env = {**pypi.MARKER_ENV, "python_version": python, "python_full_version": f"{python}.0"}
    extras = re.findall(r"""extra\s*==\s*["']([^"']+)["']""", str(requirement.marker))
    return any(requirement.marker.evaluate({**env, "extra": extra}) for extra in ("", *extras))
