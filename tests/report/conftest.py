"""The report site in a real browser: `pytest tests/report [--site DIR]` (or `make test-report`).

Debian's Chromium and chromedriver run in a container built from tests/report/browser on the debian
flavor's debootstrap base; the site is mounted read-only at /site and opened from file:// URLs, driven
over WebDriver (selenium) on a loopback port. Without --site the tests generate a site from certificates
made by the real writers. Screenshots go to --screenshots.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcore_images.catalogue.stacks import load_stacks
from mcore_images.report import command as report

HERE = Path(__file__).resolve().parent
IMAGE = "mcore-images-test:browser"
BASE = "mcore-images/base-debian:trixie"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("mcore-images report site")
    group.addoption("--site", type=Path, default=None, help="a generated site (default: one generated here)")
    group.addoption("--screenshots", type=Path, default=Path("build/report-screenshots"),
                    help="where the pages' screenshots go")


def _docker(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check)


@pytest.fixture(scope="session")
def site(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = request.config.getoption("--site")
    if given:
        if not (given / "index.html").is_file():
            pytest.exit(f"--site {given} holds no index.html: run `mcore-images report --out {given} …` first",
                        returncode=2)
        return given.resolve()
    from tests.support.certificates import write_certificate

    inputs = tmp_path_factory.mktemp("certs")
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    path = write_certificate(inputs / "debian", load_stacks()["debian"], repository="127.0.0.1:5000/mcore-images",
                             digest="sha256:" + "cd" * 32, created=now, gpus=0)
    cert = json.loads(path.read_text())
    cert["runs"] = [{"id": f"{name}/dense/local", "layout": name, "model": "dense", "spec": "local",
                     "status": "passed", "reason": None, "checks": [], "losses": [8.0 - d, 6.0, 4.0 + d],
                     "grad_norms": [2.0, 1.5, 1.0], "timing": {"build_s": 0.1, "step_median_s": 0.05},
                     "parity": None if name == "dp2" else {"baseline": "dp2/dense/local", "loss_rel": d / 8,
                                                           "loss_tol": 3.9e-3, "grad_norm_rel": 1e-5,
                                                           "grad_norm_tol": 7.8e-3}}
                    for name, d in (("dp2", 0.0), ("tp2", 1e-4), ("pp2", 0.0))]
    cert["timing"] = {"wall_s": 20.0, "launch_to_rank_s": 1.0, "imports_s": 10.0, "init_s": 0.5, "build_s": 1.0,
                      "steps_s": 6.0, "teardown_s": 1.5}
    path.write_text(json.dumps(cert))
    (inputs / "foreign").mkdir()
    (inputs / "foreign" / "certificate.json").write_text(json.dumps({"schema": "acme/cert/v9"}))
    out = tmp_path_factory.mktemp("site")
    report.generate(out, [inputs], [])
    return out.resolve()


@pytest.fixture(scope="session")
def screenshots(request: pytest.FixtureRequest) -> Path:
    folder: Path = request.config.getoption("--screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="session")
def browser_image() -> str:
    if _docker("image", "inspect", IMAGE, check=False).returncode:
        if _docker("image", "inspect", BASE, check=False).returncode:  # CI builds another suite's base
            from mcore_images.image_build import debian_base

            print(debian_base.ensure(load_stacks()["debian"]))
        built = _docker("build", "-q", "-t", IMAGE, str(HERE / "browser"), check=False)
        if built.returncode:
            pytest.exit(f"building the browser image failed: {built.stderr.strip().splitlines()[-1]}", returncode=2)
    return IMAGE


@pytest.fixture(scope="session")
def driver(site: Path, browser_image: str) -> Iterator[object]:
    from selenium import webdriver

    name = f"report-browser-{int(time.time() * 1000)}"
    _docker("run", "-d", "--rm", "--name", name, "--shm-size", "1g", "-p", "127.0.0.1::9515",
            "-v", f"{site}:/site:ro", browser_image)
    try:
        port = _docker("port", name, "9515/tcp").stdout.strip().splitlines()[0].rsplit(":", 1)[1]
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/status", timeout=2) as answer:
                    if json.load(answer)["value"]["ready"]:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("chromedriver did not answer within 60 s: " + _docker("logs", name, check=False).stderr)
            time.sleep(0.3)
        options = webdriver.ChromeOptions()
        for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000",
                     "--allow-file-access-from-files"):
            options.add_argument(flag)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        browser = webdriver.Remote(command_executor=url, options=options)
        yield browser
        browser.quit()
    finally:
        _docker("rm", "-f", name, check=False)
