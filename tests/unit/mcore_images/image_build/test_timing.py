"""Parsing BuildKit's plain output into per-stage cached/built, and the layer-reuse verdict."""

from __future__ import annotations

import pytest

from mcore_images.image_build import timing

LOG = """\
#11 [base-debian os-debian 1/2] FROM docker.io/mcore-images/base-debian:trixie@sha256:be6b
#11 DONE 0.0s
#12 [base-debian base 1/1] RUN --mount=type=bind,source=docker/install-lock.sh
#12 CACHED
#14 [kernels-debian builder 1/2] RUN if [ debian != ngc ]
#14 CACHED
#15 [kernels-debian kernels-build 2/3] RUN --mount=type=bind,source=docker/build-te.sh
#15 CACHED
#16 [runtime-debian kernels 1/1] RUN --mount=type=bind,source=docker/install-lock.sh
#16 CACHED
#17 [runtime-debian runtime 1/6] RUN --mount=type=bind,source=docker/install-toolchain.sh,target=/mnt/build/in
#17 CACHED
#18 [runtime-debian runtime 2/6] RUN --mount=type=bind,source=docker/install-lock.sh
#18 12.3 Successfully installed megatron-core-0.16.0
#18 DONE 14.2s
#19 [runtime-debian runtime 3/6] COPY smoke /opt/mcore-images/smoke
#19 CACHED
"""


def test_stage_status() -> None:
    status = timing.stage_status(LOG)
    assert status == {"base": "cached", "builder": "cached", "kernels-build": "cached", "kernels": "cached",
                      "runtime": "built"}


def test_reuse_check_passes_and_fails() -> None:
    good = timing.read_run("mcore", [], 30.0, 0, LOG)
    assert good.steps == {"install-toolchain.sh": "cached"}
    assert timing.check_reuse(good, ("base", "kernels")) == []
    rebuilt = LOG.replace("#16 CACHED", "#16 DONE 40.0s")
    bad = timing.read_run("mcore", [], 90.0, 0, rebuilt)
    assert timing.check_reuse(bad, ("base", "kernels")) == ["kernels was built, expected cached"]


def test_a_megatron_core_bump_must_keep_the_toolchain_step() -> None:
    # An ARG MCORE_VERSION above the toolchain step puts the pin into its cache key: the bump reinstalls gcc.
    rerun = timing.read_run("mcore", [], 90.0, 0, LOG.replace("#17 CACHED", "#17 DONE 55.0s"))
    assert timing.check_reuse(rerun, ("base", "kernels")) == [
        "the runtime step running install-toolchain.sh was built, expected cached"]
    unseen = timing.read_run("mcore", [], 90.0, 0, LOG.replace("install-toolchain.sh", "other.sh"))
    assert timing.check_reuse(unseen, ("base",)) == [
        "the runtime step running install-toolchain.sh was not seen, expected cached"]
    failed = timing.Run("mcore", [], 1.0, 1, {})
    assert timing.check_reuse(failed, ("base",))[0].startswith("build failed")


def test_markdown_ratio() -> None:
    runs = [timing.Run("cold", [], 1000.0, 0, {"base": "built"}),
            timing.Run("mcore", [], 40.0, 0, {"base": "cached", "runtime": "built"})]
    table = timing.markdown(runs, {"runtime": 9.1})
    assert "| mcore | 40.0 | 4.0 % |" in table and "| runtime | 9.1 |" in table


def test_the_cold_scenario_asks_before_emptying_the_build_cache(monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture) -> None:
    """Before: `build-timing --scenarios cold` ran `docker builder prune -af` unasked (every project's cache)."""
    from mcore_images import cli

    pruned: list[bool] = []
    monkeypatch.setattr(timing, "prune", lambda: pruned.append(True))
    assert cli.main(["build-timing", "--scenarios", "cold"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--prune-build-cache" in err[0] and not pruned
