"""Image references, digests and our OCI labels: parsed in this one place.

A reference is ``[registry/][path/]name[:tag][@sha256:<64 hex>]`` (the OCI distribution grammar,
simplified to what registries accept for our repositories). A registry host is the first path
component when it holds a '.' or ':' or is ``localhost``, as Docker decides it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
LABEL_PREFIX = "io.mcore-images."
_NAME = re.compile(r"^[a-z0-9]+([._-][a-z0-9]+)*(/[a-z0-9]+([._-][a-z0-9]+)*)*$")
_HOST = re.compile(r"^(localhost|[A-Za-z0-9.-]+\.[A-Za-z0-9.-]+|[A-Za-z0-9.-]+:\d+|\[[0-9a-fA-F:]+\](:\d+)?)(:\d+)?$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


def label(key: str) -> str:
    """``io.mcore-images.<key>``."""
    return LABEL_PREFIX + key


def is_digest(text: str) -> bool:
    return bool(DIGEST.match(text))


@dataclass(frozen=True)
class ImageRef:
    """A parsed reference. ``repository`` includes the registry host (``127.0.0.1:5000/team/img``)."""

    repository: str
    tag: str | None = None
    digest: str | None = None

    @property
    def registry(self) -> str:
        """``ghcr.io/acme`` of ``ghcr.io/acme/mcore-images`` (everything before the last '/'; '' for a bare name)."""
        return self.repository.rsplit("/", 1)[0] if "/" in self.repository else ""

    @property
    def host(self) -> str | None:
        """The registry host, when the reference names one."""
        first = self.repository.split("/", 1)[0]
        return first if "/" in self.repository and _HOST.match(first) else None

    @property
    def repo(self) -> str:
        """The last path component: ``mcore-images``."""
        return self.repository.rsplit("/", 1)[-1]

    @property
    def path(self) -> str:
        """The repository without its registry host: ``acme/mcore-images``."""
        return self.repository.split("/", 1)[1] if self.host else self.repository

    @property
    def ref(self) -> str:
        """The reference as given, digest preferred: ``repo@sha256:…`` or ``repo:tag``."""
        if self.digest:
            return f"{self.repository}@{self.digest}"
        return f"{self.repository}:{self.tag}" if self.tag else self.repository

    def with_digest(self, digest: str) -> ImageRef:
        return ImageRef(self.repository, None, digest)

    def with_tag(self, tag: str) -> ImageRef:
        return ImageRef(self.repository, tag, None)


def parse(text: str) -> ImageRef:
    """Parse a reference; ValueError (one phrase: what is wrong) for anything else."""
    if not text or text.startswith("-") or any(c.isspace() for c in text):
        raise ValueError(f"{text!r} is not an image reference")
    name, _, digest = text.partition("@")
    if digest and not DIGEST.match(digest):
        raise ValueError(f"{text!r}: the digest is not sha256:<64 hex>")
    tag = None
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        name, tag = name.rsplit(":", 1)
        if not _TAG.match(tag):
            raise ValueError(f"{text!r}: tag {tag!r} is not a valid tag")
    host, _, rest = name.partition("/")
    path = rest if rest and _HOST.match(host) else name
    if not path or not _NAME.match(path):
        raise ValueError(f"{text!r}: repository {name!r} is not a valid name (lowercase, digits, . _ - /)")
    return ImageRef(name, tag, digest or None)


EXAMPLE = "mcore-images:runtime-debian or REPO@sha256:…"
"""What a command that runs or certifies a local image asks for in place of a reference it cannot parse."""
REGISTRY_EXAMPLE = "registry/repo:tag or registry/repo@sha256:…"
"""The same, for a command that reads the image from its registry."""


def reference_problem(text: str, option: str = "", example: str = EXAMPLE) -> str | None:
    """Why ``text`` is not an image reference, and what to give instead, in one line (None when it is one): the
    one wording of that refusal, whichever command (or its ``option``) took the reference."""
    try:
        parse(text)
    except ValueError as exc:
        return f"{option + ' ' if option else ''}{exc}; give an image reference such as {example}"
    return None


def registry_problem(text: str, option: str) -> str | None:
    """Why ``text`` cannot prefix a repository (``ghcr.io/acme``, ``127.0.0.1:5000``), or None. A value
    that bake would read as two tags (a comma) or as another option never gets this far."""
    if not text:
        return None
    try:
        ref = parse(f"{text}/{DEFAULT_REPO_PROBE}")
    except ValueError:
        ref = None
    if ref is None or ref.tag or ref.digest or "," in text:
        return (f"{option} {text!r} is not a registry: write host[:port][/path] in lowercase, e.g. ghcr.io/acme "
                "or 127.0.0.1:5000")
    return None


def repo_problem(text: str, option: str) -> str | None:
    """Why ``text`` cannot be a repository name under a registry (``mcore-images``), or None."""
    if _NAME.match(text) and "," not in text:
        return None
    return f"{option} {text!r} is not a repository name: lowercase letters, digits and . _ - / (e.g. mcore-images)"


DEFAULT_REPO_PROBE = "probe"
"""A valid last path component, to judge a registry prefix by the reference grammar."""


def repository(text: str) -> str:
    """The repository of a reference (``reg:5000/team/img:tag`` → ``reg:5000/team/img``)."""
    return parse(text).repository
