"""The image tests' startup and source checks (tests/image/shared_checks/: startup.py, pip_index.py, apt.py,
library_search.py) judged on inputs written here: what each calls a problem, and what it leaves alone."""

from __future__ import annotations

from tests.image.shared_checks import apt, library_search, pip_index, startup

PYPI = "https://pypi.org/simple"


def test_hooks_nobody_ships_are_named_and_shipped_ones_pass() -> None:
    site = "/opt/venv/lib/python3.11/site-packages"
    hooks = {"python": startup.Hooks({f"{site}/distutils-precedence.pth": "pip setuptools",
                                      f"{site}/zz_tune.pth": None}),
             "/usr/bin/python3": startup.Hooks({"/etc/python3.11/sitecustomize.py": "dpkg"})}
    problems = startup.startup_hook_problems(hooks)
    assert len(problems) == 1 and problems[0].startswith("/opt/venv/lib/python3.11/site-packages/zz_tune.pth: ")
    pyc = "/usr/lib/python3.11/__pycache__/sitecustomize.cpython-311.pyc"
    problems = startup.startup_hook_problems({"python": startup.Hooks({}, unchecked=[pyc], forged=[pyc])})
    assert len(problems) == 2 and all(p.startswith(pyc) for p in problems)


def test_only_pypi_and_no_trusted_host() -> None:
    settings = [("global", "constraint", "/etc/pip/constraints.txt"), (":env:", "index-url", PYPI),
                ("global", "extra-index-url", f"{PYPI}/ http://packages.example/simple"),
                ("global", "trusted-host", "packages.example"), ("global", "find-links", "/opt/wheels")]
    problems = pip_index.index_problems(settings, {"UV_EXTRA_INDEX_URL": "http://uv.example/simple"})
    assert len(problems) == 4, problems
    assert any("'http://packages.example/simple'" in p for p in problems)
    assert any("trusts host(s) 'packages.example'" in p for p in problems)
    assert any("'/opt/wheels'" in p for p in problems) and any(p.startswith("UV_EXTRA_INDEX_URL") for p in problems)
    assert pip_index.index_problems([(":env:", "index-url", PYPI)], {}) == []


def test_apt_sources_are_the_base_mirror_without_unchecked_options() -> None:
    files = {
        "/etc/apt/sources.list": "deb http://deb.debian.org/debian trixie main\n# deb http://old.example/ x main\n",
        "/etc/apt/sources.list.d/extra.list": "deb [trusted=yes] http://packages.example/debian stable main\n",
        "/etc/apt/sources.list.d/more.sources": "Types: deb\nURIs: http://deb.debian.org/debian/\nSuites: trixie\n"
                                               "Trusted: yes\n\nTypes: deb\nURIs: http://off.example/\nEnabled: no\n",
    }
    mirror = apt.base_mirror(["", "debootstrap --variant=minbase trixie http://deb.debian.org/debian"])
    assert mirror == "http://deb.debian.org/debian"
    problems = apt.apt_source_problems(files, "debian", mirror)
    assert len(problems) == 3, problems
    assert sum("packages.example" in p for p in problems) == 2 and any("more.sources" in p for p in problems)
    assert apt.apt_source_problems({"/etc/apt/sources.list": files["/etc/apt/sources.list"]}, "debian",
                                       mirror) == []
    ubuntu = {"/etc/apt/sources.list": "deb http://archive.ubuntu.com/ubuntu noble main\n"
                                       "deb https://developer.download.nvidia.com/compute/cuda/repos/x/ /\n"}
    assert apt.apt_source_problems(ubuntu, "cuda", None) == []
    assert apt.apt_source_problems(files, "debian", None)  # no recorded mirror: nothing to compare with


def test_preload_file_and_variable() -> None:
    assert library_search.preload_problems(None, {}) == []
    assert library_search.preload_problems("# nothing\n\n", {"LD_LIBRARY_PATH": "/usr/local/nvidia/lib64"}) == []
    assert len(library_search.preload_problems(None, {"LD_LIBRARY_PATH": "/x", "LD_AUDIT": "/a.so"})) == 2
    assert len(library_search.preload_problems("/lib/libm.so.6\n", {"LD_PRELOAD": "/x.so"})) == 2


def test_pypi_is_judged_by_its_parsed_url() -> None:
    assert all(pip_index.is_pypi(u) for u in (PYPI, PYPI + "/", "https://PyPI.org/simple", "https://pypi.org:443/simple"))
    assert not any(pip_index.is_pypi(u) for u in (
        "http://pypi.org/simple", "https://pypi.org:8443/simple", "https://pypi.org/simple/extra",
        "https://pypi.org.packages.example/simple", "https://pypi.org@packages.example/simple",
        "https://user@pypi.org/simple", "https://pypi.org/simple?x=1", "https://pypi.org:x/simple"))


def test_ca_bundles_and_index_lines_of_constraint_files() -> None:
    assert pip_index.file_options("torch==2.9.0\n# --index-url http://x\n--extra-index-url=https://e.example/s\n"
                                  "-i https://pypi.org/simple\n-c more.txt\n") == [
        ("extra-index-url", "https://e.example/s"), ("index-url", PYPI), ("constraint", "more.txt")]
    settings = [(":env:", "cert", "/opt/ca.pem"), ("/c.txt", "extra-index-url", "https://e.example/s")]
    environ = {"SSL_CERT_FILE": "/opt/ca.pem", "UV_INDEX": f"pypi={PYPI}"}
    problems = pip_index.index_problems(settings, environ)
    assert len(problems) == 3, problems


def test_apt_settings_that_skip_checks_or_move_places() -> None:
    settings = [("Dir", "/"), ("Dir::Etc", "etc/apt/"), ("Dir::Etc::sourceparts", "sources.list.d"),
                ("Acquire::AllowInsecureRepositories", "0"), ("Binary::apt::APT::Get::AllowUnauthenticated", "yes"),
                ("Acquire::AllowDowngradeToInsecureRepositories", "true"), ("Acquire::https::Verify-Peer", "false"),
                ("Dir::Etc::trustedparts", "/opt/keys")]
    problems = apt.setting_problems(settings)
    assert len(problems) == 4, problems


def test_apt_trust_options_in_any_spelling() -> None:
    files = {"/etc/apt/sources.list.d/m.sources": "types: deb\nuris: http://deb.debian.org/debian\ntrusted: yes\n",
             "/etc/apt/sources.list.d/m.list": "deb [trusted=true] http://deb.debian.org/debian bookworm main\n",
             "/etc/apt/sources.list.d/k.list": "deb [signed-by=/usr/share/keyrings/k.gpg] http://deb.debian.org/debian"}
    problems = apt.apt_source_problems(files, "debian", "http://deb.debian.org/debian")
    assert len(problems) == 2 and all("trusted" in p for p in problems), problems
    assert apt.keyrings(files, ["/etc/apt/trusted.gpg.d/a.asc"]) == ["/etc/apt/trusted.gpg.d/a.asc",
                                                                      "/usr/share/keyrings/k.gpg"]
    assert apt.key_problems({"/etc/apt/trusted.gpg.d/a.asc": "dpkg", "/etc/apt/trusted.gpg.d/x.asc": None}) == [
        apt.key_problems({"/etc/apt/trusted.gpg.d/x.asc": None})[0]]


def test_loader_variables_from_start_up_files_and_writable_folders() -> None:
    shells = {"bash -ic": {"LD_PRELOAD": "libm.so.6"}, "sh -lc": {}, "/etc/environment": {"LD_LIBRARY_PATH": "/o"}}
    assert len(library_search.shell_problems(shells)) == 2
    found = {"dirs": {"/opt/ldlibs": "/etc/ld.so.conf.d/zz.conf", "/usr/lib": "<builtin>"},
             "writable": {"/opt/ldlibs": [["/opt/ldlibs", 0, "0o1777"]]}}
    problems = library_search.search_path_problems(found)
    assert len(problems) == 1 and problems[0].startswith("/opt/ldlibs (from /etc/ld.so.conf.d/zz.conf)")
