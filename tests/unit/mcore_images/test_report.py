"""`mcore-images report`: the site's tables and charts from real-writer certificates, unusable inputs shown
with their reason, an empty input explained, byte-stable output, bad flags refused in one line."""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mcore_images import report
from mcore_images.stacks import load_stacks
from tests.support.certificates import write_certificate

NOW = dt.datetime.now(dt.UTC).replace(microsecond=0)
DIGEST = "sha256:" + "ab" * 32


def certificate(tmp: Path, stack: str = "debian", **kw: object) -> Path:
    (tmp / stack).mkdir(parents=True, exist_ok=True)
    return write_certificate(
        tmp / stack, load_stacks()[stack], repository="127.0.0.1:5000/mcore-images", digest=DIGEST, created=NOW, **kw
    )


def test_index_files_a_certificate_under_its_stack_and_links_its_page(tmp_path: Path) -> None:
    certificate(tmp_path / "in", gpus=0)
    result = report.generate(tmp_path / "site", [tmp_path / "in"], [])
    assert result["certificates"] == 1 and result["invalid"] == 0 and result["pages"] == 4
    index = (tmp_path / "site" / "index.html").read_text()
    row = re.search(r'<tr class="passed"><td>debian</td><td>runtime</td>.*?</tr>', index)
    assert row, index
    assert "runtime-mcore0.16.1-te2.20.2" in row.group(0) and "runtime-debian" in row.group(0)
    assert DIGEST in row.group(0) and "CPU (gloo)" in row.group(0) and "580.65.06" in row.group(0)
    page = re.search(r'href="(cert-debian-runtime-[^"]+\.html)"', row.group(0)).group(1)
    assert (tmp_path / "site" / page).is_file()
    # the other layers and stacks are listed with no certificate
    assert '<tr class="none"><td>debian</td><td>base</td>' in index
    assert '<tr class="none"><td>cuda</td><td>runtime</td>' in index


def test_certificate_page_has_runs_curves_parity_and_wall_time(tmp_path: Path) -> None:
    path = certificate(tmp_path / "in")
    cert = json.loads(path.read_text())
    cert["runs"] = [
        {
            "id": "dp2/dense/local",
            "layout": "dp2",
            "model": "dense",
            "spec": "local",
            "status": "passed",
            "reason": None,
            "checks": [],
            "losses": [8.0, 6.0, 4.0],
            "grad_norms": [2.0, 1.5, 1.0],
            "parity": None,
            "timing": {"build_s": 0.1, "step_median_s": 0.05},
        },
        {
            "id": "tp2/dense/local",
            "layout": "tp2",
            "model": "dense",
            "spec": "local",
            "status": "failed",
            "reason": None,
            "checks": [{"name": "step-0 loss matches dp-only", "ok": False, "detail": "8.1 vs 8.0"}],
            "losses": [8.1, 6.1, 4.1],
            "grad_norms": [2.0, 1.5, 1.0],
            "parity": {
                "baseline": "dp2/dense/local",
                "loss_rel": 1.2e-2,
                "loss_tol": 3.9e-3,
                "grad_norm_rel": 0.0,
                "grad_norm_tol": 7.8e-3,
            },
            "timing": {"build_s": 0.1, "step_median_s": 0.07},
        },
    ]
    cert["timing"] = {
        "wall_s": 24.0,
        "launch_to_rank_s": 1.0,
        "imports_s": 10.0,
        "init_s": 0.5,
        "build_s": 1.0,
        "steps_s": 6.0,
        "teardown_s": 1.5,
    }
    path.write_text(json.dumps(cert))
    report.generate(tmp_path / "site", [path], [])
    page = next((tmp_path / "site").glob("cert-*.html")).read_text()
    assert page.count('id="series-dp2-dense_local"') == 0  # ids keep '-' and turn '/' into '_'
    assert 'id="series-dp2_dense_local"' in page and 'id="series-tp2_dense_local"' in page
    assert 'id="series-loss_rel-0"' in page and "loss tolerance 3.9e-03" in page
    assert 'id="series-imports-0"' in page and "Wall time 24.0 s" in page and "other 4.0 s" in page
    assert "step-0 loss matches dp-only — 8.1 vs 8.0" in page
    # offline: no script, nothing fetched from elsewhere
    assert "<script" not in page and not re.findall(r'(?:src|href)="(?:https?:)?//', page)


def test_unusable_certificates_are_listed_with_their_reason(tmp_path: Path) -> None:
    inputs = tmp_path / "in"
    certificate(inputs)
    (inputs / "broken").mkdir()
    (inputs / "broken" / "certificate.json").write_text("{not json")
    (inputs / "foreign").mkdir()
    (inputs / "foreign" / "certificate.json").write_text(json.dumps({"schema": "acme/cert/v9", "status": "passed"}))
    (inputs / "half").mkdir()
    (inputs / "half" / "certificate.json").write_text(json.dumps({"schema": "mcore-images/smoke-certificate/v1"}))
    result = report.generate(tmp_path / "site", [inputs], [])
    assert result["certificates"] == 4 and result["invalid"] == 3
    index = (tmp_path / "site" / "index.html").read_text()
    unfiled = index[index.index('id="unfiled"') :]
    assert "not JSON" in unfiled and "foreign: schema &#x27;acme/cert/v9&#x27;" in unfiled and "malformed:" in unfiled


def test_stale_when_the_pins_moved_since(tmp_path: Path) -> None:
    packages = {
        "python": "3.13.5",
        "torch": "2.11.0",
        "transformer-engine": "2.20.2",
        "megatron-core": "0.16.0",
        "mbridge": "0.15.1",
        "apex": None,
        "megatron-bridge": None,
        "verl": None,
    }
    path = certificate(tmp_path / "in", packages=packages)
    cert = json.loads(path.read_text())
    cert["image"]["labels"] = {"io.mcore-images.stack": "debian", "io.mcore-images.layer": "runtime"}
    path.write_text(json.dumps(cert))
    report.generate(tmp_path / "site", [path], [])
    index = (tmp_path / "site" / "index.html").read_text()
    assert '<tr class="stale"><td>debian</td><td>runtime</td>' in index
    assert "megatron-core 0.16.0 measured, env/stacks.json pins 0.16.1" in index


def test_no_input_says_what_to_feed_it_and_the_output_is_stable(tmp_path: Path) -> None:
    report.generate(tmp_path / "a", [], [])
    index = (tmp_path / "a" / "index.html").read_text()
    assert 'id="empty"' in index and "mcore-images report --out build/report build/release-local" in index
    assert 'id="no-timings"' in (tmp_path / "a" / "build.html").read_text()
    certificate(tmp_path / "in")
    timings = tmp_path / "t.json"
    timings.write_text(
        json.dumps(
            [
                {
                    "scenario": "mcore",
                    "command": [],
                    "wall_s": 52.0,
                    "returncode": 0,
                    "stages": {"base": "cached", "runtime": "built"},
                }
            ]
        )
    )
    for out in ("b", "c"):
        report.generate(tmp_path / out, [tmp_path / "in"], [timings])
    for page in (tmp_path / "b").iterdir():
        assert page.read_bytes() == (tmp_path / "c" / page.name).read_bytes(), page.name
    assert 'id="series-wall_s-0"' in (tmp_path / "b" / "build.html").read_text()


def test_matrix_lists_every_stack_with_its_rule_verdict(tmp_path: Path) -> None:
    report.generate(tmp_path / "site", [], [])
    matrix = (tmp_path / "site" / "matrix.html").read_text()
    for name in load_stacks():
        assert f"<td>{name}</td>" in matrix
    assert matrix.count('<tr class="passed">') == len(load_stacks())


def test_out_naming_a_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_text("x")
    done = subprocess.run(
        [sys.executable, "-m", "mcore_images", "report", "--out", str(target)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "is a file" in done.stderr


@pytest.mark.parametrize("bad", ["[1, 2]", '{"scenario": "x"}', "nope"])
def test_bad_build_timings_are_noted_not_fatal(tmp_path: Path, bad: str) -> None:
    timings = tmp_path / "t.json"
    timings.write_text(bad)
    report.generate(tmp_path / "site", [], [timings])
    assert "t.json" in (tmp_path / "site" / "build.html").read_text()
