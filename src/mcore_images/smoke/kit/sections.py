"""The smoke certificate's sections that its programs add, as plug-ins: each program registers its own here.

The smoke writes the certificate; the attention check, the bench, the bridge check and the verl step each add one
section under a key of their own. A program takes part by shipping a ``section`` module in its package that calls
``register`` with the key, the identifier its ``schema`` field carries (if it has one) and how the section reads as
Markdown; the section's shape is its definition in data/certificate.schema.json. The certificate
(smoke/certificate.py) knows no program by name: ``registered()`` imports every such module of the smoke's packages
once, so a certificate renders whole in whichever program writes it.

Standard library only, as every ``section`` module must be: the certificate reads them on machines without torch.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SMOKE = Path(__file__).resolve().parents[1]
"""The smoke's package folder: its sub-packages are the programs."""
PACKAGE = __name__.rsplit(".", 2)[0]
"""The smoke's package name (``mcore_images.smoke``)."""
MODULE = "section"
"""The module a program's package names its section in."""


@dataclass(frozen=True)
class Section:
    """One program's part of the certificate."""

    key: str
    """The certificate's key for it (``bench``); its shape is ``$defs/<key>`` of the certificate's schema."""
    markdown: Callable[[dict[str, Any]], list[str]]
    """The section as Markdown lines for certificate.md."""
    schema: str | None = None
    """The identifier its ``schema`` field must carry (schemas.py), None for a section without one."""
    program: str = ""
    """The package that registered it."""


_REGISTERED: dict[str, Section] = {}


def register(key: str, markdown: Callable[[dict[str, Any]], list[str]], schema: str | None = None,
             program: str = "") -> Section:
    """Take a program's section; a key another program already took is a ValueError naming both."""
    section = Section(key, markdown, schema, program)
    held = _REGISTERED.setdefault(key, section)
    if held.program != program:
        raise ValueError(f"certificate section {key!r} of {program} is already {held.program}'s: give it another key")
    return held


def programs() -> list[str]:
    """The smoke's packages that ship a section module (by file: nothing is imported)."""
    return [info.name for info in pkgutil.iter_modules([str(SMOKE)]) if info.ispkg
            and (SMOKE / info.name / f"{MODULE}.py").is_file()]


def registered() -> dict[str, Section]:
    """Every program's section, by key (each section module imported once)."""
    for name in programs():
        importlib.import_module(f"{PACKAGE}.{name}.{MODULE}")
    return dict(_REGISTERED)
