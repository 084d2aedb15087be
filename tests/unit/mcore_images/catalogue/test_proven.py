"""What each stack was proven to do on a GPU (catalogue/proven.py): one record per stack, and README's image table
reads it, so a GPU run that passes is one edit here and `make update`."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcore_images.catalogue import proven
from mcore_images.catalogue.stacks import Stack
from mcore_images.image_build import regions
from tests.unit.mcore_images.image_build.test_regions import readme_rows


def test_every_stack_says_what_ran_on_a_gpu(stacks: dict[str, Stack]) -> None:
    assert set(proven.GPU) == set(stacks)


def test_the_release_recipe_is_not_yet_proven_on_a_gpu_and_the_table_says_so(root: Path) -> None:
    """Its replica on a GPU is pending: README must not claim it trains on one."""
    assert isinstance(proven.GPU["cuda"], proven.NotYet)
    row = readme_rows((root / "README.md").read_text())["app-cuda"]
    assert "GPU: not yet" in row[4] and "trains" not in row[4]


def test_a_gpu_run_recorded_is_what_the_table_shows(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = proven.GpuRun("2026-12-07", "one H100", "verl's engine and one GRPO step",
                        "a replica of its locks over the host's Python 3.12 (apex absent)", "docs/verl-step.md")
    monkeypatch.setitem(proven.GPU, "cuda", run)
    row = readme_rows(f"<!-- images:begin -->\n{regions._readme_images(root)}<!-- images:end -->")["app-cuda"]
    assert ("GPU: verl's engine and one GRPO step passed on one H100, 2026-12-07, in a replica of its locks over the "
            "host's Python 3.12 (apex absent) (docs/verl-step.md)") in row[4]


def test_the_table_names_the_image_a_verl_user_should_take_first_and_ci_s_image_for_what_it_is(root: Path) -> None:
    """Before: its first row sent verl users to app-debian-verl, whose Megatron training stops on a GPU."""
    rows = list(readme_rows((root / "README.md").read_text()).items())
    assert rows[0][0] == "app-cuda" and rows[0][1][0].startswith("verl")
    ci = dict(rows)["app-debian-verl"]
    assert ci[0].startswith("nothing on a GPU: CI's image") and "bert_padding" in ci[4]
    assert "`make build STACK=cuda` where Docker Hub is reachable" in rows[0][1][5]


def test_a_stack_without_a_record_is_one_line_naming_the_fix(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(proven.GPU, "debian-mcore019")
    with pytest.raises(regions.InputError, match=r"stack 'debian-mcore019' has no entry in .*proven\.py GPU"):
        regions._readme_images(root)
