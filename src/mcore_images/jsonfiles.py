"""Our JSON files checked against their JSON Schemas, with one-line errors.

The schemas of env/'s files are kept next to them in env/; those of the documents the tool reads from
elsewhere (certificates, build timings) ship inside the package (``PACKAGED``). A schema that is missing
or not JSON is a broken installation or checkout, said in one line too.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mcore_images import PACKAGE
from mcore_images.errors import InputError, shown

Place = Callable[[Sequence[Any]], tuple[str, Sequence[Any]]]
"""Turns the start of an error's path into a name ("stack 'debian'") and returns the rest of the path."""

PACKAGED = PACKAGE / "data"
CERTIFICATE_SCHEMA = PACKAGED / "certificate.schema.json"
"""The certificate fields the report, verify, attach and promote read, with their types."""
BUILD_TIMINGS_SCHEMA = PACKAGED / "build-timings.schema.json"
"""What `mcore-images build-timing --out` writes, as the report reads it."""


def read_json(path: Path, what: str, fix: str, finite: bool = False) -> Any:
    """``path`` parsed; InputError naming ``what`` it is and ``fix`` when it is missing, unreadable, not UTF-8
    or not JSON (``finite``: or holds NaN or Infinity, which Python's json reads and no measurement is)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"), **({"parse_constant": _no_constant} if finite else {}))
    except FileNotFoundError:
        raise InputError(f"{what} {path} not found; {fix}") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{what} {path} is not UTF-8 text (byte {exc.start}: {exc.reason}); {fix}") from None
    except OSError as exc:
        raise InputError(f"{what} {path} cannot be read ({exc.strerror or exc}); {fix}") from None
    except ValueError as exc:
        raise InputError(f"{what} {path} is not JSON ({exc}); {fix}") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


@functools.cache
def _validator(schema: Path) -> Any:
    try:
        import jsonschema
    except ImportError:
        raise InputError("the jsonschema package is needed to check the tool's JSON files; `pip install "
                         "jsonschema` (`make setup` installs it)") from None
    fix = "reinstall mcore-images" if schema.is_relative_to(PACKAGED) else f"restore {schema.name} from git"
    document = read_json(schema, "the JSON Schema", fix)
    try:
        jsonschema.Draft202012Validator.check_schema(document)
    except jsonschema.SchemaError as exc:
        raise InputError(f"the JSON Schema {schema} is not a valid schema ({exc.message}); {fix}") from None
    return jsonschema.Draft202012Validator(document)


def problem(data: Any, schema: Path, place: Place | None = None) -> str | None:
    """The first place where ``data`` breaks ``schema``: one phrase that says where, what, and what to write
    instead (the schema's description of that field); None when it conforms."""
    error = next(iter(sorted(_validator(schema).iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))),
                 None)
    if error is None:
        return None
    where: Sequence[Any] = list(error.absolute_path)
    name, where = place(where) if place else ("", where)
    field = ".".join(str(p) for p in where)
    hint = error.schema.get("description") or (error.parent.schema.get("description") if error.parent else None)
    located = ", ".join(p for p in (name, f"field {field}" if field else "") if p)
    message = error.message
    if isinstance(error.instance, str) and repr(error.instance) in message:  # the user's text, escaped and cut
        message = message.replace(repr(error.instance), f"'{shown(error.instance)}'")
    message = message if len(message) <= 160 else message[:157] + "..."
    return f"{located + ': ' if located else ''}{message}" + (f"; write {hint}" if hint else "")


def schema_problem(data: Any, schema: Path, path: Path, place: Place | None = None) -> str | None:
    """``problem`` for data read from ``path``, naming the file first."""
    found = problem(data, schema, place)
    return None if found is None else f"{path}: {found}"
