"""What the base layer installed: pip's check, no distribution twice, the locks' closure (each component's label and
imports: tests/image/test_versions.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.image.shared_checks import versions

from mcore_images.resolve import declared_overrides, lock_files

PIP_CHECK = Path(__file__).resolve().parents[3] / "docker" / "pip-check.py"


def test_pip_check(host: Any, image: Any, stack: Any) -> None:
    """Every installed distribution has its requirements (the locks are complete closures), judged as the build
    judges it: docker/pip-check.py, run in the image, accepts only NVIDIA's sbsa wheel tag on aarch64, and the
    requirements the stack's declared overrides break and the distributions it leaves out, named in the lock of the
    image's layer."""
    lock_text = lock_files.lock_path(stack, image.layer or "base", machine=image.machine).read_text()
    declared = [arg for pin, over in declared_overrides.named(lock_text) for arg in ("--override", f"{over}:{pin}")]
    declared += [arg for name in declared_overrides.named_left_out(lock_text) for arg in ("--left-out", name)]
    result = host.run("python -c %s" + " %s" * len(declared), PIP_CHECK.read_text(), *declared)
    assert result.rc == 0, f"pip check: {result.stdout.strip()} {result.stderr.strip()}"


def test_no_distribution_installed_twice(facts: dict[str, Any]) -> None:
    """Two metadata folders of one distribution: one layer installed over another's copy."""
    problems = versions.duplicate_problems(facts)
    assert not problems, "\n".join(problems)


def test_installed_distributions_equal_the_locks(facts: dict[str, Any], image: Any, stack: Any) -> None:
    """Beyond the catalogue's components: every distribution and version is the union of the image's locks
    (env/locks), plus pip, the tooling wheel and what the kernels layer compiles."""
    if stack.flavor == "ngc":
        pytest.skip("NGC's system Python carries the container's own packages, which the locks leave out")
    problems = versions.lock_problems(facts, stack, image.layer or "base", image.machine)
    assert not problems, "\n".join(problems)
