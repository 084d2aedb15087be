"""The smoke's programs live in the tooling's namespace (`python -m mcore_images.smoke`, `.bridge`, `.bench`). The
names users scripted before still run, saying the new name first, and the old top-level name never shadows a
training repository's own `smoke`: the image's `smoke` folder is a namespace folder, which Python takes only when
no regular package or module of that name is found anywhere on sys.path. Negative images: one without the old
entry points, one whose `smoke` is a regular package."""

from __future__ import annotations

from typing import Any

import pytest
from tests.image.utils import negatives
from tests.image.utils.negatives import Negative

OLD = {"smoke": "--dry-run --nproc 2", "smoke.bench": "--dry-run", "smoke.bridge": "--help"}
"""Each old entry point, with arguments that need no GPU."""

USER_REPO = "mkdir -p /tmp/user-repo/smoke && echo 'OWN = True' > /tmp/user-repo/smoke/__init__.py && cd / && "


@pytest.mark.parametrize("module", sorted(OLD))
def test_the_old_entry_points_run_the_new_programs(host: Any, module: str) -> None:
    result = host.run(f"cd /tmp && python -m {module} {OLD[module]}")
    assert result.rc == 0, result.stderr[-2000:]
    assert result.stderr.splitlines()[0] == (f"note: `python -m {module}` is `python -m mcore_images.{module}` now; "
                                             "running that"), result.stderr[:500]


def test_a_training_repos_own_smoke_wins_wherever_it_sits_on_the_path(host: Any) -> None:
    """Even behind site-packages on sys.path (appended last), a repository's `smoke` package is the one imported."""
    probe = ("import sys; sys.path.append('/tmp/user-repo'); import smoke; "
             "print(getattr(smoke, 'OWN', False), getattr(smoke, '__file__', None))")
    result = host.run(USER_REPO + f'python -c "{probe}"')
    assert result.rc == 0 and result.stdout.split()[0] == "True", result.stdout + result.stderr


SITE = "$(python -c 'import mcore_images, os; print(os.path.dirname(os.path.dirname(mcore_images.__file__)))')"
NO_OLD_NAMES = Negative("no-old-smoke-names", f"RUN rm -rf {SITE}/smoke\n")
REGULAR_SMOKE = Negative("regular-smoke-package", f"RUN touch {SITE}/smoke/__init__.py\n")


@pytest.mark.negatives(NO_OLD_NAMES, REGULAR_SMOKE)
def test_negative_without_the_old_names_or_with_a_regular_smoke_package(
        negative_images: negatives.NegativeImages) -> None:
    cases = {
        NO_OLD_NAMES: (test_the_old_entry_points_run_the_new_programs,
                       {f"test_the_old_entry_points_run_the_new_programs[{m}]" for m in OLD}),
        REGULAR_SMOKE: (test_a_training_repos_own_smoke_wins_wherever_it_sits_on_the_path,
                        {"test_a_training_repos_own_smoke_wins_wherever_it_sits_on_the_path"}),
    }
    for negative, (test, expected) in cases.items():
        rc, failed, output = negatives.failures(negative_images.ref(negative), test)
        assert rc == 1 and failed == expected, f"{negative.name}: exit {rc}, failed {sorted(failed)}:\n{output[-3000:]}"
