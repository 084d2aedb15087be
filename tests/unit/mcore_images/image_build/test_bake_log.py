"""BuildKit's plain log read per target and per stage, and build's closing summary from it and bake's metadata."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from mcore_images.image_build import bake, dockerfile
from mcore_images.image_build.bake_log import BakeLog
from tests.unit.conftest import ROOT

STAGE_LAYER = dockerfile.stage_layers(ROOT)
"""The layer of each stage of the checkout's Dockerfile, as `build` reads it."""

LOG = """\
#5 [base-debian base 1/2] FROM docker.io/mcore-images/base-debian:trixie
#6 [base-debian base 2/2] RUN install-lock.sh base.txt
#6 CACHED
#9 [kernels-debian kernels-build 3/4] RUN build-te.sh
#9 DONE 812.4s
#10 [kernels-debian kernels 1/1] RUN install-lock.sh kernels.txt
#10 DONE 20.1s
#12 [runtime-debian runtime 1/5] RUN install-toolchain.sh
#12 CACHED
#13 [runtime-debian runtime 2/5] RUN install-lock.sh runtime.txt
#13 DONE 3.6s
"""


def test_steps_are_counted_per_target_and_the_from_lines_left_out() -> None:
    assert BakeLog.of(LOG).per_target(STAGE_LAYER) == {
        "base-debian": {"steps_cached": 1, "steps_built": 0, "build_s": 0.0},
        "kernels-debian": {"steps_cached": 0, "steps_built": 2, "build_s": 832.5},
        "runtime-debian": {"steps_cached": 1, "steps_built": 1, "build_s": 3.6},
    }


def test_a_stage_is_cached_only_when_every_step_was() -> None:
    assert BakeLog.of(LOG).stage_status() == {"base": "cached", "kernels-build": "built", "kernels": "built",
                                              "runtime": "built"}


def test_a_one_target_bake_names_no_target_in_its_lines() -> None:
    log = BakeLog.of("#3 [runtime 1/1] RUN true\n#3 DONE 1.0s\n")
    assert log.per_target(STAGE_LAYER, "runtime-debian") == {
        "runtime-debian": {"steps_cached": 0, "steps_built": 1, "build_s": 1.0}}


def test_summary_joins_the_log_with_bakes_metadata(tmp_path: Path) -> None:
    metadata = tmp_path / "bake-metadata.json"
    metadata.write_text(json.dumps({
        "runtime-debian": {"containerimage.digest": "sha256:" + "b" * 64,
                           "image.name": "no-such-image-here:runtime-x,no-such-image-here:runtime-debian"},
        "buildx.build.warnings": [],
    }))
    summary = bake.summarize(BakeLog.of(LOG), metadata, None, 0, 123.45, STAGE_LAYER)
    rows = {r["target"]: r for r in summary["targets"]}
    assert set(rows) == {"base-debian", "kernels-debian", "runtime-debian"} and summary["wall_s"] == 123.5
    assert rows["runtime-debian"]["digest"] == "sha256:" + "b" * 64 and rows["runtime-debian"]["steps_built"] == 1
    assert rows["runtime-debian"]["tags"] == ["no-such-image-here:runtime-x", "no-such-image-here:runtime-debian"]
    text = bake.describe(summary)
    assert "kernels-debian: 2 steps built in 832 s, 0 cached" in text and "sha256:bbbb" in text


@pytest.mark.parametrize(("given", "mode"), [(("--progress", "tty"), None), (("--progress=quiet",), None)])
def test_a_progress_given_to_bake_is_left_alone(given: tuple[str, ...], mode: str | None) -> None:
    assert bake.progress_mode(given) is mode


def test_ci_gets_the_plain_log(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    assert bake.progress_mode(()) == "plain"


def test_a_shared_step_counts_for_its_stages_layer_whichever_target_printed_it() -> None:
    log = BakeLog.of("#20 [runtime-debian kernels-build 1/1] RUN build-te.sh\n#20 DONE 900.0s\n"
                     "#21 [runtime-debian-mcore019 base 2/2] RUN install-lock.sh\n#21 CACHED\n")
    assert log.per_target(STAGE_LAYER) == {
        "kernels-debian": {"steps_cached": 0, "steps_built": 1, "build_s": 900.0},
        "base-debian-mcore019": {"steps_cached": 1, "steps_built": 0, "build_s": 0.0},
    }


def test_every_dockerfile_stage_counts_for_a_layer() -> None:
    """Every stage BuildKit may print (the emulated builder's cross compiler among them) is counted for a layer."""
    stages = re.findall(r"^FROM (?:--platform=\S+ )?\S+ AS (\S+)$", (ROOT / "Dockerfile").read_text(), re.M)
    assert sorted(stages) == sorted(STAGE_LAYER)
    assert {STAGE_LAYER[s] for s in stages if s.startswith("cross-gxx")} == {"kernels"}


def test_a_checkout_without_a_dockerfile_counts_no_step(tmp_path: Path) -> None:
    assert dockerfile.stage_layers(tmp_path) == {}
    assert BakeLog.of(LOG).per_target(dockerfile.stage_layers(tmp_path)) == {}
