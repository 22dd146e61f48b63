"""Pages people read (issue 30): charts as wide as the page, the summary naming what it shows (pass@k
for every k, pass@1 once where it is accuracy again, a benchmark with no value and why), counts
ticking at whole numbers, an error one colour in every chart, a judged benchmark's answers and
verdicts in columns of their own, and a zero line on every chart of differences. Runs made with
tests/shard_factory.py and merged; the report checked in headless Chromium, specs in the page."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec

from browser import browser, visit  # noqa: F401  (browser is a fixture)
from conftest import shardeval_cmd
from shard_factory import make_shard, make_sweep, record
from shardeval.api.records import fmt_p
from shardeval.store.records import JudgeRecord, run_id
from shardeval_pages.charts import ERROR_COLOR

READY = "document.body.dataset.charts"
CONFIG = "sha256:read"


def specs(html_path: Path) -> dict:
    html = html_path.read_text()
    return json.loads(html.split('<script type="application/json" id="chart-specs">', 1)[1].split("</script>", 1)[0])


def verdict(p: int) -> str:
    return "A" if p % 3 else "B"  # pairwise: A, the model's answer is better (score 1); B, the reference (0)


def judged_run(root: Path) -> Path:
    """One repeat of a pairwise-judged benchmark (the judge's verdict in `extracted`, the answer in
    `response`), two shards, errors of two kinds."""
    run = run_id(CONFIG)
    for idx in range(2):

        def records(idx: int = idx):
            for p in range(idx * 6, idx * 6 + 6):
                status = "error" if p in (1, 2, 7) else "ok"
                rec = record("open_qa", p, 0, idx, score=float(verdict(p) == "A"), status=status, run=run)
                yield msgspec.structs.replace(
                    rec,
                    response=f"the answer to {p} is {p + 1}",
                    extracted=None if status == "error" else verdict(p),
                    error_kind="timeout" if p == 7 else rec.error_kind,
                    judge=JudgeRecord(
                        service="judge",
                        model="judge-sim",
                        mode="pairwise",
                        reply=f"[[{verdict(p)}]]",
                        verdict=None if status == "error" else verdict(p),
                    ),
                )

        make_shard(str(root), idx, 2, n_problems=12, bench="open_qa", config_hash=CONFIG, records=records(), metrics=["accuracy", "pass@k"])
    return root


def test_a_judged_run_reads_as_answers_and_verdicts_on_a_page_wide_report(tmp_path, browser):
    run = judged_run(tmp_path / "run")
    assert shardeval_cmd("merge", str(run), "-q").returncode == 3  # written; some cells end in errors
    page = run / "merged" / "report.html"
    s = specs(page)
    assert s["summary-accuracy"]["width"] == "container" and "summary-pass_1" not in s  # pass@1 = accuracy: once
    assert s["coverage-open_qa"]["encoding"]["x"]["axis"] == {"tickMinStep": 1, "format": "d"}
    coverage = s["coverage-open_qa"]["encoding"]["color"]["scale"]
    errors = s["errors-open_qa"]["encoding"]["color"]["scale"]
    assert coverage["range"][coverage["domain"].index("error")] == ERROR_COLOR
    assert errors["domain"][0] == "server_error" and errors["range"][0] == ERROR_COLOR  # the most common kind
    with visit(browser, page.as_uri(), ready=READY, viewport=(1200, 900)) as v:
        assert v.page.evaluate(READY) == "drawn" and v.errors() == []
        box, svg = v.page.evaluate("""() => { const c = document.getElementById('summary-accuracy');
            return [c.clientWidth, c.querySelector('svg').getBoundingClientRect().width]; }""")
        assert box > 1000 and abs(svg - box) <= 2, (box, svg)  # the page's width, not 440 px
        labels = v.page.eval_on_selector_all("#coverage-open_qa g.role-axis-label text", "ts => ts.map(t => t.textContent)")
        assert all(t.replace(",", "").isdigit() for t in labels if t and not t.startswith("shard")), labels
        heads = v.page.eval_on_selector_all("table.items th", "ths => ths.map(t => t.textContent)")
        assert "answer per repeat" in heads and "judge's verdict per repeat" in heads and "extracted per repeat" not in heads
        answers = v.page.eval_on_selector_all("table.items td.answer", "tds => tds.map(t => t.textContent)")
        verdicts = v.page.eval_on_selector_all("table.items td.judge-verdict", "tds => tds.map(t => t.textContent)")
        assert "the answer to 0 is 1" in answers and "B" in verdicts and "[timeout]" in verdicts
        assert "pass@1 is accuracy again" in v.page.inner_text("p.pass1")
        assert v.page.locator("td[data-key='open_qa/pass@1/value']").count() == 0


def test_a_benchmark_whose_records_are_all_errors_is_named_in_the_summary(tmp_path, browser):
    run = run_id(CONFIG)
    make_shard(
        str(tmp_path / "run"),
        0,
        1,
        n_problems=5,
        bench="down",
        config_hash=CONFIG,
        records=[record("down", p, 0, 0, status="error", run=run) for p in range(5)],
    )
    assert shardeval_cmd("merge", str(tmp_path / "run"), "-q").returncode == 3
    with visit(browser, (tmp_path / "run" / "merged" / "report.html").as_uri(), ready=READY) as v:
        assert v.errors() == []
        assert (
            v.page.inner_text("ul.no-value li[data-benchmark=down]") == "down: no value to chart: all 5 records are errors (server_error 5)"
        )


def test_every_chart_of_differences_draws_zero(tmp_path):
    """The sweep's differences against its baseline, and compare's B − A: a rule at 0."""
    root = tmp_path / "sweep"
    make_sweep(str(root), 3, 2, n_problems=12)
    assert shardeval_cmd("merge", str(root), "-q").returncode == 0
    out = tmp_path / "compare.html"
    done = shardeval_cmd("compare", str(root / "step1000"), str(root / "step2000"), "--html", str(out))
    assert out.is_file(), done.stderr
    sweep_specs = specs(root / "merged" / "sweep.html")
    differences = [(sweep_specs, chart) for chart in sweep_specs if chart.startswith("vs-")]
    assert len(differences) == 2  # one per benchmark
    for charts, chart in [*differences, (specs(out), "diff")]:
        layers = charts[chart]["layer"]
        zero = [layer for layer in layers if layer.get("mark", {}).get("type") == "rule" and "values" in layer.get("data", {})]
        assert zero and zero[0]["data"]["values"] == [{"zero": 0}], (chart, layers)


def test_a_number_halfway_between_two_shown_values_reads_as_sweep_md_rounds_it(tmp_path, browser):
    """Values exactly halfway between two 4-decimal numbers (1/32 = 0.03125, 5/32 = 0.15625) read in
    sweep.html's tables as Python rounds them in sweep.md and report.md (half to even: 0.0312,
    0.1562), not as JavaScript's toFixed would (0.0313, 0.1563); every other number too."""
    root = tmp_path / "sweep"
    make_sweep(str(root), 2, 1, n_problems=32, score=lambda m, b, p, r: float(p < (1, 5)[m]))
    assert shardeval_cmd("merge", str(root), "-q").returncode == 0
    with visit(browser, (root / "merged" / "sweep.html").as_uri(), ready=READY) as v:
        cells = v.page.eval_on_selector_all(
            "td[data-key]", "tds => tds.map(td => [td.dataset.key, JSON.parse(td.dataset.value), td.textContent])"
        )
    shown = {key: text for key, _, text in cells}
    assert shown["accuracy/step1000/bench00/value"] == "0.0312" and shown["accuracy/step2000/bench00/value"] == "0.1562"
    md = (root / "merged" / "sweep.md").read_text()
    assert "0.0312" in md and "0.1562" in md and "0.0313" not in md
    for key, value, text in cells:
        if isinstance(value, float) and not key.endswith(("/n", "/n_ok")):
            assert text == (fmt_p(value) if key.endswith(("/p_value", "/p_holm")) else f"{value:.4f}"), (key, value, text)
