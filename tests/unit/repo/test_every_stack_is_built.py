"""Every stack env/stacks.json ships is built and certified by a run that exists: per-commit CI (group `ci`), the
nightly workflow (`nightly`) or the release workflow (`release`). Before: six stacks sat in no group, listed by
`plan` beside the four README showed, never built or certified (one with an unpinned base)."""

from __future__ import annotations

from pathlib import Path

from mcore_images.catalogue.stacks import load_stacks
from tests.unit.conftest import ROOT

BUILT_BY = {
    "ci": ("Makefile", "$(MAKE) --no-print-directory release-local"),  # .ci/release-local.sh's default GROUP
    "nightly": ("Makefile", "GROUP=nightly bash .ci/phase.sh release-local"),
    "release": (".github/workflows/build.yml", "matrix --group release"),
}
"""Each group a run builds and certifies, and the line of that run that names it."""


def test_each_group_named_here_is_one_a_run_builds() -> None:
    assert 'GROUP="${GROUP:-ci}"' in (ROOT / ".ci" / "release-local.sh").read_text()
    for group, (path, line) in BUILT_BY.items():
        assert line in Path(ROOT / path).read_text(), (group, path)


def test_every_stack_is_in_a_group_that_a_run_builds() -> None:
    unbuilt = [name for name, stack in load_stacks().items() if not set(stack.groups) & set(BUILT_BY)]
    assert not unbuilt, (f"{unbuilt}: put each in a group a run builds ({', '.join(BUILT_BY)}) with the reason in its "
                         "notes, or remove it from env/stacks.json with its locks")
