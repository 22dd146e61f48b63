"""report.html, opened in headless Debian chromium (tests/browser.py): it draws every chart, fetches
nothing, shows the numbers of scores.json, and shows hostile strings from records as text.

Runs come from the real simulator over a socket (latency, TTFT and errors a server produced) and
from tests/shard_factory.py where a test must shape what records hold (categories, hostile text).
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from browser import browser, visit  # noqa: F401  (browser is a fixture)
from conftest import running_sim, shardeval_cmd
from pages_support import FETCH_HINT, without_javascript
from shard_factory import make_shard, record
from shardeval.store.records import run_id

READY = "document.body.dataset.charts"
HOSTILE = '<script>window.pwned=1</script> "double" \'single\' \x00nul \u202eevil\u202c <img src=x onerror="window.pwned=2">'


def page_numbers(v) -> dict[str, object]:
    """Every numeric cell's exact value (data-value) by its key."""
    cells = v.page.eval_on_selector_all("td[data-key]", "tds => tds.map(td => [td.dataset.key, td.dataset.value, td.textContent])")
    return {key: (json.loads(value), text) for key, value, text in cells}


def assert_drawn_and_offline(v) -> None:
    assert v.page.evaluate(READY) == "drawn"
    assert v.errors() == [], v.errors()
    assert v.foreign_requests() == [], v.foreign_requests()
    charts = v.chart_marks()
    assert charts, "no chart on the page"
    for chart in charts:
        assert chart["svgs"] == 1 and chart["marks"] > 0, chart


def sim_run(tmp: Path, url: str, shards: int = 3) -> Path:
    cfg = tmp / "config.yaml"
    cfg.write_text(f"""
services:
  model: {{type: api, url: "{url}", model: sim, retries: {{attempts: 1}}}}
benchmarks:
  - name: arith
    params: {{n: 60}}
    repeats: 3
    max_concurrent: 16
output: {{progress_interval_s: 0}}
""")
    for i in range(shards):
        r = shardeval_cmd("run", str(cfg), "--shard", f"{i}/{shards}", "-o", str(tmp / "run" / f"shard_{i}"))
        assert r.returncode in (0, 3), r.stderr  # 3: some cells ended in errors, which is the point
    return tmp / "run"


def test_report_of_a_real_run_draws_every_chart_offline_with_the_numbers_of_scores_json(tmp_path, browser):
    with running_sim("--bench", "arith", "--accuracy", "0.6", "--ttft-ms", "2", "--itl-ms", "1", "--fail-5xx", "0.1") as url:
        run = sim_run(tmp_path, url)
    merged = shardeval_cmd("merge", str(run))
    assert merged.returncode == 3, merged.stderr  # written; its cells hold errors: ERRORS, not complete (issue 24)
    assert "report.html" in merged.stdout and merged.stderr.count("report.html") == 0
    scores = json.loads((run / "merged" / "scores.json").read_text())
    assert scores["arith"]["n_errors"] > 0, "the simulator's 5xx should leave error records (one attempt each)"
    n, kinds = scores["arith"]["n_errors"], scores["arith"]["error_kinds"]
    header = f'id="verdict">ERRORS</span>: {n} of {scores["arith"]["n_expected"]} cells end in errors ({n} server_error)</p>'
    assert kinds == {"server_error": n} and header in (run / "merged" / "report.html").read_text()
    with visit(browser, (run / "merged" / "report.html").as_uri(), ready=READY) as v:
        assert_drawn_and_offline(v)
        ids = {c["id"] for c in v.chart_marks()}
        assert {"summary-accuracy", "summary-pass_k", "passk-arith", "latency-arith", "ttft-arith", "coverage-arith", "errors-arith"} <= ids
        shown = page_numbers(v)
        metrics = scores["arith"]["metrics"]
        for metric, m in metrics.items():
            if metric == "pass@1" and all(m.get(f) == metrics["accuracy"].get(f) for f in ("value", "ci_low", "ci_high")):
                assert "pass@1 is accuracy again" in v.page.inner_text("p.pass1")  # shown once, and said so
                continue
            for field in ("value", "ci_low", "ci_high", "stderr", "n"):
                value, text = shown[f"arith/{metric}/{field}"]
                assert value == m.get(field), (metric, field)
                if isinstance(value, float):
                    assert text == f"{value:.4f}"
        assert v.page.inner_text("#verdict") == "ERRORS"  # the old lie: a run with error cells said COMPLETE
        timing = json.loads((run / "merged" / "timing.json").read_text())["arith"]
        for field in ("latency_s", "ttft_s"):
            for q in ("p50", "p90", "p99"):
                assert shown[f"arith/timing/{field}/{q}"][0] == timing[field][q]
        # the errors chart counts what scores.json counts
        errors = v.page.evaluate("""() => { const view = document.querySelector('#errors-arith'); return view.textContent; }""")
        for kind, n in scores["arith"]["error_kinds"].items():
            assert f"{kind} {n}" in errors


def hostile_run(root: Path) -> Path:
    """3 shards x 12 problems x 2 repeats, categories, errors, and hostile text in every field a
    record brings to the page (problem id, category, extracted, reference, error, reply)."""
    config_hash, n = "sha256:hostile", 12
    for idx in range(3):
        lo, hi = idx * 4, idx * 4 + 4

        def records(lo: int = lo, hi: int = hi, idx: int = idx):
            for p in range(lo, hi):
                for r in range(2):
                    status = "error" if (p, r) == (5, 1) else "ok"
                    rec = record(
                        "arith",
                        p,
                        r,
                        idx,
                        score=float((p + r) % 2) if p % 3 else 0.0,
                        status=status,
                        run=run_id(config_hash),
                        cluster=f"subject {p % 3}" if p % 3 else HOSTILE,
                        extracted=HOSTILE,
                    )
                    yield msgspec.structs.replace(
                        rec, response=HOSTILE + f" reply {p}", reference=HOSTILE + str(p), error=HOSTILE if status == "error" else None
                    )

        make_shard(str(root), idx, 3, n_problems=n, repeats=2, config_hash=config_hash, records=records(), metrics=["accuracy", "pass@k"])
    return root


def test_hostile_strings_in_records_are_shown_as_text(tmp_path, browser):
    run = hostile_run(tmp_path / "run")
    assert shardeval_cmd("merge", str(run), "-q").returncode == 3  # written; its records hold errors (ERRORS)
    html = (run / "merged" / "report.html").read_text()
    ours = html.split("<script>", 1)[0]  # the page's body and its charts' JSON, before Vega's own code
    assert "<script>window.pwned" not in ours and "<img" not in ours and "window.pwned" in ours
    with visit(browser, (run / "merged" / "report.html").as_uri(), ready=READY) as v:
        assert_drawn_and_offline(v)
        assert v.page.evaluate("() => window.pwned") is None  # neither <script> nor onerror ran
        assert v.page.evaluate("() => document.querySelectorAll('img').length") == 0
        assert v.page.evaluate("() => document.querySelectorAll('script').length") == 3  # specs, bundle, drawing: the page's own
        text = v.page.evaluate("() => document.body.textContent")
        shown = HOSTILE.replace("\x00", "\u2400")  # NUL drawn as its control picture, the rest verbatim
        assert shown in text
        assert text.count(shown) >= 10  # extracted, references, errors, categories, replies
        # the category chart lists the hostile category name as text in its SVG
        assert "categories-arith" in {c["id"] for c in v.chart_marks()}


def test_an_item_link_opens_its_conversation(tmp_path, browser):
    run = hostile_run(tmp_path / "run")
    assert shardeval_cmd("merge", str(run), "-q").returncode == 3  # written; its records hold errors (ERRORS)
    with visit(browser, (run / "merged" / "report.html").as_uri(), ready=READY) as v:
        link = v.page.locator("table.items a").first
        target = link.get_attribute("href")[1:]
        assert v.page.evaluate(f"() => document.getElementById({json.dumps(target)}).open") is False
        link.click()  # the page opens it on hashchange, which fires after the click returns: wait for it
        v.page.wait_for_function(f"() => document.getElementById({json.dumps(target)}).open === true", timeout=5_000)
        body = v.page.inner_text(f"[id={json.dumps(target)}]")
        assert "reply" in body or "assistant" in body


def axis_labels(v, chart_id: str) -> list[str]:
    return v.page.eval_on_selector_all(f"[id={json.dumps(chart_id)}] g.role-axis-label text", "ts => ts.map(t => t.textContent)")


def test_a_chart_of_one_repeated_value_labels_that_value_and_equal_repeats_are_no_disagreement(tmp_path, browser):
    """Every score 0.1 (an interval of width 0) and every TTFT 0.1 s: Vega labelled such an axis
    with its step's precision, so 0.1 read "0" and 0.7 read "1". Three repeats of 0.1 have a
    float variance of 1e-34, which listed them as the most disagreeing items."""
    for i in range(2):
        make_shard(str(tmp_path / "run"), i, 2, n_problems=6, repeats=3, score=lambda p, r: 0.1, metrics=["accuracy"])
    assert shardeval_cmd("merge", str(tmp_path / "run"), "-q").returncode == 0
    accuracy = json.loads((tmp_path / "run" / "merged" / "scores.json").read_text())["arith"]["metrics"]["accuracy"]
    # one repeated value: no interval since issue 24 (H8d: no spread is no certainty), the point is still charted
    assert accuracy.get("ci_low") is None and accuracy["value"] == pytest.approx(0.1)
    with visit(browser, (tmp_path / "run" / "merged" / "report.html").as_uri(), ready=READY) as v:
        assert_drawn_and_offline(v)
        assert f"{accuracy['value']:.6g}" in axis_labels(v, "summary-accuracy")
        assert "0.1" in axis_labels(v, "ttft-arith") and "0" not in axis_labels(v, "ttft-arith")
        headings = v.page.eval_on_selector_all("h4", "hs => hs.map(h => h.textContent)")
        assert "Lowest mean score" in headings and "Most disagreement between repeats" not in headings
        assert "None" not in v.page.inner_text("table.items")  # nothing extracted reads —


def test_merge_without_the_charts_javascript_writes_report_md_and_says_how_to_get_html(tmp_path):
    for i in range(2):
        make_shard(str(tmp_path / "run"), i, 2, n_problems=10)
    env = without_javascript(tmp_path)
    r = shardeval_cmd("merge", str(tmp_path / "run"), env=env)
    assert r.returncode == 0, r.stderr
    merged = tmp_path / "run" / "merged"
    assert (merged / "report.md").exists() and (merged / "scores.json").exists()
    assert not (merged / "report.html").exists()
    lines = [line for line in r.stderr.splitlines() if "report.html" in line]
    assert len(lines) == 1 and FETCH_HINT in lines[0], r.stderr
    assert "Traceback" not in r.stderr
    # a page from an earlier merge is kept, and the line says it is older
    (merged / "report.html").write_text("earlier")
    again = shardeval_cmd("merge", str(tmp_path / "run"), "-q", env=env)
    assert again.returncode == 0 and (merged / "report.html").read_text() == "earlier"
    assert "from an earlier merge" in again.stderr


@pytest.mark.parametrize("field", ["value", "ci_low", "ci_high", "n"])
def test_per_category_rows_equal_scores_json(tmp_path, field):
    """The category chart's data is per_cluster from scores.json, in the page's chart specs."""
    run = hostile_run(tmp_path / "run")
    assert shardeval_cmd("merge", str(run), "-q").returncode == 3  # written; its records hold errors (ERRORS)
    per = json.loads((run / "merged" / "scores.json").read_text())["arith"]["metrics"]["accuracy"]["details"]["per_cluster"]
    html = (run / "merged" / "report.html").read_text()
    specs = json.loads(html.split('<script type="application/json" id="chart-specs">', 1)[1].split("</script>", 1)[0])
    rows = {row["category"]: row for row in specs["categories-arith"]["data"]["values"]}
    key = {"ci_low": "low", "ci_high": "high"}.get(field, field)
    assert set(rows) == set(per)
    for name, entry in per.items():
        assert rows[name][key] == entry.get(field, entry["value"])
