"""Where APT takes packages from and whom it trusts, as APT itself reads it (``apt-config``), not one file each.

- Sources: only the mirror the base was made from (a debian stack's base records its debootstrap line in the image
  history), read from the files and folder APT's configuration names, with none of the source options that switch
  signature checks off (deb822 field names and APT's booleans in any spelling: ``trusted: yes``, ``[trusted=true]``).
- Options: no ``apt.conf.d`` setting that accepts unsigned, weakly signed or downgraded repositories, or skips TLS
  checks; no source list, source folder or keyring moved elsewhere (a folder nobody reviews).
- Keys: every keyring APT trusts (its trusted folder and file, and each source's Signed-By) is a file an OS package
  ships: a key added by hand signs packages nobody vetted.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from typing import Any

from tests.image.shared_checks import installed

APT_TRUE = frozenset({"1", "yes", "true", "with", "on", "enable"})
APT_FALSE = frozenset({"0", "no", "false", "without", "off", "disable"})
"""How APT spells its booleans (apt-pkg's StringToBool)."""
INSECURE_SOURCE_OPTIONS = frozenset({"trusted", "allow-insecure", "allow-weak", "allow-downgrade-to-insecure"})
"""Source options (one-line ``[…]`` or deb822 fields) that, true, let APT take unsigned or weakly signed packages."""
INSECURE_SETTINGS = re.compile(r"^(?:binary::[^:]+::)?(?:acquire::(?:allowinsecurerepositories|allowweakrepositories|"
                               r"allowdowngradetoinsecurerepositories)|apt::get::allowunauthenticated)$")
"""apt.conf settings that, true, do the same for every source (``Binary::apt::`` scopes one to a front end)."""
TLS_CHECKS = re.compile(r"^(?:binary::[^:]+::)?acquire::https(?:::[^:]+)?::verify-(?:peer|host)$")
"""apt.conf settings that, false, accept any certificate from an HTTPS source."""
DEFAULT_PLACES = {"dir": "/", "dir::etc": "etc/apt", "dir::etc::main": "apt.conf", "dir::etc::parts": "apt.conf.d",
                  "dir::etc::sourcelist": "sources.list", "dir::etc::sourceparts": "sources.list.d",
                  "dir::etc::trusted": "trusted.gpg", "dir::etc::trustedparts": "trusted.gpg.d"}
"""Where APT reads its configuration, sources and keys unless told otherwise."""
UPSTREAM_APT_HOSTS = ("archive.ubuntu.com", "security.ubuntu.com", "ports.ubuntu.com", "developer.download.nvidia.com")
"""The sources NVIDIA's CUDA and NGC bases ship (Ubuntu's archive and NVIDIA's CUDA repository): the ngc and cuda
stacks' images may name these and nothing else."""

SOURCES_LISTER = r"""
eval "$(apt-config shell SL Dir::Etc::sourcelist/f SP Dir::Etc::sourceparts/d TK Dir::Etc::trusted/f \
    TP Dir::Etc::trustedparts/d)"
printf '%s\n' "== $SL"; cat "$SL" 2>/dev/null; echo
for f in "$SP"*.list "$SP"*.sources; do [ -f "$f" ] && { printf '%s\n' "== $f"; cat "$f"; echo; }; done
printf '%s\n' "== keys"; [ -f "$TK" ] && printf '%s\n' "$TK"
for f in "$TP"*; do [ -f "$f" ] && printf '%s\n' "$f"; done; true
"""
"""Runs in the image: each source file APT reads where ``apt-config`` resolves it (``== path`` then its text), then
the keyrings it trusts (``/f``: a file's full path, ``/d``: a folder's)."""


def apt_config(run: Any) -> list[tuple[str, str]]:
    """(key, value) of every setting ``apt-config dump`` shows: APT's defaults and every apt.conf part."""
    result = run("apt-config dump")
    if result.rc != 0:
        raise AssertionError(f"apt-config dump failed in the image (exit {result.rc}): {result.stderr.strip()[-800:]}")
    return re.findall(r'^(\S+) "(.*)";$', result.stdout, re.M)


def setting_problems(settings: list[tuple[str, str]]) -> list[str]:
    """Each setting that turns signature or TLS checks off, and each place APT reads from that is not its default."""
    problems = []
    for key, value in settings:
        lowered, word = key.lower(), value.strip().lower()
        if INSECURE_SETTINGS.match(lowered) and word in APT_TRUE:
            problems.append(f"apt.conf sets {key} {value!r}: APT takes packages without a valid signature")
        elif TLS_CHECKS.match(lowered) and word in APT_FALSE:
            problems.append(f"apt.conf sets {key} {value!r}: APT accepts any certificate")
        elif lowered in DEFAULT_PLACES and (value.rstrip("/") or "/") != DEFAULT_PLACES[lowered]:
            problems.append(f"apt.conf sets {key} {value!r} (default {DEFAULT_PLACES[lowered]!r}): APT reads sources, "
                            "keys or settings from a place nobody reviews")
    return problems


def apt_sources(run: Any) -> tuple[dict[str, str], list[str]]:
    """Every source file APT reads and its text, and every keyring file it trusts."""
    result = run(SOURCES_LISTER)
    if result.rc != 0:
        raise AssertionError(f"listing APT's sources failed (exit {result.rc}): {result.stderr.strip()[-800:]}")
    files: dict[str, str] = {}
    keys: list[str] = []
    current = None
    for line in result.stdout.splitlines():
        if line.startswith("== "):
            current = line[3:]
            if current != "keys":
                files[current] = ""
        elif current == "keys":
            keys.append(line)
        elif current is not None:
            files[current] += line + "\n"
    return files, keys


def _options(text: str) -> dict[str, str]:
    """``a=b c+=d`` of a one-line source: key (lower case, any ``+``/``-`` dropped) to value."""
    return {k.lower().rstrip("+-"): v for k, v in re.findall(r"([A-Za-z-]+[+-]?)=(\S+)", text)}


def source_entries(files: Mapping[str, str]) -> list[tuple[str, str, dict[str, str]]]:
    """(file, URI, options) of every active entry: one-line ``deb [opts] URI suite …`` and deb822 stanzas (field
    names in any case, the stanza's fields but Types and URIs as its options)."""
    entries = []
    for path, text in files.items():
        if path.endswith(".sources"):
            for stanza in re.split(r"\n\s*\n", text):
                fields = {k.lower(): v.strip() for k, v in re.findall(r"^([A-Za-z0-9-]+):[ \t]*(.*)$", stanza, re.M)}
                if fields.get("enabled", "yes").lower() in APT_FALSE:
                    continue
                options = {k: v for k, v in fields.items() if k not in ("uris", "types")}
                entries += [(path, uri, options) for uri in fields.get("uris", "").split()]
        else:
            for line in text.splitlines():
                match = re.match(r"^\s*deb(?:-src)?\s+(?:\[(?P<opts>[^\]]*)\]\s+)?(?P<uri>\S+)", line)
                if match:
                    entries.append((path, match["uri"], _options(match["opts"] or "")))
    return entries


def base_mirror(history_comments: list[str]) -> str | None:
    """The mirror a debian stack's base was bootstrapped from, read from its `docker import` message in the image
    history ("debootstrap --variant=minbase [--arch=…] SUITE MIRROR")."""
    for comment in history_comments:
        words = comment.split()
        if words[:1] == ["debootstrap"] and len(words) >= 3:
            return words[-1]
    return None


def apt_source_problems(files: Mapping[str, str], flavor: str, mirror: str | None) -> list[str]:
    """Each source that names anything but the stack's mirror (debian) or its base's upstream hosts (cuda, ngc),
    and each with an option that turns signature checks off."""
    problems = []
    for path, uri, options in source_entries(files):
        weak = sorted(k for k, v in options.items() if k in INSECURE_SOURCE_OPTIONS and v.lower() in APT_TRUE)
        weak += [f"signed-by={v}" for k, v in options.items() if k == "signed-by" and v.startswith("/dev")]
        if weak:
            problems.append(f"{path}: {uri} with {', '.join(weak)}: APT takes its packages unchecked")
        if flavor == "debian":
            if mirror is None:
                problems.append(f"{path}: {uri}: the image history names no debootstrap mirror to compare with")
            elif uri.rstrip("/") != mirror.rstrip("/"):
                problems.append(f"{path}: {uri} is not the mirror the base was made from ({mirror})")
        elif not re.match(r"^https?://(?:[^/]*\.)?(?:" + "|".join(map(re.escape, UPSTREAM_APT_HOSTS)) + r")(?:/|$)",
                          uri):
            hosts = ", ".join(UPSTREAM_APT_HOSTS)
            problems.append(f"{path}: {uri} is none of the hosts the {flavor} base ships ({hosts})")
    return problems


def keyrings(files: Mapping[str, str], trusted: list[str]) -> list[str]:
    """Every keyring APT trusts: its trusted folder and file, and each source's Signed-By file."""
    signed = [v for _, _, options in source_entries(files) for k, v in options.items()
              if k == "signed-by" and v.startswith("/")]
    return sorted(set(trusted) | set(signed))


def key_owners(run: Any, keys: list[str]) -> dict[str, str | None]:
    """Who ships each keyring unchanged (``dpkg`` or None), as the OS's Python sees the package database."""
    if not keys:
        return {}
    quoted = " ".join(shlex.quote(k).replace("%", "%%") for k in keys)
    return installed.owners(run, f"printf '%%s\\n' {quoted}", python="/usr/bin/python3")


def key_problems(owners: Mapping[str, str | None]) -> list[str]:
    """Each keyring APT trusts that no OS package ships as it is."""
    return [f"{key}: APT trusts this keyring, which no OS package ships as it is: its keys sign packages nobody "
            "vetted" for key, owner in sorted(owners.items()) if owner != "dpkg"]
