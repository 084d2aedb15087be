"""Version comparisons, all through `packaging` (PEP 440), in the few shapes the tooling needs.

Every module of the tooling takes packaging's classes from here: where the packaging distribution is
missing (someone else's image), the copy pip vendors is the same library.

Rules compare *release lines*: "megatron-core >= 0.17" holds for 0.17.0rc1 too (a pre-release of 0.17
already has 0.17's changes), so floors compare public release segments, padded with zeros. Installed
versions are compared with pins by public version (a local build tag such as +cu130 or +8145d630e8
is not part of what was pinned).
"""

from __future__ import annotations

try:
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import InvalidVersion, Version
except ImportError:  # the tooling in an environment without packaging (a foreign image): pip carries it
    from pip._vendor.packaging.requirements import InvalidRequirement, Requirement  # type: ignore[no-redef]
    from pip._vendor.packaging.specifiers import InvalidSpecifier, SpecifierSet  # type: ignore[no-redef]
    from pip._vendor.packaging.version import InvalidVersion, Version  # type: ignore[no-redef]

__all__ = ["InvalidRequirement", "InvalidSpecifier", "InvalidVersion", "Requirement", "SpecifierSet", "Version",
           "after", "at_least", "bounded_below", "major_minor", "parse", "pin_satisfied", "same"]


def parse(version: str) -> Version:
    """A Version, or ValueError naming the text (callers turn it into their one-line error)."""
    try:
        return Version(version)
    except InvalidVersion:
        raise ValueError(f"not a version: {version!r}") from None


def _release(version: str, width: int) -> tuple[int, ...]:
    release = parse(version).release
    return release + (0,) * (width - len(release))


def at_least(version: str, floor: str) -> bool:
    """True when ``version``'s release line is at or above ``floor`` ('0.17.0rc1' is at least '0.17')."""
    width = max(len(parse(version).release), len(parse(floor).release))
    return _release(version, width) >= _release(floor, width)


def after(version: str, last: str) -> bool:
    """True when ``version``'s release line is past ``last`` ('1.2.3' is after '1.2.2'; '1.2.2.post1' is not)."""
    width = max(len(parse(version).release), len(parse(last).release))
    return _release(version, width) > _release(last, width)


def major_minor(version: str) -> str:
    """'13.0.2' -> '13.0'; '3.12' -> '3.12'."""
    release = parse(version).release
    return ".".join(str(p) for p in (*release, 0)[:2])


def same(pinned: str, installed: str) -> bool:
    """An installed version satisfies a pin: '1.2.0a0' matches '1.2.0a0+8145d630e8', '1.2' matches
    '1.2.0' (PEP 440 equality pads releases), a pin with a local part must match it exactly."""
    try:
        want, have = Version(pinned), Version(installed)
    except InvalidVersion:
        return pinned == installed
    return want == have if want.local else want == Version(have.public)


def bounded_below(specifiers: SpecifierSet, limit: str) -> bool:
    """True when the specifier set admits no version at or above ``limit``: some specifier of it is an
    upper bound at or under the limit (``<5`` and ``<5.0`` bound below '5'; ``!=5.0.0`` does not)."""
    top = parse(limit)
    for spec in specifiers:
        op, text = spec.operator, spec.version
        if op == "==" and text.endswith(".*"):
            prefix = parse(text[:-2]).release
            if prefix < top.release[: len(prefix)]:
                return True
            continue
        if op == "~=":
            release = parse(text).release
            ceiling = Version(".".join(map(str, (*release[:-2], release[-2] + 1))))
            if ceiling <= top:
                return True
            continue
        version = parse(text)
        if (op == "<" and version <= top) or (op in ("<=", "==", "===") and version < top):
            return True
    return False


def pin_satisfied(kind: str, pinned: str, installed: str | None) -> bool:
    """An installed version (None: absent) satisfies a component's pin of this kind (components.PIN_KINDS):
    'none' wants it absent; a commit or 'base' wants it present (an installed version cannot name a
    commit); major_minor compares MAJOR.MINOR; a version compares by ``same``."""
    if pinned == "none":
        return installed is None
    if installed is None:
        return False
    if kind == "commit" or pinned == "base":
        return True
    if kind == "major_minor":
        try:
            return major_minor(installed) == major_minor(pinned)
        except ValueError:
            return False
    return same(pinned, installed)


def can_meet(first: SpecifierSet, second: SpecifierSet) -> bool:
    """Whether some version satisfies both specifier sets: each bound either names is tried, and the next
    release after it (enough for the ranges requirements write; no index is asked)."""
    candidates: set[str] = {"0", "99999"}
    for spec in (*first, *second):
        base = spec.version.rstrip(".*")
        try:
            release = list(Version(base).release)
        except InvalidVersion:
            continue
        candidates.add(base)
        candidates.add(".".join(map(str, [*release[:-1], release[-1] + 1])))
        candidates.add(".".join(map(str, [*release, 1])))
    return any(first.contains(v, prereleases=True) and second.contains(v, prereleases=True) for v in candidates)
