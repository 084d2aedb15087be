"""The certificate's sections as plug-ins: each program's section module registers its key, the certificate finds
them all without naming one, and whichever program adds its section writes certificate.md whole."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from mcore_images import schemas
from mcore_images.smoke import certificate
from mcore_images.smoke.bench import gate
from mcore_images.smoke.kit import sections


def test_every_program_with_a_section_module_is_found() -> None:
    found = sections.registered()
    assert {key: s.program for key, s in found.items()} == {
        "attention": "mcore_images.smoke.attention", "bench": "mcore_images.smoke.bench",
        "bridge": "mcore_images.smoke.bridge", "verl_step": "mcore_images.smoke.verl_step"}
    assert {key: s.schema for key, s in found.items()} == {
        "attention": None, "bench": schemas.BENCH, "bridge": schemas.BRIDGE, "verl_step": schemas.VERL_STEP}
    assert sorted(sections.programs()) == ["attention", "bench", "bridge", "verl_step"]


def test_a_key_is_one_programs() -> None:
    with pytest.raises(ValueError, match=re.escape("certificate section 'bench' of mcore_images.smoke.other is "
                                                   "already mcore_images.smoke.bench's")):
        sections.register("bench", lambda s: [], program="mcore_images.smoke.other")
    assert sections.registered()["bench"].program == "mcore_images.smoke.bench"


def test_a_program_adding_its_section_renders_the_others_too(tmp_path: Path) -> None:
    """Before: certificate.py imported each program's renderer by name; now the bridge check's attach writes the
    bench's table too, in the order the sections were added."""
    cert = certificate.new(["python", "-m", "mcore_images.smoke"], "2026-12-06T00:00:00+00:00")
    cert.update(status="passed", exit_code=0)
    certificate.write(cert, tmp_path)
    bench = {"schema": gate.RESULT_SCHEMA, "status": "passed", "results": []}
    certificate.write(gate.attach(certificate.read(tmp_path / "certificate.json"), bench), tmp_path)
    bridge = {"schema": schemas.BRIDGE, "status": "passed", "exit_code": 0, "architectures": []}
    certificate.attach(tmp_path, "bridge", bridge)
    md = (tmp_path / "certificate.md").read_text()
    assert md.index("## Bench: PASSED") < md.index("## Bridge check: PASSED")
    assert list(json.loads((tmp_path / "certificate.json").read_text()))[-2:] == ["bench", "bridge"]
    with pytest.raises(ValueError, match="no program of the smoke registers a certificate section 'bridges'"):
        certificate.attach(tmp_path, "bridges", bridge)
