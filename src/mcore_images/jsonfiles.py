"""Our JSON files checked against their JSON Schemas, with one-line errors: the one ladder every document the
tool reads climbs (``load``): the file (missing, a folder, a pipe or a device, too large, unreadable), its text
(UTF-8) and its parse (JSON), which are reading.py's rungs, every file the tool reads climbs them; then its shape
(the schema, then any check of the reader's own). The first rung it misses is one InputError naming what the file
is and the fix.

The schemas of env/'s files are kept next to them in env/; those of the documents the tool reads from
elsewhere (certificates, build timings) ship inside the package (``PACKAGED``). A schema that is missing
or not JSON is a broken installation or checkout, said in one line too.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mcore_images.errors import InputError
from mcore_images.reading import MAX_BYTES, read_json
from mcore_images.schemas import PACKAGED, phrase

Place = Callable[[Any, Sequence[Any]], tuple[str, Sequence[Any]]]
"""Given the document and an error's path in it, names the start of the path ("stack 'debian'") and returns the
rest."""
Shape = Callable[[Any], list[str]]
"""A reader's own check of a parsed document, beyond its schema: one phrase per problem ([] when it has none)."""


def load(path: Path, what: str, fix: str, schema: Path | None = None, *, place: Place | None = None,
         shape: Shape | None = None, finite: bool = False, missing: str | None = None,
         max_bytes: int = MAX_BYTES) -> Any:
    """The whole ladder: ``path`` read and parsed (reading.read_json), then held to ``schema`` and ``shape``
    (``conform``)."""
    data = read_json(path, what, fix, finite=finite, missing=missing, max_bytes=max_bytes)
    conform(data, path, what, fix, schema, place=place, shape=shape)
    return data


def conform(data: Any, path: Path, what: str, fix: str, schema: Path | None = None, *, place: Place | None = None,
            shape: Shape | None = None) -> None:
    """The ladder's last rung, for a document parsed from ``path``: InputError, one line, where ``data`` breaks
    ``schema`` (the first place, and what to write there: the schema's description) or else ``shape`` (every problem
    it names, and ``fix``)."""
    found = problem(data, schema, place) if schema else None
    if found:
        raise InputError(f"{_named(what, path)}: {found}")
    problems = shape(data) if shape else []
    if problems:
        raise InputError(f"{_named(what, path)} is malformed ({'; '.join(problems)}); {fix}")


def _named(what: str, path: Path) -> str:
    return f"{what} {path}" if what else str(path)


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
    name, where = place(data, list(error.absolute_path)) if place else ("", list(error.absolute_path))
    return phrase(error, name, list(where))
