"""`mcore-images report`: the site's tables and charts from real-writer certificates, unusable certificates
shown with their reason, an empty input explained, byte-stable output; a missing input, a bad timing file or
an --out it did not write refused in one line before anything is written."""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from mcore_images import cli, create_only
from mcore_images.catalogue import gpu_archs
from mcore_images.catalogue.stacks import load_stacks
from mcore_images.image_build import timing
from mcore_images.report import command as report
from tests.support.certificates import add_sections, write_certificate
from tests.support.sentinels import PLACES, make_root, snapshot

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
    serves = gpu_archs.serves(load_stacks()["debian"].cuda_archs)
    assert f"<td>{serves}</td>" in row.group(0)  # the GPUs the tag serves
    # the tag's platforms, each with its own newest certificate (this one, from before platforms were recorded, is
    # amd64's)
    assert row.group(0).endswith(f'<td><span class="passed">amd64: <a href="{page}">passed</a></span><br>'
                                 '<span class="none">arm64: none</span></td></tr>')
    declared = load_stacks()["debian"].cuda_archs
    assert (tmp_path / "site" / page).read_text().count(f"<td>GPU architectures</td><td>{declared}: {serves}</td>")
    cuda = re.search(r'<tr class="none"><td>cuda</td><td>kernels</td>.*?</tr>', index).group(0)
    assert "sm_100 B200/GB200; sm_103 B300/GB300; sm_120 RTX PRO 6000 Blackwell/RTX 50xx</td>" in cuda
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
    create_only.write_file(timings, timing.COMMAND, {"runs": [
        {"scenario": "mcore", "command": [], "wall_s": 52.0, "returncode": 0,
         "stages": {"base": "cached", "runtime": "built"}}]})
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


def run_report(capsys: pytest.CaptureFixture, *args: object) -> tuple[int, str, str]:
    """`mcore-images report ARGS` through the CLI's own entry, in this process: (exit code, stdout, stderr)."""
    code = cli.main(["report", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("place", list(PLACES), ids=list(PLACES))
def test_out_at_a_folder_it_did_not_write_is_one_line_exit_2_and_every_sentinel_survives(
        place: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    root = make_root(tmp_path)
    before = snapshot(root)
    code, out, err = run_report(capsys, "--out", root / PLACES[place])
    assert (code, out) == (2, "") and err.startswith("error: --out") and err.count("\n") == 1, err
    assert snapshot(root) == before


def test_out_it_wrote_before_is_replaced_whole(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    certificate(tmp_path / "in")
    site = tmp_path / "site"
    assert run_report(capsys, "--out", site, tmp_path / "in")[0] == 0
    assert len(list(site.glob("cert-*.html"))) == 1
    assert run_report(capsys, "--out", site)[0] == 0  # the certificate's page goes with the certificate
    assert not list(site.glob("cert-*.html")) and (site / "index.html").is_file()
    (site / "notes.txt").write_text("mine")
    code, _, err = run_report(capsys, "--out", site)
    assert code == 2 and "holds notes.txt" in err and (site / "notes.txt").read_text() == "mine"


def test_a_missing_input_is_one_line_exit_2_before_anything_is_written(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture) -> None:
    certificate(tmp_path / "in")
    code, out, err = run_report(capsys, "--out", tmp_path / "site", tmp_path / "in", tmp_path / "no-such-folder")
    assert (code, out) == (2, "") and err.count("\n") == 1 and "no-such-folder: no such file or folder" in err
    assert not (tmp_path / "site").exists()


@pytest.mark.parametrize(("bad", "message"), [
    (b'{"written_by": "mcore-images build-timing", "runs": [1, 2]}', "field runs.0: 1 is not of type 'object'"),
    (b'{"written_by": "mcore-images build-timing", "runs": {"scenario": "x"}}',
     "is not of type 'array'; write a list with one entry per build scenario"),
    (b'[{"scenario": "cold", "wall_s": 52, "stages": {}}]', "is not of type 'object'; write an object with written_by"),
    (b'{"written_by": "mcore-images report", "runs": []}',
     "field written_by: 'mcore-images build-timing' was expected"),
    (b"nope", "is not JSON"),
    (b"\xff\xfe[]", "is not UTF-8 text"),
    (b'{"written_by": "mcore-images build-timing", "runs": [{"scenario": "cold", "wall_s": NaN, "stages": {}}]}',
     "NaN is not a number JSON allows"),
    (b'{"written_by": "mcore-images build-timing", "runs": [{"scenario": "cold", "wall_s": "52", "stages": {}}]}',
     "field runs.0.wall_s: '52' is not of type 'number'"),
    (b'{"written_by": "mcore-images build-timing", "runs": [{"scenario": "cold", "wall_s": 52, '
     b'"stages": {"base": 1}}]}',
     "field runs.0.stages.base: 1 is not one of"),
    (None, "not found"),
], ids=["numbers", "runs-an-object", "a-bare-list", "another-command", "not-json", "not-utf8", "nan",
        "string-seconds", "stage-status", "missing"])
def test_a_bad_build_timings_file_is_one_line_exit_2_before_anything_is_written(
        bad: bytes | None, message: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    timings = tmp_path / "t.json"
    if bad is not None:
        timings.write_bytes(bad)
    code, out, err = run_report(capsys, "--out", tmp_path / "site", "--build-timings", timings)
    assert (code, out) == (2, "") and err.count("\n") == 1 and err.startswith(f"error: --build-timings {timings}")
    assert message in err, err
    assert not (tmp_path / "site").exists()


def test_what_build_timing_writes_is_read(tmp_path: Path) -> None:
    log = "#7 [runtime-debian base 1/2] RUN apt-get update\n#7 CACHED\n#9 [runtime-debian runtime 1/1] RUN pip\n" \
          "#9 DONE 41.5s\n"
    run = timing.Run("mcore", ["build", "--stack", "debian"], 52.0, 0, timing.stage_status(log))
    timings = tmp_path / "t.json"
    create_only.write_file(timings, timing.COMMAND, {"runs": [asdict(run)]})
    report.generate(tmp_path / "site", [], [timings])
    page = (tmp_path / "site" / "build.html").read_text()
    assert 'id="series-wall_s-0"' in page and "<td>cached</td><td>built</td>" in page


def test_the_bench_row_shows_the_measured_and_baseline_throughput(tmp_path: Path) -> None:
    add_sections(certificate(tmp_path / "in"))
    report.generate(tmp_path / "site", [tmp_path / "in"], [])
    page = next((tmp_path / "site").glob("cert-*.html")).read_text()
    row = re.search(r'<table id="bench">.*?</table>', page, re.S).group(0)
    assert "<td>416.7</td><td>78,600</td><td>544.4</td><td>540.0</td><td>55.0 %</td><td>passed (+0.8 %)</td>" in row


def test_each_platform_of_a_tag_shows_its_own_newest_certificate(tmp_path: Path) -> None:
    certificate(tmp_path / "in" / "amd64", gpus=0, platform="linux/amd64")
    certificate(tmp_path / "in" / "arm64", gpus=0, platform="linux/arm64")
    report.generate(tmp_path / "site", [tmp_path / "in"], [])
    index = (tmp_path / "site" / "index.html").read_text()
    row = re.search(r'<tr class="passed"><td>debian</td><td>runtime</td>.*?</tr>', index).group(0)
    cells = re.findall(r'<span class="passed">(amd64|arm64): <a href="(cert-[^"]+)\.html">passed</a></span>', row)
    assert [arch for arch, _ in cells] == ["amd64", "arm64"] and cells[0][1] != cells[1][1]
    arm = (tmp_path / "site" / f"{cells[1][1]}.html").read_text()
    assert "<td>platform</td><td>linux/arm64 (machine aarch64)</td>" in arm
    verl = re.search(r'<tr class="none"><td>debian-verl</td><td>app</td>.*?</tr>', index).group(0)
    assert verl.endswith('<td><span class="none">amd64: none</span></td></tr>')  # an amd64-only stack's tag
