"""`mcore-images lock`: the hashed per-layer locks (env/locks/<stack>/<layer>.txt), computed from env/stacks.json.

Each layer's lock is the complete closure of what that layer adds, resolved with `uv pip compile`
for the stack's Python and platform, constrained by the layers below and without re-emitting
their packages. The Dockerfile installs a lock with `pip --require-hashes --no-deps`, so a build
resolves nothing: torch cannot be swapped by a later layer, and every download is hash-checked.
Locks are derived files: `mcore-images lock --check` (run by the tests) proves they still match
the pins, and `mcore-images lock` rewrites them.

The work is split by job: what each layer requires (layer_requirements.py), where the locks live and what their
headers say (lock_files.py), the resolver (uv_compile.py), the offline check (lock_check.py), the re-resolution of
every platform (lock_update.py) and a stack's declared overrides (declared_overrides.py). This module is the
command.
"""

from __future__ import annotations

import argparse
import sys

from mcore_images.catalogue import tags
from mcore_images.catalogue.components import LOCK_LAYERS
from mcore_images.catalogue.stacks import Stack, checkout_root, get_stack, load_stacks
from mcore_images.command import Command, print_json
from mcore_images.errors import InputError
from mcore_images.resolve import rules
from mcore_images.resolve.lock_check import check_locks
from mcore_images.resolve.lock_files import DEFAULT_MACHINE, SIDE_LAYERS, lock_dir
from mcore_images.resolve.lock_update import update_locks, write_locks


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--stack", help="one stack (default: every stack)")
    p.add_argument("--check", action="store_true",
                   help="only check the committed locks against env/stacks.json, offline (exit 1 on a problem)")
    p.add_argument("--full", action="store_true", help="re-resolve every layer, not just the stale ones")
    p.add_argument("--from-layer", choices=LOCK_LAYERS[1:], default=None,
                   help="re-resolve from this layer up, keeping the layers below byte for byte")
    p.add_argument("--base-from", metavar="STACK", default=None,
                   help="take the base layer's lock from STACK, whose base tag this stack shares, and re-resolve the "
                        "layers above against it (one content tag, one content: the tag-content rule)")


def _lock_on_base_of(stack: Stack | None, source: str, stacks: dict[str, Stack], as_json: bool) -> int:
    """Copy ``source``'s base lock into ``stack`` and re-resolve the layers above it against that base."""

    if stack is None:
        raise InputError("--base-from needs --stack: the stack whose base lock is replaced")
    other = get_stack(source, stacks)
    if other.name == stack.name or stack.layer_stack("base") != stack.name:
        raise InputError(f"--base-from {source}: stack '{stack.name}' must build its own base, from another stack")
    mine, theirs = tags.layer_tag("base", stack), tags.layer_tag("base", other)
    if mine != theirs:
        raise InputError(f"--base-from {source}: its base is {theirs}, stack '{stack.name}''s is {mine}; only stacks "
                         "that tag one base image share its lock")
    lacking = [m for m in stack.machines if m not in other.machines]
    if lacking:
        raise InputError(f"--base-from {source}: it has no {', '.join(lacking)} locks to share; add its platforms, or "
                         "lock this stack on its own")
    written = [path for machine in sorted(stack.machines, key=lambda m: m != DEFAULT_MACHINE)
               for path in write_locks(stack, keep_below="builder", keep_from=lock_dir(other, machine=machine),
                                       machine=machine)]
    print_json({stack.name: {"base_from": other.name, "written": [str(p) for p in written]}}
          if as_json else f"{stack.name}: base lock from {other.name}; re-resolved from 'builder' up "
          f"({len(written)} files)")
    return 0


def _run(args: argparse.Namespace) -> int:
    checkout_root("lock")
    stacks = load_stacks()
    chosen = [get_stack(args.stack, stacks)] if args.stack else list(stacks.values())
    # A stack whose rules fail has no lock worth writing (or checking): the rule is the cause, and says the fix. An
    # override pinned as `==v0.6.12` once made `lock` write four files and exit 0, and `lock --check` and `build`
    # then name `lock` as the fix, round and round.
    if broken := [v for stack in chosen for v in rules.check(stack)]:
        more = f" (and {len(broken) - 1} more: `mcore-images plan` lists them)" if len(broken) > 1 else ""
        raise InputError(f"{broken[0]}{more}; nothing was written")
    if args.check:
        problems = {s.name: check_locks(s) for s in chosen}
        if args.json:
            print_json(problems)
        else:
            for name, found in problems.items():
                print(f"{name}: " + ("locks match env/stacks.json" if not found else f"{len(found)} problem(s)"))
                for problem in found:
                    print(f"  error: {problem}", file=sys.stderr)
        return 1 if any(problems.values()) else 0
    if args.base_from:
        return _lock_on_base_of(get_stack(args.stack, stacks) if args.stack else None, args.base_from, stacks,
                                args.json)
    report = {}
    for stack in chosen:
        first, written = update_locks(stack, args.full, args.from_layer)
        report[stack.name] = {"from_layer": first, "written": [str(p) for p in written]}
        if not args.json:
            print(f"{stack.name}: locks current" if first is None else
                  f"{stack.name}: re-resolved side layer '{first}' alone"
                  if all(path.stem in SIDE_LAYERS for path in written) else
                  f"{stack.name}: re-resolved from layer '{first}' up ({len(written)} files)")
    if args.json:
        print_json(report)
    return 0


COMMANDS = (Command("lock", "Resolve the hashed per-layer locks of env/locks, or check them offline (--check).",
                    _arguments, _run, prints_data=True),)
