"""Locked releases built from an sdist: which have no wheel for the stack, and whose build reaches for the network,
read from small sdists made here (no network: the index and the download are stand-ins given to the check)."""

from __future__ import annotations

import io
import tarfile
import zipfile
from typing import Any

import pytest

from mcore_images.catalogue.stacks import LeftOut, Stack
from mcore_images.errors import InputError
from mcore_images.resolve import sdist_builds
from tests.unit.conftest import variant

DOWNLOADING_SETUP = """import os
import urllib.request
from setuptools import setup

class CachedWheel:
    def run(self):
        urllib.request.urlretrieve(os.environ.get("URL", "https://example.invalid/x.whl"), "x.whl")

setup(name="downloader", version="1.0", url="https://example.invalid/project")
"""
# A download utility's own shape (wget 3.2's): its module talks to the network when used, its setup.py does not.
UTILITY_SETUP = """from distutils.core import setup

def get_version(relpath):
    from os.path import dirname, join
    for line in open(join(dirname(__file__), relpath)):
        if '__version__' in line:
            return line.split('"')[1]

setup(name='fetcher', version=get_version('fetcher.py'), url='http://example.invalid/fetcher/',
      description="pure python download utility", py_modules=['fetcher'],
      classifiers=['Topic :: System :: Networking', 'Topic :: Utilities'],
      long_description="pip install fetcher, then: python -m fetcher http://example.invalid/file")
"""
UTILITY_MODULE = """__version__ = "3.2"
import urllib.request

def download(url):
    urllib.request.urlretrieve(url)
"""
# A runtime's shape (antlr4-python3-runtime 4.9.3's): setuptools, a src layout, a scripts entry.
PLAIN_SETUP = """from setuptools import setup

setup(name='runtime', version='4.9.3', packages=['runtime'], package_dir={'': 'src'},
      install_requires=["typing ; python_version<'3.5'"], url='http://example.invalid', scripts=["bin/run"])
"""


def _tar(name: str, files: dict[str, str]) -> tuple[str, bytes]:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for path, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{name}/{path}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return f"{name}.tar.gz", buffer.getvalue()


def _zip(name: str, files: dict[str, str]) -> tuple[str, bytes]:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path, text in files.items():
            archive.writestr(f"{name}/{path}", text)
    return f"{name}.zip", buffer.getvalue()


def _reaches(filename: str, data: bytes) -> list[str]:
    return [str(r) for r in sdist_builds.scan_sdist(filename, data)]


def test_a_setup_that_downloads_a_prebuilt_wheel_is_found_where_it_does() -> None:
    found = _reaches(*_tar("downloader-1.0", {"setup.py": DOWNLOADING_SETUP, "PKG-INFO": "Name: downloader\n"}))
    assert found == ["setup.py:2 imports urllib.request", "setup.py:7 calls urllib.request.urlretrieve"]


def test_a_download_utility_and_a_plain_runtime_build_offline() -> None:
    # The utility's own module downloads (it is not run by the build); the setup.py names URLs and the word
    # "download", and pip install in its description: none of it is a build reaching for the network.
    assert _reaches(*_zip("fetcher-3.2", {"setup.py": UTILITY_SETUP, "fetcher.py": UTILITY_MODULE})) == []
    assert _reaches(*_tar("runtime-4.9.3", {"setup.py": PLAIN_SETUP, "src/runtime/__init__.py": "import socket\n",
                                            "bin/run": "#!/usr/bin/env python\n"})) == []


@pytest.mark.parametrize("code,expected", [
    ('import subprocess\nsubprocess.run(["git", "clone", "https://example.invalid/x"])\n', "2 runs git clone"),
    ('import os\nos.system("curl -L https://example.invalid/x -o x.tgz")\n', "2 runs curl"),
    ('import subprocess, sys\nCMD = [sys.executable, "-m", "pip", "install", "helper"]\nsubprocess.check_call(CMD)\n',
     "2 lists the command pip install"),
    ('import os\nos.system(f"wget {os.environ[\'URL\']}")\n', "2 runs wget"),
    ("from requests import get\n", "1 imports requests"),
    ("from urllib import request\n", "1 imports urllib.request"),
    ("import git\ngit.Repo.clone_from('https://example.invalid/x', 'x')\n", "2 calls git.Repo.clone_from"),
    ('import urllib2\nprint "fetching"\nurllib2.urlopen("https://example.invalid")\n', "1 names urllib2"),
])
def test_each_way_a_setup_reaches_the_network_is_found(code: str, expected: str) -> None:
    assert f"setup.py:{expected}" in _reaches(*_tar("x-1.0", {"setup.py": code}))


@pytest.mark.parametrize("code", [
    'import subprocess\nsubprocess.check_output(["git", "rev-parse", "HEAD"])\n',  # reads the local checkout
    'import subprocess\nsubprocess.run(["nvcc", "-V"])\n',
    "from urllib.parse import urljoin\n",
    "setup(name='wget', py_modules=['wget'], keywords=['curl', 'git'])\n",
])
def test_what_stays_offline_is_not_flagged(code: str) -> None:
    assert _reaches(*_tar("x-1.0", {"setup.py": code})) == []


def test_cmake_downloads_and_an_in_tree_backend_are_read() -> None:
    cmake = "project(x)\ninclude(FetchContent)\nFetchContent_Declare(dep URL https://example.invalid/dep.tgz)\n"
    pyproject = '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["_build"]\n'
    found = _reaches(*_tar("x-1.0", {"CMakeLists.txt": cmake, "cmake/deps.cmake": "file(DOWNLOAD https://x y)\n",
                                     "pyproject.toml": pyproject, "_build/backend.py": "import requests\n",
                                     "x/__init__.py": "import requests\n"}))
    assert found == ["CMakeLists.txt:3 uses FetchContent_Declare", "_build/backend.py:1 imports requests",
                     "cmake/deps.cmake:1 uses file(DOWNLOAD"]


@pytest.mark.parametrize("filename,python,machine,expected", [
    ("x-1.0-cp312-cp312-manylinux_2_28_x86_64.whl", "3.12", "x86_64", True),
    ("x-1.0-py3-none-any.whl", "3.12", "aarch64", True),
    ("x-1.0-cp38-abi3-manylinux2014_x86_64.whl", "3.12", "x86_64", True),
    ("x-1.0-cp311-cp311-manylinux_2_28_x86_64.whl", "3.12", "x86_64", False),
    ("x-1.0-cp312-cp312-manylinux_2_40_x86_64.whl", "3.12", "x86_64", False),  # newer than the image's glibc
    ("x-1.0-cp312-cp312-manylinux_2_28_x86_64.whl", "3.12", "aarch64", False),
    ("x-1.0-cp312-cp312-win_amd64.whl", "3.12", "x86_64", False),
    ("x-1.0.tar.gz", "3.12", "x86_64", False),
])
def test_a_wheel_counts_only_for_the_stacks_python_platform_and_glibc(filename: str, python: str, machine: str,
                                                                      expected: bool) -> None:
    from mcore_images.resolve import pypi

    supported = sdist_builds.supported_tags(python, pypi.platform_tags(machine, 39))
    assert sdist_builds.has_wheel([{"filename": filename}], supported) is expected


def _index(sdists: dict[str, tuple[str, bytes]], read: list[str]) -> tuple[Any, Any]:
    """Stand-ins for the index: a wheel for every release but those in ``sdists``, and their sdists' bytes."""

    def files_of(name: str, version: str) -> list[dict[str, Any]]:
        if name in sdists:
            return [{"filename": sdists[name][0]}]
        return [{"filename": f"{name.replace('-', '_')}-{version}-py3-none-any.whl"}]

    def archive(name: str, version: str) -> tuple[str, bytes]:
        read.append(name)
        return sdists[name]

    return files_of, archive


SDISTS = {"downloader": _tar("downloader-1.0", {"setup.py": DOWNLOADING_SETUP}),
          "fetcher": _zip("fetcher-3.2", {"setup.py": UTILITY_SETUP, "fetcher.py": UTILITY_MODULE})}
PINNED = {"downloader": "1.0", "fetcher": "3.2", "numpy": "2.3.0"}


def test_a_locked_sdist_whose_build_downloads_is_refused_naming_the_fix(stacks: dict[str, Stack]) -> None:
    read: list[str] = []
    found = sdist_builds.network_builds(stacks["cuda"], "x86_64", PINNED, *_index(SDISTS, read))
    assert sorted(read) == ["downloader", "fetcher"]  # only the releases with no wheel are read
    assert found == [
        "stack 'cuda': downloader 1.0 has no wheel for Python 3.12 on x86_64-manylinux_2_39 and its sdist's build "
        "reaches for the network (setup.py:2 imports urllib.request; setup.py:7 calls urllib.request.urlretrieve), "
        "so an offline build (the image's, the replica's) fails; leave it out (the stack's left_out in "
        "env/stacks.json, saying who requires and who imports it), or pin a release with a wheel"]


def test_a_release_the_stack_leaves_out_is_not_read(stacks: dict[str, Stack]) -> None:
    read: list[str] = []
    stack = variant(stacks["cuda"], left_out=(LeftOut("Downloader", "nothing imports it"),))
    assert sdist_builds.network_builds(stack, "aarch64", PINNED, *_index(SDISTS, read)) == []
    assert read == ["fetcher"]


def test_the_refusal_is_one_line_and_names_how_many_more(stacks: dict[str, Stack],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    sdists = {**SDISTS, "zdownloader": _tar("zdownloader-2.0", {"setup.py": DOWNLOADING_SETUP})}
    files_of, archive = _index(sdists, [])
    monkeypatch.setattr(sdist_builds.pypi, "release_files", files_of)
    monkeypatch.setattr(sdist_builds.pypi, "sdist_archive", archive)
    with pytest.raises(InputError) as caught:
        sdist_builds.refuse_network_builds(stacks["cuda"], "x86_64", {**PINNED, "zdownloader": "2.0"})
    message = str(caught.value)
    assert "\n" not in message and message.startswith("stack 'cuda': downloader 1.0 has no wheel")
    assert message.endswith("pin a release with a wheel (and 1 more such release(s))")


def test_an_index_that_cannot_be_read_is_one_line(stacks: dict[str, Stack]) -> None:
    def unreachable(name: str, version: str) -> list[dict[str, Any]]:
        raise OSError("Name or service not known")

    with pytest.raises(InputError, match=r"^cannot read numpy 2.3.0's files from the index \(Name or service not "
                                         r"known\); check the network"):
        sdist_builds.network_builds(stacks["cuda"], "x86_64", {"numpy": "2.3.0"}, unreachable)
