"""The stacks table (docs/stacks.md) is generated from env/stacks.json and must match it; README's commands
exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mcore_images.catalogue.stacks import Stack
from mcore_images.image_build import bake_file, regions
from mcore_images.resolve.plan import make_plan, render_markdown


def test_the_stacks_table_is_current(root: Path, stacks: dict[str, Stack]) -> None:
    text = (root / "docs" / "stacks.md").read_text()
    block = re.search(r"<!-- stacks:begin[^\n]*-->\n(.*?)<!-- stacks:end -->", text, re.S)
    assert block, "docs/stacks.md lost its stacks markers"
    assert block.group(1).strip() == render_markdown(make_plan(list(stacks.values()))), \
        "the stacks table is stale: regenerate it with `make update`"


def test_readme_commands_exist(root: Path) -> None:
    text = (root / "README.md").read_text()
    makefile = "\n".join(p.read_text() for p in [root / "Makefile", *sorted((root / "mk").glob("*.mk"))])
    for target in re.findall(r"^make ([a-z-]+)", text, re.M):
        assert re.search(rf"^{target}:", makefile, re.M), target
    assert "bash .ci/run" in text and (root / ".ci" / "run").is_file()


def test_generated_bake_strings_are_taken_literally() -> None:
    """A catalogue string reaches bake as written: ${ and %{ doubled so that bake does not interpolate them."""
    assert bake_file.literal('a${b}%{c}"d\\') == 'a$${b}%%{c}"d\\'


def documented_commands(root: Path) -> list[tuple[str, str]]:
    """(page, line) for every `mcore-images …` line of a bash block in README.md, docs/ and the examples' READMEs."""
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md")), *sorted((root / "examples").rglob("README.md"))]
    found = []
    for page in pages:
        for block in re.findall(r"```(?:bash|sh)\n(.*?)```", page.read_text(), re.S):
            for line in block.replace("\\\n", " ").splitlines():
                line = line.split(" #")[0].strip().replace("python -m mcore_images ", "mcore-images ")
                if line.startswith("mcore-images "):
                    found.append((str(page.relative_to(root)), line))
    return found


def test_every_documented_command_parses(root: Path) -> None:
    """Every command line the pages show is one the CLI takes: its options and their values parse (the command
    itself runs in CI where it needs no registry or GPU: tests/newcomer)."""
    import shlex

    from mcore_images import cli

    parser = cli.parser()
    lines = documented_commands(root)
    assert len(lines) > 20
    for page, line in lines:
        words = shlex.split(line)[1:]
        words = words[:words.index("|")] if "|" in words else words
        own = words[:words.index("--")] if "--" in words else words
        try:
            parser.parse_args(own)
        except SystemExit:
            pytest.fail(f"{page}: `{line}` does not parse")


def test_the_readme_is_for_the_people_who_pull_and_train(root: Path) -> None:
    """Short, and it opens with pulling and verifying an image, not with setting up a build host."""
    text = (root / "README.md").read_text()
    assert len(text.splitlines()) <= 150, len(text.splitlines())
    first = re.search(r"```bash\n(.*?)```", text, re.S)
    assert first and "mcore-images verify" in first.group(1) and "docker pull" in first.group(1), first
    assert text.index("## Set up on a fresh machine") > text.index("## Build it yourself") > text.index("## Run")


def readme_rows(text: str) -> dict[str, list[str]]:
    """README's image table: each row's cells, by its first alias."""
    region = text[text.index("<!-- images:begin"):text.index("<!-- images:end -->")]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in region.splitlines()[3:]]
    return {row[1].split(",")[0].strip("` "): row for row in rows}


def test_the_readme_image_table_says_which_images_carry_a_flash_attention(root: Path,
                                                                          stacks: dict[str, Stack]) -> None:
    """Before: the table named FlashAttention 4 by hand in two rows, with no column and nothing that followed the
    pins. Now the region is current and each row's column is its stack's pin."""

    assert not [p for p in regions.stale(root) if p.startswith("README.md")], "run `make update`"
    rows = readme_rows((root / "README.md").read_text())
    assert rows.keys() == {f"{r.layers[0]}-{r.stack}" for r in regions.README_IMAGES}
    for row in regions.README_IMAGES:
        pin = stacks[row.stack].flash_attn
        assert rows[f"{row.layers[0]}-{row.stack}"][3] == pin, (row.stack, pin)


def test_the_flash_attention_column_follows_env_stacks_json(root: Path, tmp_path: Path) -> None:
    """A stack that pins a FlashAttention in env/stacks.json reads that pin in the table, and one that pins `none`
    reads `none`, with nothing else to edit."""
    import json
    import shutil


    shutil.copytree(root / "env", tmp_path / "env", ignore=shutil.ignore_patterns("locks"))
    shutil.copy(root / "README.md", tmp_path / "README.md")
    data = json.loads((tmp_path / "env" / "stacks.json").read_text())
    for stack in data["stacks"]:
        if stack["name"] == "debian-verl":
            stack["flash_attn"] = "4.0.0b37"
    (tmp_path / "env" / "stacks.json").write_text(json.dumps(data))
    rows = readme_rows(f"<!-- images:begin -->\n{regions._readme_images(tmp_path)}<!-- images:end -->")
    assert rows["app-debian-verl"][3] == "4.0.0b37" and rows["runtime-debian"][3] == "none"
