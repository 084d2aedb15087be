"""Known needs of models and recipes (env/needs.json): a stack below one is told, in one line, never refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mcore_images import cli
from mcore_images.catalogue.stacks import Stack
from mcore_images.resolve import needs, plan
from tests.unit.conftest import ROOT, variant

GPT_OSS = "[need verl-gpt-oss]"


@pytest.fixture
def gpt_oss() -> needs.Need:
    return next(n for n in needs.load() if n.name == "verl-gpt-oss")


def test_verls_gpt_oss_need_is_told_to_the_verl_stacks_below_it(stacks: dict[str, Stack],
                                                                  gpt_oss: needs.Need) -> None:
    assert (gpt_oss.component, gpt_oss.requires, gpt_oss.with_) == ("cudnn", ">=9.18", ("verl",))
    line = gpt_oss.line(stacks["debian-verl"])
    assert line == (f"{GPT_OSS} stack 'debian-verl' pins cuDNN 9.10.2.21; GPT-OSS training with verl's Megatron "
                    f"backend needs cuDNN >=9.18 (verl #5224): {gpt_oss.why}")
    assert gpt_oss.line(stacks["cuda"]) is None  # verl on torch's cuDNN 9.19
    assert gpt_oss.line(stacks["debian"]) is None  # no verl: the recipe does not run there
    assert gpt_oss.line(variant(stacks["debian"], verl="0.9.1")) is None  # meets it
    assert "takes cuDNN from its base image nvcr.io/nvidia/pytorch" in (gpt_oss.line(stacks["ngc"]) or "")


def test_plan_tells_the_need_and_still_passes_the_stack(capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["plan", "--stack", "debian-verl"]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if line.strip().startswith("NOTE")]
    assert any(GPT_OSS in note for note in notes)
    assert cli.main(["plan", "--stack", "debian-verl", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)[0]
    assert found["violations"] == [] and any(need.startswith(GPT_OSS) for need in found["needs"])


def test_verl_before_0_9_1_is_told_its_megatron_engine_needs_flash_attention_2(stacks: dict[str, Stack]) -> None:
    """verl <= 0.9.0 imports flash_attn.bert_padding with no fallback on its Megatron path; 0.9.1 falls back to
    torch (read in the wheels). No image carries FlashAttention 2, so a stack with an older verl is told."""
    padding = next(n for n in needs.load() if n.name == "verl-megatron-padding")
    assert (padding.component, padding.requires, padding.with_) == ("verl", ">=0.9.1", ("verl",))
    assert "pins verl 0.8.0" in (padding.line(stacks["debian-verl"]) or "")
    assert padding.line(variant(stacks["debian-verl"], verl="0.9.0")) is not None
    assert padding.line(stacks["cuda"]) is None  # verl 0.9.1
    assert padding.line(stacks["debian"]) is None  # no verl


def test_the_readme_lists_each_need_with_the_stacks_below_it(stacks: dict[str, Stack]) -> None:
    table = plan.render_markdown(plan.make_plan(list(stacks.values())))
    line = next(row for row in table.splitlines() if row.startswith("- GPT-OSS training"))
    assert "below it: `debian-verl` (pins cuDNN 9.10.2.21)" in line and "unknown for `ngc`" in line
    assert "`cuda`" not in line and "`debian`" not in line
    assert line in (ROOT / "docs" / "stacks.md").read_text()


def test_build_tells_the_need_before_bake(capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["build", "--stack", "debian-verl", "--dry-run"]) == 0
    assert f"note: {GPT_OSS} stack 'debian-verl' pins cuDNN" in capsys.readouterr().out


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copytree(ROOT / "env", tmp_path / "env", ignore=shutil.ignore_patterns("locks"))
    monkeypatch.setenv("MCORE_IMAGES_ROOT", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize(("change", "message"), [
    ({"component": "cuddn"}, "need 'verl-gpt-oss': cuddn is not a component; use one of python,"),
    ({"with": ["verl", "ray"]}, "need 'verl-gpt-oss': ray is not a component"),
    ({"requires": "9.18+"}, "need 'verl-gpt-oss': requires '9.18+' is not a version specifier; write one such as"),
    ({"source": ""}, "field needs.0.source: '' should be non-empty; write where the need is stated"),
])
def test_a_bad_need_is_one_line_naming_the_fix(checkout: Path, change: dict, message: str,
                                              capsys: pytest.CaptureFixture) -> None:
    path = checkout / "env" / "needs.json"
    doc = json.loads(path.read_text())
    doc["needs"][0].update(change)
    path.write_text(json.dumps(doc))
    assert cli.main(["plan"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


def test_a_tree_without_needs_has_none(checkout: Path) -> None:
    (checkout / "env" / "needs.json").unlink()
    assert needs.load() == []


def test_plan_tells_a_need_in_a_line_a_terminal_shows_and_its_json_keeps_the_why(stacks: dict[str, Stack]) -> None:
    """Before: `plan` printed each need with its whole why: NOTE lines of up to 1,021 characters."""
    (found,) = plan.make_plan([stacks["debian-verl"]], every=stacks)
    told = [line for line in found.told if line.startswith("[need ")]
    assert told and all(len(line) <= 240 and line.endswith("(why: `mcore-images plan --json`)") for line in told)
    padding = next(line for line in found.to_dict()["needs"] if "verl-megatron-padding" in line)
    assert "flash_attn.bert_padding" in padding
