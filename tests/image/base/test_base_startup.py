"""What runs before a user's code, and where a user's installs come from (shared_checks/startup.py, pip_index.py,
apt.py and library_search.py say why each matters): startup hooks only as packages shipped them, PyPI as the only
package index, the base's own mirror as the only APT source and the base's packages' keys as the only ones it trusts,
no preloaded library and no search folder anyone else can write.

Each promise is read from the tool that keeps it (pip, apt-config, ldconfig, the shells, Python's importlib), so a
setting in any of its files or variables counts. One promise the hook test cannot keep: a ``.pth`` added together
with a matching line in its distribution's RECORD (startup.py says why)."""

from __future__ import annotations

from typing import Any

import pytest
from tests.image.shared_checks import apt, library_search, pip_index, startup
from tests.image.utils import docker, layers, negatives
from tests.image.utils.negatives import Negative


def test_startup_hooks_are_shipped_by_packages(host: Any) -> None:
    hooks = startup.startup_hooks(host.run)
    problems = startup.startup_hook_problems(hooks)
    assert not problems, "\n".join(problems)
    for python, found in hooks.items():
        print(f"{python}: " + ("; ".join(f"{path} ({owner})" for path, owner in sorted(found.owners.items()))
                               or "none"))


def test_pip_and_uv_name_only_pypi(host: Any, image: docker.ImageInfo) -> None:
    settings = pip_index.pip_settings(host.run)
    problems = pip_index.index_problems(settings, image.env)
    assert not problems, "\n".join(problems)
    print("; ".join(f"{where}.{key}={value}" for where, key, value in settings) or "no pip settings")


def test_apt_sources_name_only_the_base_mirror(host: Any, image: docker.ImageInfo) -> None:
    files, _ = apt.apt_sources(host.run)
    mirror = apt.base_mirror(docker.history_comments(image.ref))
    stack = layers.stack_for(image)
    flavor = stack.flavor if stack is not None else ("debian" if mirror else "unknown")
    problems = apt.setting_problems(apt.apt_config(host.run)) + apt.apt_source_problems(files, flavor, mirror)
    assert not problems, "\n".join(problems)
    print("; ".join(f"{uri} ({path})" for path, uri, _ in apt.source_entries(files)))


def test_apt_trusts_only_packaged_keys(host: Any) -> None:
    files, trusted = apt.apt_sources(host.run)
    owners = apt.key_owners(host.run, apt.keyrings(files, trusted))
    problems = apt.key_problems(owners)
    assert not problems, "\n".join(problems)
    print("; ".join(f"{key} ({owner})" for key, owner in sorted(owners.items())) or "no keyrings")


def test_no_preloaded_library(host: Any, image: docker.ImageInfo) -> None:
    preload = host.run("cat /etc/ld.so.preload")
    problems = library_search.preload_problems(preload.stdout if preload.rc == 0 else None, image.env)
    problems += library_search.shell_problems(library_search.shell_environments(host.run))
    problems += library_search.search_path_problems(library_search.search_path(host.run, image.env))
    assert not problems, "\n".join(problems)


STARTUP_BREAKS = {
    "hook": ("test_startup_hooks_are_shipped_by_packages",
             'RUN printf "import os\\n" > "$(python -c "import sysconfig; print(sysconfig.get_paths()[\'purelib\'])")'
             '/zz_tune.pth"\n'),
    "hook-zip": ("test_startup_hooks_are_shipped_by_packages",
                 "RUN python -c \"import sys, zipfile; zipfile.ZipFile([p for p in sys.path if p.endswith('.zip')][0], "
                 "'w').writestr('sitecustomize.py', 'import os\\n')\"\n"),
    "hook-pyc": ("test_startup_hooks_are_shipped_by_packages",
                 "RUN echo 'import os' > /tmp/s.py && python -c \"import importlib.util as u, py_compile as c; "
                 "c.compile('/tmp/s.py', cfile=u.cache_from_source(u.find_spec('sitecustomize').origin), "
                 "invalidation_mode=c.PycInvalidationMode.UNCHECKED_HASH)\" && rm /tmp/s.py\n"),
    "index": ("test_pip_and_uv_name_only_pypi",
              "RUN printf '[global]\\nextra-index-url = http://packages.example/simple\\ntrusted-host = "
              "packages.example\\n' > /etc/pip.conf\n"),
    "index-cert": ("test_pip_and_uv_name_only_pypi", "ENV PIP_CERT=/opt/other-ca.pem\n"),
    "index-constraint": ("test_pip_and_uv_name_only_pypi",
                         'RUN echo "--extra-index-url https://packages.example/simple" >> "$PIP_CONSTRAINT"\n'),
    "index-spelling": ("test_pip_and_uv_name_only_pypi", "ENV PIP_INDEX_URL=https://PyPI.org:8443/simple/\n"),
    "apt": ("test_apt_sources_name_only_the_base_mirror",
            "RUN echo 'deb [trusted=yes] http://packages.example/debian stable main' "
            "> /etc/apt/sources.list.d/extra.list\n"),
    "apt-insecure": ("test_apt_sources_name_only_the_base_mirror",
                     "RUN echo 'Acquire::AllowInsecureRepositories \"true\";' > /etc/apt/apt.conf.d/99insecure\n"),
    "apt-trusted-deb822": ("test_apt_sources_name_only_the_base_mirror",
                           "RUN awk '/^deb /{print \"types: deb\\nuris: \" $2 \"\\nsuites: \" $3 \"\\ncomponents: "
                           "main\\ntrusted: yes\"; exit}' /etc/apt/sources.list > /etc/apt/sources.list.d/m.sources\n"),
    "apt-trusted-true": ("test_apt_sources_name_only_the_base_mirror",
                         "RUN sed -n 's/^deb /deb [trusted=true] /p' /etc/apt/sources.list "
                         "> /etc/apt/sources.list.d/m.list\n"),
    "apt-parts": ("test_apt_sources_name_only_the_base_mirror",
                  "RUN echo 'Dir::Etc::sourceparts \"/opt/apt-sources\";' > /etc/apt/apt.conf.d/99parts\n"),
    "apt-key": ("test_apt_trusts_only_packaged_keys",
                "RUN cp \"$(ls /etc/apt/trusted.gpg.d/* | head -n 1)\" /etc/apt/trusted.gpg.d/zz-extra.asc\n"),
    "preload": ("test_no_preloaded_library",
                "RUN find / -xdev -name libm.so.6 -path '*lib*' -print -quit > /etc/ld.so.preload "
                "&& test -s /etc/ld.so.preload\n"),
    "preload-rc": ("test_no_preloaded_library", "RUN echo 'export LD_PRELOAD=libm.so.6' >> /etc/bash.bashrc\n"),
    "library-path": ("test_no_preloaded_library", "ENV LD_LIBRARY_PATH=/opt/lib\n"),
    "library-folder": ("test_no_preloaded_library",
                       "RUN install -d -m 1777 /opt/ldlibs && echo /opt/ldlibs > /etc/ld.so.conf.d/zz-local.conf\n"),
}
"""One negative image per way to break a promise, built FROM the image under test: the test it breaks and the step
that breaks it (a harmless payload: an `import os` hook, an index nobody serves, a source never fetched, a key the
base already trusts under another name, libm preloaded). One more break is one more entry."""
STARTUP_NEGATIVES = {kind: Negative(f"startup-{kind}", steps) for kind, (_, steps) in STARTUP_BREAKS.items()}
PROMISES = sorted({test for test, _ in STARTUP_BREAKS.values()})


@pytest.mark.negatives(*STARTUP_NEGATIVES.values())
@pytest.mark.parametrize("kind", sorted(STARTUP_BREAKS))
def test_negative_startup_promise(kind: str, negative_images: negatives.NegativeImages) -> None:
    """Each break fails its promise's test, and only that one of them (the ids are the breaks' kinds, so the
    selection of the promises' tests never selects these)."""
    tests = [negatives.node(globals()[test]) for test in PROMISES]
    negatives.fails_only(negative_images.ref(STARTUP_NEGATIVES[kind]), STARTUP_BREAKS[kind][0], *tests)
