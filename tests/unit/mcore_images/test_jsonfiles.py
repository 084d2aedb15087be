"""JSON files and their schemas: a file that is missing, not UTF-8 or not JSON, and a schema that is missing,
corrupt or not a schema, are each one line and exit 2; the packaged schemas accept what the real writers write."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path

import pytest

from mcore_images import cli, jsonfiles, schemas
from mcore_images.catalogue.stacks import load_stacks
from mcore_images.errors import InputError
from mcore_images.release import policy
from tests.support.certificates import add_sections, write_certificate


def test_a_stacks_file_that_is_not_utf8_is_one_line_exit_2(root: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "env").mkdir()
    (tmp_path / "env" / "stacks.json").write_bytes((root / "env" / "stacks.json").read_bytes()
                                                   .replace(b'"debian"', b'"d\xe9bian"', 1))
    with pytest.raises(InputError, match=r"stacks.json is not UTF-8 text \(byte \d+: invalid continuation byte\)"):
        load_stacks(tmp_path / "env" / "stacks.json")
    monkeypatch.setenv("MCORE_IMAGES_ROOT", str(tmp_path))
    assert cli.main(["report", "--out", str(tmp_path / "site")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not UTF-8 text" in err and not (tmp_path / "site").exists()


def test_a_stacks_path_that_is_a_folder_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"is a folder; name the file in it"):
        load_stacks(tmp_path)


@pytest.mark.parametrize(("schema", "message"), [
    (None, "the JSON Schema {path} not found; restore broken.schema.json from git"),
    (b"{not json", "the JSON Schema {path} is not JSON"),
    (b"\xff{}", "the JSON Schema {path} is not UTF-8 text"),
    (b'{"type": 5}', "the JSON Schema {path} is not a valid schema (5 is not valid under any of the given schemas)"),
], ids=["missing", "not-json", "not-utf8", "not-a-schema"])
def test_a_broken_schema_is_one_line(schema: bytes | None, message: str, tmp_path: Path) -> None:
    path = tmp_path / "broken.schema.json"
    if schema is not None:
        path.write_bytes(schema)
    with pytest.raises(InputError) as refused:
        jsonfiles.conform({}, tmp_path / "data.json", "data", "fix it", path)
    assert str(refused.value).startswith(message.format(path=path)) and "\n" not in str(refused.value)


def test_a_packaged_schema_that_is_gone_is_one_line_exit_2_naming_the_fix(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch,
                                                                          capsys: pytest.CaptureFixture) -> None:
    """The installed tool's own schema missing: the report says to reinstall, in one line."""
    packaged = tmp_path / "data"
    shutil.copytree(schemas.PACKAGED, packaged)
    (packaged / "certificate.schema.json").unlink()
    monkeypatch.setattr(jsonfiles, "PACKAGED", packaged)
    monkeypatch.setattr(policy, "CERTIFICATE_SCHEMA", packaged / "certificate.schema.json")
    write_certificate(tmp_path / "in", load_stacks()["debian"], repository="r/x", digest="sha256:" + "ab" * 32,
                      created=dt.datetime.now(dt.UTC))
    assert cli.main(["report", "--out", str(tmp_path / "site"), str(tmp_path / "in")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "certificate.schema.json not found; reinstall mcore-images" in err


def test_the_packaged_schemas_are_valid_and_accept_the_real_writers(tmp_path: Path) -> None:
    for name in ("certificate.schema.json", "build-timings.schema.json"):
        assert jsonfiles.problem(None, schemas.PACKAGED / name) is not None  # loads, checks, and refuses null
    path = write_certificate(tmp_path, load_stacks()["debian"], repository="r/x", digest="sha256:" + "ab" * 32,
                             created=dt.datetime.now(dt.UTC), gpus=0)
    assert jsonfiles.problem(json.loads(path.read_text()), schemas.CERTIFICATE_SCHEMA) is None
    assert jsonfiles.problem(add_sections(path), schemas.CERTIFICATE_SCHEMA) is None


def test_a_wrong_type_names_the_field_and_what_to_write(tmp_path: Path) -> None:
    path = write_certificate(tmp_path, load_stacks()["debian"], repository="r/x", digest="sha256:" + "ab" * 32,
                             created=dt.datetime.now(dt.UTC))
    cert = json.loads(path.read_text())
    cert["environment"]["gpu"]["count"] = "eight"
    assert policy.shape_problems(cert) == ["field environment.gpu.count: 'eight' is not of type 'integer'; write the "
                                           "number of GPUs, an integer (0 on CPU)"]


@pytest.mark.parametrize("fault", ["missing", "folder", "not-utf8", "not-json"])
def test_every_reader_climbs_the_one_ladder(fault: str, tmp_path: Path) -> None:
    """env/stacks.json, a certificate and the release policies say one fault in the same words, each with its own
    fix. Before: three ladders (a certificate that was not JSON "is malformed (not JSON: …)", a stacks path that was a
    folder "cannot be read")."""
    path = tmp_path / "document.json"
    if fault == "folder":
        path.mkdir()
    elif fault != "missing":
        path.write_bytes(b"\xff{}" if fault == "not-utf8" else b"{nope")
    said = {"missing": " not found; ", "folder": " is a folder; name the file in it",
            "not-utf8": " is not UTF-8 text (byte 0: invalid start byte); ",
            "not-json": " is not JSON (Expecting property name enclosed in double quotes"}[fault]
    for read in (load_stacks, policy.load_certificate, lambda p: policy.load_policy("ci", p)):
        with pytest.raises(InputError) as refused:
            read(path)
        assert f"{path}{said}" in str(refused.value) and "\n" not in str(refused.value), refused.value
