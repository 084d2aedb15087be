"""The image tests' startup and source checks (tests/image/shared_checks/startup.py) judged on inputs written here:
what each calls a problem, and what it leaves alone."""

from __future__ import annotations

from tests.image.shared_checks import startup

PYPI = "https://pypi.org/simple"


def test_hooks_nobody_ships_are_named_and_shipped_ones_pass() -> None:
    hooks = {"python": {"/opt/venv/lib/python3.11/site-packages/distutils-precedence.pth": "pip setuptools",
                        "/opt/venv/lib/python3.11/site-packages/zz_tune.pth": None},
             "/usr/bin/python3": {"/etc/python3.11/sitecustomize.py": "dpkg"}}
    problems = startup.startup_hook_problems(hooks)
    assert len(problems) == 1 and problems[0].startswith("/opt/venv/lib/python3.11/site-packages/zz_tune.pth: ")


def test_only_pypi_and_no_trusted_host() -> None:
    settings = [("global", "constraint", "/etc/pip/constraints.txt"), (":env:", "index-url", PYPI),
                ("global", "extra-index-url", f"{PYPI}/ http://packages.example/simple"),
                ("global", "trusted-host", "packages.example"), ("global", "find-links", "/opt/wheels")]
    problems = startup.index_problems(settings, {"UV_EXTRA_INDEX_URL": "http://uv.example/simple"})
    assert len(problems) == 4, problems
    assert any("'http://packages.example/simple'" in p for p in problems)
    assert any("trusts host(s) 'packages.example'" in p for p in problems)
    assert any("'/opt/wheels'" in p for p in problems) and any(p.startswith("UV_EXTRA_INDEX_URL") for p in problems)
    assert startup.index_problems([(":env:", "index-url", PYPI)], {}) == []


def test_apt_sources_are_the_base_mirror_without_unchecked_options() -> None:
    files = {
        "/etc/apt/sources.list": "deb http://deb.debian.org/debian trixie main\n# deb http://old.example/ x main\n",
        "/etc/apt/sources.list.d/extra.list": "deb [trusted=yes] http://packages.example/debian stable main\n",
        "/etc/apt/sources.list.d/more.sources": "Types: deb\nURIs: http://deb.debian.org/debian/\nSuites: trixie\n"
                                               "Trusted: yes\n\nTypes: deb\nURIs: http://off.example/\nEnabled: no\n",
    }
    mirror = startup.base_mirror(["", "debootstrap --variant=minbase trixie http://deb.debian.org/debian"])
    assert mirror == "http://deb.debian.org/debian"
    problems = startup.apt_source_problems(files, "debian", mirror)
    assert len(problems) == 3, problems
    assert sum("packages.example" in p for p in problems) == 2 and any("more.sources" in p for p in problems)
    assert startup.apt_source_problems({"/etc/apt/sources.list": files["/etc/apt/sources.list"]}, "debian",
                                       mirror) == []
    ubuntu = {"/etc/apt/sources.list": "deb http://archive.ubuntu.com/ubuntu noble main\n"
                                       "deb https://developer.download.nvidia.com/compute/cuda/repos/x/ /\n"}
    assert startup.apt_source_problems(ubuntu, "cuda", None) == []
    assert startup.apt_source_problems(files, "debian", None)  # no recorded mirror: nothing to compare with


def test_preload_file_and_variable() -> None:
    assert startup.preload_problems(None, {}) == []
    assert startup.preload_problems("# nothing\n\n", {"LD_LIBRARY_PATH": "/x"}) == []
    assert len(startup.preload_problems("/lib/libm.so.6\n", {"LD_PRELOAD": "/x.so"})) == 2
