"""Pages at the scale of a real training run, in headless Chromium (tests/browser.py): sweep.html
of a 200 x 20 sweep and report.html of a 50-benchmark run. Each stays under 5 MiB, shows no
console error, draws a chart a reader jumps to before the charts above it, draws every chart in
the end, and its tables hold exactly sweep.json's / scores.json's numbers, every page of them.

Both are written by `shardeval merge` from shards tests/shard_factory.py writes as a sweep's
shards are written (two shards per model).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from browser import browser, visit  # noqa: F401  (browser is a fixture)
from conftest import shardeval_cmd
from pages_support import sweep_charts, sweep_numbers
from shard_factory import make_sweep

READY = "document.body.dataset.charts"
MAX_BYTES = 5 * 2**20
MODELS, BENCHMARKS, REPORT_BENCHMARKS = 200, 20, 50


@pytest.fixture(scope="module")
def big_sweep(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("scale") / "sweep"
    make_sweep(str(root), MODELS, BENCHMARKS, n_problems=12, shards=2)
    done = shardeval_cmd("merge", "-q", str(root), timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return root


def drawn_count(v) -> int:
    return v.page.evaluate("document.querySelectorAll('.chart[data-state=drawn]').length")


def assert_jumped_to_chart_drawn_first(v, total: int) -> None:
    """A reader who jumps to the last chart as the page opens sees it drawn while most charts
    above it still wait: the page draws what is in view first."""
    last = v.jump_to_chart(1.0)
    assert v.page.evaluate(f"document.getElementById({json.dumps(last)}).dataset.state") == "drawn"
    assert drawn_count(v) < total // 2, (drawn_count(v), total)
    v.page.wait_for_function(READY, timeout=60_000)
    assert v.page.evaluate(READY) == "drawn"
    assert v.errors() == [], v.errors()
    assert v.foreign_requests() == [], v.foreign_requests()
    marks = v.chart_marks()
    assert len(marks) == total and all(c["svgs"] == 1 and c["marks"] > 0 for c in marks), [c for c in marks if not c["marks"]][:3]


def test_a_200_by_20_sweep_page_is_small_draws_where_read_and_pages_every_number(big_sweep, browser):
    merged = big_sweep / "merged"
    page = merged / "sweep.html"
    assert page.stat().st_size <= MAX_BYTES, page.stat().st_size
    doc = json.loads((merged / "sweep.json").read_text())
    assert len(doc["vs_baseline"]) == (MODELS - 1) * BENCHMARKS
    charts = sweep_charts(doc)
    with visit(browser, page.as_uri(), timeout_ms=60_000) as v:
        assert_jumped_to_chart_drawn_first(v, charts)
        # a page of rows at a time, and every page read through the pager holds sweep.json's numbers
        assert v.page.eval_on_selector_all("table.vs tbody tr", "rs => rs.length") == 50
        shown = v.table_numbers("#grid-table-accuracy") + v.table_numbers("#vs-table")
        assert len(shown) == len(dict(shown)), "a cell shown twice"
        assert dict(shown) == sweep_numbers(doc)
        # the filter box: only the rows whose model or benchmark holds the text, counted
        v.page.fill("#vs-table input.filter", "step2000")
        wanted = [r for r in doc["vs_baseline"] if "step2000" in r["service"] or "step2000" in r["benchmark"]]
        assert v.page.inner_text("#vs-table .pager .muted") == f"1–50 of {len(wanted)} rows"
        models = v.page.eval_on_selector_all("table.vs tbody tr", "rs => rs.map(r => r.cells[0].textContent)")
        assert models and all("step2000" in m for m in models)
        v.page.fill("#grid-table-accuracy input.filter", "no such model")
        assert v.page.inner_text("#grid-table-accuracy .pager") == "no row matches"


def test_a_50_benchmark_report_is_small_draws_where_read_with_the_numbers_of_scores_json(tmp_path, browser):
    root = tmp_path / "run"
    (model,) = make_sweep(str(root), 1, REPORT_BENCHMARKS, n_problems=12, shards=2)
    assert shardeval_cmd("merge", "-q", str(root)).returncode == 0
    merged = root / model / "merged"
    page = merged / "report.html"
    assert page.stat().st_size <= MAX_BYTES
    scores = json.loads((merged / "scores.json").read_text())
    assert len(scores) == REPORT_BENCHMARKS
    with visit(browser, page.as_uri(), timeout_ms=60_000) as v:
        total = v.page.evaluate("document.querySelectorAll('.chart').length")
        assert total > 2 * REPORT_BENCHMARKS  # per benchmark its latency, TTFT and coverage at least
        assert_jumped_to_chart_drawn_first(v, total)
        cells = v.page.eval_on_selector_all("td[data-key]", "tds => tds.map(td => [td.dataset.key, td.dataset.value])")
    shown = {key: json.loads(value) for key, value in cells}
    for bench, entry in scores.items():
        for metric, m in entry["metrics"].items():
            if metric == "pass@1":  # one repeat: accuracy again, shown once (tests/test_report_html.py)
                continue
            for field in ("value", "ci_low", "ci_high", "stderr", "n"):
                assert shown[f"{bench}/{metric}/{field}"] == m.get(field), (bench, metric, field)
