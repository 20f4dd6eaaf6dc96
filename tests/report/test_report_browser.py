"""report.html and the comparison page opened in headless Chromium (Debian's chromium and
chromium-driver, driven by Selenium): no JavaScript console error, every section there, every chart
drawn, the sortable table sorts. A screenshot of each page is saved in the test's tmp dir."""

from __future__ import annotations

import re
import time
from pathlib import Path

from tuner.report import SECTION_IDS
from tuner.report.compare_page import COMPARE_IDS

from .conftest import cli

CHARTS_DRAWN = """return Array.from(document.querySelectorAll('.plotly-graph-div')).map(function (d) {
    return [d.id, d.classList.contains('js-plotly-plot') && d.querySelector('svg.main-svg') !== null]; });"""


def _open(chromium, page: Path, screenshot: Path) -> list[dict]:
    log = chromium.open(page)
    time.sleep(0.5)  # plotly draws after the load event
    log += chromium.driver.get_log("browser")
    chromium.driver.save_screenshot(str(screenshot))
    assert screenshot.stat().st_size > 10_000
    return [e for e in log if e["level"] == "SEVERE"]


def _drawn(chromium) -> list[str]:
    charts = chromium.driver.execute_script(CHARTS_DRAWN)
    assert all(ok for _, ok in charts), [name for name, ok in charts if not ok]
    return [name for name, _ in charts]


def test_report_renders_in_chromium(chromium, studies, tmp_path):
    page = studies.results / "rpt" / "report.html"
    errors = _open(chromium, page, tmp_path / "report.png")
    assert not errors, errors
    d = chromium.driver
    for sid in SECTION_IDS:
        assert d.execute_script(f"return document.getElementById('{sid}') !== null"), sid
    charts = _drawn(chromium)
    assert len(charts) >= 5, charts
    summary = d.execute_script("return document.getElementById('summary').innerText")
    env = (studies.results / "rpt" / "best.env").read_text()
    for line in env.splitlines():
        if not line.startswith("#"):
            assert line in summary
    assert re.search(r"([+-]\d+(\.\d)?%|0%) throughput over the release defaults", summary), summary


def test_trials_table_sorts_on_a_click(chromium, studies, tmp_path):
    chromium.open(studies.results / "rpt" / "report.html")
    d = chromium.driver
    column = d.execute_script(
        "return Array.from(document.querySelectorAll('#trials-table thead th'))"
        ".findIndex(h => h.textContent === 'tok/s')")
    assert column > 0
    header = d.find_elements("css selector", "#trials-table thead th")[column]

    def values():
        return d.execute_script(
            f"return Array.from(document.querySelectorAll('#trials-table tbody tr')).map("
            f"r => r.cells[{column}].getAttribute('data-v'))")

    header.click()
    first = [float(v) for v in values() if v is not None]
    assert first == sorted(first, reverse=True) and len(first) >= 3
    header.click()
    second = [float(v) for v in values() if v is not None]
    assert second == sorted(second)


def test_compare_page_renders_in_chromium(chromium, studies, tmp_path):
    out = tmp_path / "compare.html"
    done = cli("compare", "rpt", "rpt2", "rpt", "--results", str(studies.results), "--html", str(out))
    assert done.returncode == 0, done.stderr
    errors = _open(chromium, out, tmp_path / "compare.png")
    assert not errors, errors
    for sid in COMPARE_IDS:
        assert chromium.driver.execute_script(f"return document.getElementById('{sid}') !== null"), sid
    assert len(_drawn(chromium)) >= 5
    text = chromium.driver.execute_script("return document.body.innerText")
    assert "share of union" in text and "rpt (2)" in text


PICK_TRACES = """return ['chart-pareto-latency', 'chart-pareto-warmup', 'chart-pareto-3d', 'chart-convergence-trials',
                'chart-convergence-hours'].map(function (id) {
    var gd = document.getElementById(id);
    return [id, gd.data.filter(function (t) { return (t.name || '').indexOf('the pick (trial ') === 0; })
                      .map(function (t) { return t.name; })]; });"""
FITS = """var out = {};
    var page = document.getElementById('trials').getBoundingClientRect().width;
    var wrap = document.getElementById('trials-table').parentElement;
    out.trials_scrolls = wrap.scrollWidth > wrap.clientWidth + 1;
    var cube = document.getElementById('chart-pareto-3d');
    out.cube_inside = cube.getBoundingClientRect().width <= page + 1;
    var scene = cube.querySelector('.gl-container, #scene, canvas');
    out.scene_inside = scene === null || scene.getBoundingClientRect().right <= cube.getBoundingClientRect().right + 1;
    out.rule_folded = !document.getElementById('pick-rule').open;
    out.why = document.getElementById('why').innerText;
    out.banner = document.getElementById('simulated').innerText;
    out.first = document.body.innerText.indexOf('nothing here ran on hardware') <
        document.body.innerText.indexOf('What to deploy');
    out.rows = Array.from(document.querySelectorAll('#summary table.compare tbody tr td:first-child'))
        .map(function (c) { return c.innerText; });
    return out;"""


def test_a_team_lead_sees_the_pick_the_reasons_and_that_it_was_simulated(chromium, studies, tmp_path):
    page = studies.results / "rpt" / "report.html"
    chromium.driver.set_window_size(1400, 6000)   # the whole page in the screenshot, to look at
    try:
        errors = _open(chromium, page, tmp_path / "report-full.png")
    finally:
        chromium.driver.set_window_size(1400, 1000)
    assert not errors, errors
    pick = re.search(r"balanced pick: trial (\d+)", (studies.results / "rpt" / "best.env").read_text()
                     + studies.tune_output).group(1)
    for chart_id, names in chromium.driver.execute_script(PICK_TRACES):
        assert names == [f"the pick (trial {pick})"], chart_id   # the pick is marked on every trial plot
    seen = chromium.driver.execute_script(FITS)
    assert not seen["trials_scrolls"] and seen["cube_inside"] and seen["scene_inside"]
    assert seen["rule_folded"] and "scaled over the feasible front" not in seen["why"]
    assert seen["banner"].startswith("Simulated study: nothing here ran on hardware") and seen["first"]
    assert "throughput (output tokens/s)" in seen["rows"] and "time to first token, p99 (ms)" in seen["rows"]
