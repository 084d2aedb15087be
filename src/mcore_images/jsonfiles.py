"""Our JSON files checked against their JSON Schemas (kept next to them in env/), with one-line errors."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mcore_images.errors import InputError

Place = Callable[[Sequence[Any]], tuple[str, Sequence[Any]]]
"""Turns the start of an error's path into a name ("stack 'debian'") and returns the rest of the path."""


def schema_problem(data: Any, schema: Path, path: Path, place: Place | None = None) -> str | None:
    """The first place where ``data`` (read from ``path``) breaks ``schema``: one line that says where, what,
    and what to write instead (the schema's description of that field); None when it conforms."""
    try:
        import jsonschema
    except ImportError:
        raise InputError(f"the jsonschema package is needed to read {path.name}; `pip install jsonschema` "
                         "(`make setup` installs it)") from None
    validator = jsonschema.Draft202012Validator(json.loads(schema.read_text()))
    error = next(iter(sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))), None)
    if error is None:
        return None
    where: Sequence[Any] = list(error.absolute_path)
    name, where = place(where) if place else ("", where)
    field = ".".join(str(p) for p in where)
    hint = error.schema.get("description") or (error.parent.schema.get("description") if error.parent else None)
    located = ", ".join(p for p in (name, f"field {field}" if field else "") if p)
    return f"{path}: {located + ': ' if located else ''}{error.message}" + (f"; write {hint}" if hint else "")
