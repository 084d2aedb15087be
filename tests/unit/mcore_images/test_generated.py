"""README's stacks table is generated from env/stacks.json and must match it."""

from __future__ import annotations

import re
from pathlib import Path

from mcore_images.generated import _hcl
from mcore_images.plan import make_plan, render_markdown
from mcore_images.stacks import Stack


def test_readme_stacks_table_is_current(root: Path, stacks: dict[str, Stack]) -> None:
    text = (root / "README.md").read_text()
    block = re.search(r"<!-- stacks:begin[^\n]*-->\n(.*?)<!-- stacks:end -->", text, re.S)
    assert block, "README.md lost its stacks markers"
    assert block.group(1).strip() == render_markdown(make_plan(list(stacks.values()))), \
        "README stacks table is stale: regenerate it with `mcore-images plan --format markdown`"


def test_readme_commands_exist(root: Path) -> None:
    text = (root / "README.md").read_text()
    makefile = "\n".join(p.read_text() for p in [root / "Makefile", *sorted((root / "mk").glob("*.mk"))])
    for target in re.findall(r"^make ([a-z-]+)", text, re.M):
        assert re.search(rf"^{target}:", makefile, re.M), target
    assert "bash .ci/run" in text and (root / ".ci" / "run").is_file()


def test_generated_hcl_strings_are_taken_literally() -> None:
    """A catalogue string reaches bake as written: quotes and backslashes escaped, and ${ and %{ doubled so that
    bake does not interpolate them."""
    assert _hcl('a${b}%{c}"d\\') == '"a$${b}%%{c}\\"d\\\\"'
    assert (_hcl(None), _hcl(True), _hcl(False)) == ("null", "true", "false")
