"""`mcore-images outdated`: what upstream released since each pin, and which rules a bump would break.

For every stack and every component installed from PyPI, the newest final release on PyPI (its JSON API;
yanked files and pre-releases left out) is compared with the pin. A newer one is tried on a copy of the
stack (``Stack.replace``) through the compatibility rules, so the report says whether the bump alone keeps
the stack valid or which rule it breaks (mbridge on a newer megatron-core, a TE wheel for another CUDA …).
Components that come with the base image (NGC's torch and TE) or from a git commit (apex) follow their base
or their repository, not PyPI, and cuDNN follows torch's exact requirement (a torch bump names the cuDNN it
needs through the rule cudnn-torch): they are reported as such. ``--bump STACK`` writes the newest rule-clean
versions of that stack into env/stacks.json (then `make update` re-locks); the scheduled workflow
(.github/workflows/outdated.yml) does that and opens a pull request for CI to judge. A TE release newer than the
newest whose flash backend was measured with FlashAttention 4 (catalogue flash_attention.MEASURED) is named once as
the candidate to measure, with the command that measures it: no stack ships FlashAttention 4 until a TE release is
measured right with it.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mcore_images.catalogue import components, flash_attention
from mcore_images.catalogue.stacks import (
    NONE,
    SHARED_LAYERS,
    Stack,
    checkout_root,
    get_stack,
    load_stacks,
    raw_entries,
    stacks_file,
    write_entries,
)
from mcore_images.catalogue.versions import InvalidVersion, Version
from mcore_images.command import Command, print_json
from mcore_images.errors import InputError
from mcore_images.resolve import engine_records, layer_requirements, lock_files, pypi, rules, uv_compile

PYPI = "https://pypi.org/pypi/{name}/json"
Fetch = Callable[[str], dict[str, Any]]
Resolve = Callable[[Stack], "str | None"]
Read = Callable[[Stack], object]


def resolution_problem(stack: Stack) -> str | None:
    """Why uv finds no joint solution of every layer's requirements for this stack (None: it resolves), as
    `mcore-images lock` would resolve it (Python, platform and constraints of the stack; binary-only
    where the lock is)."""

    inputs = layer_requirements.resolved_inputs(stack)
    requirements = [req for layer in components.LOCK_LAYERS if layer not in lock_files.SIDE_LAYERS
                    for req in inputs[layer]]
    try:
        uv_compile.compile_layer(stack, requirements, {})
    except InputError as error:
        return f"uv finds no solution ({str(error).split('): ', 1)[-1]})"
    return None


@dataclass(frozen=True)
class Finding:
    stack: str
    component: str
    pinned: str
    newest: str | None
    status: str  # current, newer, untracked (not from PyPI here), error, measure (a TE release to measure)
    breaks: tuple[str, ...] = ()
    note: str = ""

    def line(self) -> str:
        if self.status == "newer":
            verdict = "rules ok, resolves" if not self.breaks else "would break " + "; ".join(self.breaks)
            return f"{self.stack:<16} {self.component:<16} {self.pinned:>10} → {self.newest:<10} {verdict}"
        if self.status == "measure":
            return f"{self.stack:<16} {self.component:<16} {self.pinned:>10} → {self.newest:<10} {self.note}"
        note = f": {self.note}" if self.note else ""
        return f"{self.stack:<16} {self.component:<16} {self.pinned:>10}   {self.status}{note}"


def fetch_pypi(name: str) -> dict[str, Any]:
    with urllib.request.urlopen(PYPI.format(name=name), timeout=60) as resp:
        return json.load(resp)


def newest_release(document: dict[str, Any], prereleases: bool = False) -> str | None:
    """The highest final version with at least one file that is not yanked (``prereleases``: or pre-release, for
    a component that has no final release yet and is pinned to a pre-release, as FlashAttention 4 is)."""
    best: Version | None = None
    for text, files in document.get("releases", {}).items():
        try:
            version = Version(text)
        except InvalidVersion:
            continue
        if (version.is_prerelease and not prereleases) or version.is_devrelease or not files or all(
                f.get("yanked") for f in files):
            continue
        best = version if best is None or version > best else best
    return None if best is None else str(best)


def tracked(stack: Stack, comp: components.Component) -> str | None:
    """Why a component's pin does not follow PyPI here (None when it does)."""
    pin = stack.pins[comp.key]
    if pin == NONE:
        return "not in this stack"
    if comp.source and getattr(stack, comp.source) == "base":
        return f"comes with the base image {stack.base_image}"
    if comp.follows:
        return f"follows {components.BY_KEY[comp.follows].title}'s exact requirement, not PyPI"
    if not comp.requirements or comp.pin != "version":
        return "follows its base image or git commit, not PyPI"
    return None


def check_stack(stack: Stack, fetch: Fetch, cache: dict[tuple[str, bool], Any], resolve: Resolve = resolution_problem,
                read: Read = engine_records.read_candidates) -> list[Finding]:
    """Each component's pin against PyPI's newest; a newer one is judged by the rules, with the candidate's own
    requirements read from the index where env/engines.json lacks them, then, when they allow it, by resolving
    the bumped stack (uv), so no bump is called clean that the resolver refuses."""
    out = []
    for comp in components.CATALOGUE:
        why = tracked(stack, comp)
        if why is not None:
            if stack.pins[comp.key] != NONE:
                out.append(Finding(stack.name, comp.key, stack.pins[comp.key], None, "untracked", note=why))
            continue
        name = comp.distribution or comp.key
        early = Version(stack.pins[comp.key]).is_prerelease
        try:
            if (name, early) not in cache:
                cache[(name, early)] = newest_release(fetch(name), prereleases=early)
        except (urllib.error.URLError, OSError, ValueError) as error:
            out.append(Finding(stack.name, comp.key, stack.pins[comp.key], None, "error", note=f"PyPI: {error}"))
            continue
        newest, pinned = cache[(name, early)], stack.pins[comp.key]
        if newest is None or Version(newest) <= Version(pinned):
            out.append(Finding(stack.name, comp.key, pinned, newest, "current"))
            continue
        bumped = stack.replace(**{comp.key: newest})
        try:
            read(bumped)
        except pypi.NoWheel as error:
            out.append(Finding(stack.name, comp.key, pinned, newest, "newer", (f"[wheel] {error}",)))
            continue
        except InputError as error:
            out.append(Finding(stack.name, comp.key, pinned, newest, "error", note=str(error)))
            continue
        broken = tuple(f"[{v.rule}] {v.message}" for v in rules.check(bumped))
        if not broken and (problem := resolve(bumped)):
            broken = (f"[resolve] {problem}",)
        out.append(Finding(stack.name, comp.key, pinned, newest, "newer", broken))
    return out


MEASURED_ACROSS = "(measured)"
"""The stack column of the measurement candidate: it concerns every stack with TE and FlashAttention 4."""


def measure_candidate(fetch: Fetch, cache: dict[tuple[str, bool], Any]) -> Finding | None:
    """PyPI's newest TE release when it is newer than the newest TE release whose flash backend was measured with
    FlashAttention 4: the candidate to measure, with its command. None: nothing newer, or nothing measured yet."""
    measured = [m.te for m in flash_attention.MEASURED if m.te and m.through_te]
    if not measured:
        return None
    last = max(measured, key=Version)
    name = components.BY_KEY["te"].distribution or "transformer-engine"
    try:
        if (name, False) not in cache:
            cache[(name, False)] = newest_release(fetch(name))
    except (urllib.error.URLError, OSError, ValueError) as error:
        return Finding(MEASURED_ACROSS, "te", last, None, "error", note=f"PyPI: {error}")
    newest = cache[(name, False)]
    if newest is None or Version(newest) <= Version(last):
        return None
    verdicts = sorted({f"{m.through_te.verdict} on sm_{m.sm}" for m in flash_attention.MEASURED
                       if m.te == last and m.through_te})
    return Finding(MEASURED_ACROSS, "te", last, newest, "measure", note=(
        f"the candidate to measure: TE's flash backend with FlashAttention 4 was last measured on {last} "
        f"({', '.join(verdicts)}); {flash_attention.measure_command(newest)}"))


def bump(stack: Stack, findings: list[Finding], path: Path, write: bool = True) -> dict[str, str]:
    """Write the rule-clean newer versions of ``stack`` into env/stacks.json; returns {component: version}.
    The bumps are applied together only if the stack stays valid with all of them; stacks that build on
    this one's base and kernels layers (``layers_from``) get the same versions of those layers' components."""
    shared = {c.key for c in components.CATALOGUE if c.layer in SHARED_LAYERS}
    clean = {f.component: f.newest for f in findings if f.status == "newer" and not f.breaks and f.newest
             and not (stack.layers_from and f.component in shared)}  # those follow the stack it builds on
    if clean and rules.check(stack.replace(**clean)):
        clean = {}
    if not clean or not write:
        return clean
    entries = raw_entries(path)
    for entry in entries:
        if entry["name"] == stack.name:
            entry.update(clean)
        elif entry.get("layers_from") == stack.name:  # stacks on its base and kernels layers move with them
            entry.update({k: v for k, v in clean.items() if k in shared})
    write_entries(entries, path)
    return clean


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--stack", help="one stack (default: every stack)")
    p.add_argument("--bump", metavar="STACK",
                   help="write STACK's newest rule-clean versions into env/stacks.json (then run `make update`)")
    p.add_argument("--dry-run", action="store_true", help="with --bump: print the bump, write nothing")


def _run(args: argparse.Namespace, fetch: Fetch = fetch_pypi, resolve: Resolve = resolution_problem) -> int:
    stacks = load_stacks()
    if args.bump:
        if not args.dry_run:
            checkout_root("outdated --bump")  # it rewrites env/stacks.json and the locks
        stack = get_stack(args.bump, stacks)
        applied = bump(stack, check_stack(stack, fetch, {}, resolve), stacks_file(), write=not args.dry_run)
        would = " (dry run: nothing written)" if args.dry_run and applied else ""
        if args.json:
            print_json(applied)
        else:
            print(f"{stack.name}: " + ", ".join(f"{k} → {v}" for k, v in applied.items()) + would if applied
                  else f"{stack.name}: no bump keeps every rule; nothing written")
        return 0
    if args.dry_run:
        raise InputError("--dry-run goes with --bump STACK (without --bump, outdated writes nothing)")
    chosen = [get_stack(args.stack, stacks)] if args.stack else list(stacks.values())
    cache: dict[tuple[str, bool], Any] = {}
    findings = []
    for number, stack in enumerate(chosen, 1):  # each stack reads PyPI and may resolve: say where it is
        print(f"[outdated] {stack.name} ({number}/{len(chosen)}): PyPI's newest releases, judged by the rules and uv",
              file=sys.stderr, flush=True)
        findings += check_stack(stack, fetch, cache, resolve)
    if candidate := measure_candidate(fetch, cache):
        findings.append(candidate)
    if args.json:
        print_json([asdict(f) for f in findings])
    else:
        for f in findings:
            print(f.line())
        newer = [f for f in findings if f.status == "newer"]
        print(f"{len(newer)} pin(s) behind PyPI, {sum(1 for f in newer if not f.breaks)} of them a bump the rules "
              "allow and uv resolves as it is")
    if any(f.status == "error" for f in findings):
        print("outdated: PyPI could not be read for some components; see 'error' above", file=sys.stderr)
        return 2
    return 0


def _checked_run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except InvalidVersion as error:
        raise InputError(f"a pin is not a version ({error}); fix env/stacks.json") from None


COMMANDS = (Command("outdated",
                    "List the pins PyPI has a newer release of, and whether the rules and uv take each bump.",
                    _arguments, _checked_run, prints_data=True),)
