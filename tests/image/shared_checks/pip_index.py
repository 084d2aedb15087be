"""Where a user's `pip install` (or uv's) in the image takes packages from, and whom it trusts for HTTPS.

pip's effective configuration (``pip config list``: its files and PIP_* variables), the requirement and constraint
files it applies to every install (PIP_CONSTRAINT's file may carry ``--extra-index-url`` lines of its own), and uv's
variables name no index, extra index or find-links beyond PyPI, trust no host and bring no CA bundle of their own: a
user's install would otherwise take packages from elsewhere, or accept whoever signs with that bundle. PyPI is
judged by its parsed URL (https, host pypi.org, the /simple path), so a spelling of it passes and a port, a path or
a look-alike host does not.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from mcore_images.resolve.pypi import PYPI_SIMPLE

INDEX_KEYS = ("index-url", "extra-index-url", "find-links")
"""pip's settings that name where packages come from."""
CA_KEYS = ("cert", "client-cert")
"""pip's settings that replace the CA bundle it checks servers with (or present a client certificate)."""
FILE_KEYS = ("constraint", "requirement")
"""pip's settings that name files whose option lines apply to every install."""
FILE_OPTIONS = {"-i": "index-url", "--index-url": "index-url", "--extra-index-url": "extra-index-url",
                "-f": "find-links", "--find-links": "find-links", "--trusted-host": "trusted-host",
                "--cert": "cert", "--client-cert": "client-cert", "-c": "constraint", "--constraint": "constraint",
                "-r": "requirement", "--requirement": "requirement"}
"""The option lines of a requirement or constraint file that are settings, by the key pip's configuration uses."""
UV_INDEX_VARIABLES = ("UV_INDEX_URL", "UV_EXTRA_INDEX_URL", "UV_INDEX", "UV_DEFAULT_INDEX", "UV_FIND_LINKS")
CA_VARIABLES = ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR")
"""Variables through which pip's requests, uv and OpenSSL take another CA bundle."""

_PIP_LINE = re.compile(r"^(?P<section>[^.]*)\.(?P<key>[a-z-]+)='(?P<value>.*)'$")


def is_pypi(url: str) -> bool:
    """Whether ``url`` is PyPI's simple index, however spelled: https, host pypi.org (any case, port 443 or none),
    path /simple (one trailing slash allowed), no user, query or fragment."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return False
    expected = urlsplit(PYPI_SIMPLE)
    return (parts.scheme.lower() == expected.scheme and (parts.hostname or "") == expected.hostname
            and port in (None, 443) and parts.username is None and parts.password is None
            and parts.path.rstrip("/") == expected.path and not parts.query and not parts.fragment
            and not parts.path.endswith("//"))


def pip_settings(run: Any) -> list[tuple[str, str, str]]:
    """(where, key, value) of every setting pip's effective configuration holds (files and PIP_* variables), and
    of every option line of the requirement and constraint files those name (nested ones too)."""
    result = run("python -m pip config list")
    if result.rc != 0:
        raise AssertionError(f"pip config list failed in the image (exit {result.rc}): {result.stderr.strip()[-800:]}")
    found = []
    for line in result.stdout.splitlines():
        if match := _PIP_LINE.match(line.strip()):
            found.append((match["section"] or "global", match["key"], match["value"]))
    files = [value for _, key, value in found if key in FILE_KEYS for value in value.split()]
    seen: set[str] = set()
    while files:
        path = files.pop()
        if path in seen:
            continue
        seen.add(path)
        text = run(f"cat {shlex.quote(path)}")
        for key, value in file_options(text.stdout if text.rc == 0 else ""):
            found.append((path, key, value))
            if key in FILE_KEYS:
                files.append(posixpath.join(posixpath.dirname(path), value))
    return found


def file_options(text: str) -> list[tuple[str, str]]:
    """(key, value) of each option line of a requirement or constraint file (``--extra-index-url URL``,
    ``--index-url=URL``, ``-i URL``), comments dropped."""
    found = []
    for line in text.splitlines():
        match = re.match(r"^\s*(-[\w-]+)(?:\s*=\s*|\s+)(\S+)", re.sub(r"(^|\s)#.*$", "", line))
        if match and match[1] in FILE_OPTIONS:
            found.append((FILE_OPTIONS[match[1]], match[2]))
    return found


def index_problems(settings: list[tuple[str, str, str]], environ: Mapping[str, str]) -> list[str]:
    """Each index, extra index or find-links place other than PyPI, every trusted host and every CA bundle of its
    own, that pip or uv would use in the image."""
    problems = []
    for where, key, value in settings:
        if key == "trusted-host":
            problems.append(f"pip ({where}) trusts host(s) {value!r}: packages from there skip HTTPS checks")
        elif key in CA_KEYS:
            problems.append(f"pip ({where}) {key} is {value!r}: pip trusts whoever that bundle names, not the system's "
                            "CAs")
        elif key in INDEX_KEYS:
            problems += [f"pip ({where}) {key} names {url!r}: only {PYPI_SIMPLE} is allowed"
                         for url in value.split() if not is_pypi(url)]
    for name in UV_INDEX_VARIABLES:
        # UV_INDEX entries may be named: "name=https://…".
        problems += [f"{name} names {url!r}: only {PYPI_SIMPLE} is allowed"
                     for url in environ.get(name, "").split() if not is_pypi(re.sub(r"^[\w.-]+=", "", url))]
    if environ.get("UV_INSECURE_HOST"):
        problems.append(f"UV_INSECURE_HOST={environ['UV_INSECURE_HOST']!r}: uv skips HTTPS checks for it")
    problems += [f"{name}={environ[name]!r}: pip and uv trust whoever that bundle names, not the system's CAs"
                 for name in CA_VARIABLES if environ.get(name)]
    return problems
