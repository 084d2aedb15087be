"""The generated site as Chromium renders it: the index's table, every certificate page's tables and
charts (each SVG drawn, with the series its certificate holds), the other pages, no console errors;
screenshots kept."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from mcore_images.catalogue.stacks import load_stacks

URL = "file:///site/"


def visit(driver: Any, page: str) -> None:
    driver.get(URL + page)
    assert driver.execute_script("return document.readyState") == "complete"


def console_errors(driver: Any) -> list[str]:
    """The browser's SEVERE console entries since the last call (chromedriver's log endpoint)."""
    entries = driver.execute("getLog", {"type": "browser"})["value"]
    return [e["message"] for e in entries if e["level"] == "SEVERE"]


def shoot(driver: Any, folder: Path, name: str) -> Path:
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1600, min(max(height + 200, 800), 6000))
    path = folder / f"{name}.png"
    assert driver.save_screenshot(str(path))
    driver.set_window_size(1400, 1000)
    return path


def cert_pages(site: Path) -> list[str]:
    return sorted(p.name for p in site.glob("cert-*.html"))


def table_rows(driver: Any, table_id: str) -> list[list[str]]:
    return driver.execute_script(
        "return [...document.querySelectorAll(`#${arguments[0]} tbody tr`)]"
        ".map(tr => [...tr.cells].map(td => td.innerText.trim()))", table_id)


def test_index_lists_every_stack_layer_and_the_certificates(driver: Any, site: Path, screenshots: Path) -> None:
    visit(driver, "index.html")
    rows = table_rows(driver, "images")
    stacks = load_stacks()
    assert [(r[0], r[1]) for r in rows] == [(s.name, layer) for s in stacks.values() for layer in s.built_layers]
    statuses = {r[5].split("\n")[0] for r in rows}
    assert statuses <= {"passed", "failed", "none", "stale", "could-not-run"}
    certified = [r for r in rows if r[5].split("\n")[0] != "none"]
    assert certified, "no certificate was filed under a stack"
    digests = driver.execute_script(
        "return [...document.querySelectorAll('#images tbody tr')].map(tr => tr.cells[4].querySelector('code'))"
        ".map(c => c ? c.dataset.digest : null)")
    for row, digest in zip(rows, digests, strict=True):
        if row[5].split("\n")[0] == "none":
            continue
        assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest or ""), row
        assert row[4] == digest[:19] + "…"
    for row in certified:
        assert row[1] in ("runtime", "app") and row[3] == f"mcore-images:{row[1]}-{row[0]}"  # the top layer
    links = driver.execute_script("return [...document.querySelectorAll('#images a')].map(a => a.getAttribute('href'))")
    assert set(links) <= set(cert_pages(site)) and links
    assert console_errors(driver) == []
    shoot(driver, screenshots, "index")


def test_every_certificate_page_renders_its_tables_and_charts(driver: Any, site: Path, screenshots: Path) -> None:
    pages = cert_pages(site)
    assert pages
    for i, page in enumerate(pages):
        visit(driver, page)
        facts = dict(table_rows(driver, "facts"))
        assert facts["status"].split(" ")[0] in {"passed", "failed", "stale", "could-not-run"}
        digest = facts["digest"].split(" ")[0]
        runs = table_rows(driver, "runs")
        assert runs, page
        charts = driver.execute_script(
            "return [...document.querySelectorAll('div.chart')].map(d => {"
            " const svg = d.querySelector('svg'); const r = svg ? svg.getBoundingClientRect() : {width: 0, height: 0};"
            " return {id: d.id, width: r.width, height: r.height,"
            "  series: [...d.querySelectorAll('[id^=series-]')].map(g => g.id),"
            "  drawn: [...d.querySelectorAll('[id^=series-] path')].filter(p => (p.getAttribute('d') || '').length > 4)"
            "   .length}; })")
        by_id = {c["id"]: c for c in charts}
        assert {"chart-losses", "chart-wall"} <= set(by_id), page
        for chart in charts:
            assert chart["width"] > 100 and chart["height"] > 50 and chart["drawn"] > 0, (page, chart)
        ran = [r[0] for r in runs if not r[1].startswith("skipped")]
        expected = {"series-" + re.sub(r"[^A-Za-z0-9_.-]", "_", run) for run in ran}
        assert set(by_id["chart-losses"]["series"]) == expected, page
        with_parity = [r for r in runs if r[4] != "–"]
        if with_parity:
            bars = by_id["chart-parity"]["series"]
            assert len([b for b in bars if b.startswith("series-loss_rel-")]) == len(with_parity)
            assert len([b for b in bars if b.startswith("series-grad_norm_rel-")]) == len(with_parity)
        assert console_errors(driver) == [], page
        if i == 0:
            shoot(driver, screenshots, "certificate")
            (screenshots / "certificate.txt").write_text(json.dumps({"page": page, "digest": digest}) + "\n")


def test_matrix_and_build_pages(driver: Any, screenshots: Path) -> None:
    visit(driver, "matrix.html")
    rows = table_rows(driver, "matrix")
    assert [r[0] for r in rows] == list(load_stacks())
    assert all(r[-1] == "ok" for r in rows)
    visit(driver, "build.html")
    has_chart = driver.execute_script("return !!document.querySelector('#chart-build svg')")
    note = driver.execute_script("return !!document.getElementById('no-timings')")
    assert has_chart or note
    assert console_errors(driver) == []
    shoot(driver, screenshots, "build")


@pytest.mark.parametrize("page", ["index.html", "matrix.html", "build.html"])
def test_pages_link_only_to_pages_of_the_site(driver: Any, site: Path, page: str) -> None:
    visit(driver, page)
    hrefs = driver.execute_script("return [...document.querySelectorAll('a, link')].map(a => a.getAttribute('href'))")
    assert all((site / h).is_file() for h in hrefs), hrefs


def test_the_console_check_sees_a_page_that_fails(driver: Any) -> None:
    driver.get("data:text/html,<img src='file:///site/no-such-image.png'><script>undefinedFunction()</script>")
    errors = console_errors(driver)
    assert any("undefinedFunction" in e for e in errors), errors
