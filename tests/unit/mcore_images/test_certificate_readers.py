"""Certificates of the right schema identifier but wrong field types or wild values, fed to every reader: the
report (through the CLI, in this process) lists or renders them, the promote/verify readers refuse them in
one line, and none of them raises. The cases below are the crash sites a fuzzer found; the property test
keeps looking, from a full real-writer certificate, with a fixed seed and a bounded number of examples."""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import io
import json
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcore_images import cli
from mcore_images.catalogue import images
from mcore_images.catalogue.stacks import load_stacks
from mcore_images.errors import InputError
from mcore_images.release import policy
from tests.support.certificates import add_sections, labels_of, write_certificate

NOW = dt.datetime.now(dt.UTC).replace(microsecond=0)
DIGEST = "sha256:" + "ab" * 32
IMAGE = images.parse(f"127.0.0.1:5000/mcore-images@{DIGEST}")
RELEASE = policy.Policy("release", "GPUs required", require_gpu=True, max_age_days=7)
HUGE = 10**400
"""An integer JSON can hold and a float cannot."""
Path_ = tuple[str | int, ...]


@pytest.fixture(scope="module")
def seed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A certificate from the real writers, with every section a full run adds."""
    out = tmp_path_factory.mktemp("seed")
    path = write_certificate(out, load_stacks()["debian"], repository="127.0.0.1:5000/mcore-images", digest=DIGEST,
                             created=NOW)
    return add_sections(path)


def mutated(cert: dict[str, Any], changes: list[tuple[Path_, Any]]) -> dict[str, Any]:
    """A copy with each (path, value) set; a value of ``DELETE`` removes the key. A path that no longer leads
    anywhere (an earlier change replaced its parent) is skipped."""
    cert = copy.deepcopy(cert)
    for path, value in changes:
        node: Any = cert
        try:
            for step in path[:-1]:
                node = node[step]
            if value is DELETE:
                del node[path[-1]]
            else:
                node[path[-1]] = copy.deepcopy(value)
        except (KeyError, IndexError, TypeError):
            continue
    return cert


DELETE = object()


@contextlib.contextmanager
def captured() -> Iterator[tuple[io.StringIO, io.StringIO]]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        yield out, err


def check_report(cert: dict[str, Any], folder: Path) -> None:
    """The report takes the certificate and exits 0 with its one summary line: the certificate gets a page, or
    the index lists it as unusable with a one-line reason."""
    (folder / "in").mkdir()
    (folder / "in" / "certificate.json").write_text(json.dumps(cert))
    with captured() as (out, err), warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning would be lines on stderr: as bad as a traceback
        code = cli.main(["report", "--out", str(folder / "site"), str(folder / "in")])
    assert (code, err.getvalue()) == (0, ""), err.getvalue()
    assert out.getvalue().count("\n") == 1 and "1 certificate(s)" in out.getvalue(), out.getvalue()
    index = (folder / "site" / "index.html").read_text()
    pages = list((folder / "site").glob("cert-*.html"))
    assert pages or "malformed:" in index or "foreign:" in index  # without its schema it is not ours


def check_readers(cert: dict[str, Any], folder: Path) -> None:
    """attach/promote/verify's readers: load_certificate refuses in one line (exit 2), or every judgement
    returns one-line problems."""
    path = folder / "reader.json"
    path.write_text(json.dumps(cert))
    try:
        loaded = policy.load_certificate(path)
    except InputError as exc:
        assert exc.exit_code == 2 and "\n" not in str(exc) and str(exc).startswith(f"certificate {path}")
        return
    labels = labels_of(load_stacks()["debian"], "runtime")
    problems = policy.certificate_problems(loaded, IMAGE, NOW, RELEASE) + policy.measured_problems(labels, loaded)
    assert all(isinstance(p, str) and "\n" not in p for p in problems), problems


NO_PARITY = (("runs", 1, "parity"), None)
"""Added where the parity chart is not what a case is about: its log axis is the slowest chart to draw."""
FOUND = {
    "gpu a list": [(("environment", "gpu"), [1])],
    "labels a list": [(("image", "labels"), ["x"])],
    "stack label a list": [(("image", "labels", "io.mcore-images.stack"), ["debian"])],
    "layer label a list": [(("image", "labels", "io.mcore-images.layer"), ["runtime"])],
    "layer label a path": [(("image", "labels", "io.mcore-images.layer"), "../../" + "x" * 300), NO_PARITY],
    "settings a string": [(("settings",), "x")],
    "timing a string": [(("timing",), "x")],
    "run timing a number": [(("runs", 0, "timing"), 1.5)],
    "parity a list": [(("runs", 1, "parity"), [1])],
    "gate a list": [(("bench", "results", 0, "gate"), [1])],
    "losses an object": [(("runs", 0, "losses"), {"a": 1})],
    "losses a number": [(("runs", 0, "losses"), 5)],
    "grad norms a number": [(("runs", 0, "grad_norms"), 1.5)],
    "checks a number": [(("runs", 0, "checks"), 1.5)],
    "pairs a number": [(("checkpoint", "pairs"), 1.5)],
    "results a number": [(("bench", "results"), 7)],
    "a huge loss": [(("runs", 0, "losses", 1), HUGE), NO_PARITY],
    "a huge grad norm": [(("runs", 0, "grad_norms", 0), HUGE), NO_PARITY],
    "a huge size": [(("image", "size"), HUGE)],
    "huge seconds": [(("timing", "imports_s"), HUGE), NO_PARITY],
    "huge checkpoint bytes": [(("checkpoint", "pairs", 0, "bytes"), HUGE)],
    "a huge change": [(("bench", "results", 0, "gate", "change_pct"), HUGE), (("bench", "results", 0, "mfu"), HUGE),
                      NO_PARITY],
    "values near the float limit": [(("runs", 0, "losses"), [1.7e308, -1.7e308]), (("timing", "steps_s"), 1.7e308),
                                    (("timing", "imports_s"), 1.7e308), NO_PARITY],
    "non-finite values": [(("runs", 1, "parity", "loss_rel"), float("nan")), (("timing", "wall_s"), float("inf")),
                          (("runs", 0, "losses", 0), float("-inf"))],
    "parity at the edges of a log axis": [(("runs", 1, "parity", "loss_tol"), 0),
                                          (("runs", 1, "parity", "loss_rel"), -1),
                                          (("runs", 1, "parity", "grad_norm_rel"), 1e308)],
    "created before year 1 in UTC": [(("created",), "0001-01-01T00:00:00+01:00")],
    "created after year 9999 in UTC": [(("created",), "9999-12-31T23:59:59-01:00")],
}


@pytest.mark.parametrize("changes", list(FOUND.values()), ids=list(FOUND))
def test_what_the_fuzzer_found_is_listed_or_refused_never_raised(changes: list[tuple[Path_, Any]],
                                                                 seed: dict[str, Any], tmp_path: Path) -> None:
    cert = mutated(seed, changes)
    check_report(cert, tmp_path)
    check_readers(cert, tmp_path)


def test_the_seed_itself_renders_and_passes(seed: dict[str, Any], tmp_path: Path) -> None:
    """The property test starts from a certificate every reader accepts (or it would test nothing)."""
    assert policy.shape_problems(seed) == []
    check_report(seed, tmp_path)
    assert len(list((tmp_path / "site").glob("cert-*.html"))) == 1


LEAVES = (st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12)
          | st.sampled_from([HUGE, -HUGE, 2**63, 1.7e308, -1.7e308, "0001-01-01T00:00:00+01:00", "../x", "x" * 300]))
VALUES = st.recursive(LEAVES, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                            max_size=3), max_leaves=6)


def paths(node: Any, prefix: Path_ = ()) -> Iterator[Path_]:
    """Every path into a JSON document (not the root)."""
    if prefix:
        yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from paths(value, (*prefix, i))


def fuzz(examples: int) -> settings:
    """Derandomized (the same examples on every run, so CI is stable), no example database, a fixed count."""
    return settings(derandomize=True, database=None, deadline=None, max_examples=examples,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def mutations(seed: dict[str, Any]) -> st.SearchStrategy[list[tuple[Path_, Any]]]:
    """One to three changes, each a path into the seed and a new JSON value for it, or its removal."""
    where = sorted(paths(seed), key=repr)
    return st.lists(st.tuples(st.sampled_from(where), VALUES | st.just(DELETE)), min_size=1, max_size=3)


@fuzz(100)
@given(data=st.data())
def test_mutated_certificates_never_raise_in_the_promote_and_verify_readers(seed: dict[str, Any],
                                                                             data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as folder:
        check_readers(mutated(seed, data.draw(mutations(seed))), Path(folder))


@fuzz(20)
@given(data=st.data())
def test_mutated_certificates_never_raise_in_the_report(seed: dict[str, Any], data: st.DataObject) -> None:
    """From the seed without its parity chart, which takes most of a page's time to draw (its edge values are
    cases above): twenty pages in a few seconds."""
    start = mutated(seed, [NO_PARITY])
    with tempfile.TemporaryDirectory() as folder:
        check_report(mutated(start, data.draw(mutations(start))), Path(folder))
