"""What runs before a user's code, and where a user's installs come from (shared_checks/startup.py says why each
matters): startup hooks only as packages shipped them, PyPI as the only package index, the base's own mirror as the
only APT source, no preloaded library."""

from __future__ import annotations

from typing import Any

import pytest
from tests.image.shared_checks import startup
from tests.image.utils import docker, layers, negatives
from tests.image.utils.negatives import Negative


def test_startup_hooks_are_shipped_by_packages(host: Any) -> None:
    hooks = startup.startup_hooks(host.run)
    problems = startup.startup_hook_problems(hooks)
    assert not problems, "\n".join(problems)
    for python, owners in hooks.items():
        print(f"{python}: " + ("; ".join(f"{path} ({owner})" for path, owner in sorted(owners.items())) or "none"))


def test_pip_and_uv_name_only_pypi(host: Any, image: docker.ImageInfo) -> None:
    settings = startup.pip_settings(host.run)
    problems = startup.index_problems(settings, image.env)
    assert not problems, "\n".join(problems)
    print("; ".join(f"{where}.{key}={value}" for where, key, value in settings) or "no pip settings")


def test_apt_sources_name_only_the_base_mirror(host: Any, image: docker.ImageInfo) -> None:
    files = startup.apt_sources(host.run)
    mirror = startup.base_mirror(docker.history_comments(image.ref))
    stack = layers.stack_for(image)
    flavor = stack.flavor if stack is not None else ("debian" if mirror else "unknown")
    problems = startup.apt_source_problems(files, flavor, mirror)
    assert not problems, "\n".join(problems)
    print("; ".join(f"{uri} ({path})" for path, uri, _ in startup.source_entries(files)))


def test_no_preloaded_library(host: Any, image: docker.ImageInfo) -> None:
    preload = host.run("cat /etc/ld.so.preload")
    problems = startup.preload_problems(preload.stdout if preload.rc == 0 else None, image.env)
    assert not problems, "\n".join(problems)


STARTUP_BREAKS = {
    "test_startup_hooks_are_shipped_by_packages": (
        "hook",
        'RUN printf "import os\\n" > "$(python -c "import sysconfig; print(sysconfig.get_paths()[\'purelib\'])")'
        '/zz_tune.pth"\n'),
    "test_pip_and_uv_name_only_pypi": (
        "index",
        "RUN printf '[global]\\nextra-index-url = http://packages.example/simple\\ntrusted-host = packages.example\\n'"
        " > /etc/pip.conf\n"),
    "test_apt_sources_name_only_the_base_mirror": (
        "apt",
        "RUN echo 'deb [trusted=yes] http://packages.example/debian stable main' "
        "> /etc/apt/sources.list.d/extra.list\n"),
    "test_no_preloaded_library": (
        "preload",
        "RUN find / -xdev -name libm.so.6 -path '*lib*' -print -quit > /etc/ld.so.preload "
        "&& test -s /etc/ld.so.preload\n"),
}
"""One negative image per promise, built FROM the image under test: the step that breaks it (a harmless payload: an
`import os` hook, an index nobody serves, a source never fetched, libm preloaded). One more promise is one more
entry."""
STARTUP_NEGATIVES = {name: Negative(f"startup-{kind}", steps) for name, (kind, steps) in STARTUP_BREAKS.items()}


@pytest.mark.negatives(*STARTUP_NEGATIVES.values())
@pytest.mark.parametrize("name", sorted(STARTUP_BREAKS), ids=lambda name: STARTUP_BREAKS[name][0])
def test_negative_startup_promise(name: str, negative_images: negatives.NegativeImages) -> None:
    """Each promise's test fails on the image that breaks it, and only that one of them (the ids are the breaks'
    kinds, so the selection of the promises' tests never selects these)."""
    tests = [negatives.node(globals()[test]) for test in sorted(STARTUP_BREAKS)]
    rc, failed, output = negatives.failures(negative_images.ref(STARTUP_NEGATIVES[name]), *tests)
    assert rc == 1 and failed == {name}, f"exit {rc}, failed {sorted(failed)}:\n{output[-3000:]}"
