"""What the pages show of a reasoning model (issue 39), opened in headless Debian chromium
(tests/browser.py): report.html's count of answers cut off while thinking and its histogram of
reasoning tokens, each item's thinking folded under its answer (hostile thinking shown as text,
long thinking cut and said so), sweep.html's per-checkpoint charts in the sweep's order, and the
live status page's count. A run without thinking shows none of it.

The runs are built with tests/shard_factory.py (tests/reasoning_support.py): the simulator does
not think. The numbers the pages must show are scores.json's (and sweep.json's) `reasoning`
object where the merge writes one, else counted by the test from the records it wrote.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from collections.abc import Callable, Iterator

import msgspec
import pytest

from browser import browser, visit  # noqa: F401  (browser is a fixture)
from conftest import shardeval_cmd
from reasoning_support import BENCH, HOSTILE_THINKING, LONG, expected_reasoning, reasoning_run, reasoning_sweep
from shard_factory import make_shard, make_sweep

READY = "document.body.dataset.charts"
MODELS = ["base", "step2", "step10"]  # table order, which is not alphabetical order


def shown_numbers(v, selector: str) -> dict[str, Any]:
    """Every (data-key, exact value) inside `selector`."""
    pairs = v.page.eval_on_selector_all(f"{selector} [data-key]", "es => es.map(e => [e.dataset.key, e.dataset.value])")
    return {key: json.loads(value) for key, value in pairs}


def flat(summary: dict[str, Any], prefix: str) -> dict[str, Any]:
    """A `reasoning` object as the page's keys: <prefix>/truncated_reasoning, .../reasoning_tokens/from/usage."""
    out = {}
    for key, value in summary.items():
        if isinstance(value, dict):
            out |= flat(value, f"{prefix}/{key}")
        else:
            out[f"{prefix}/{key}"] = value
    return out


def assert_clean(v) -> None:
    assert v.page.evaluate(READY) == "drawn"
    assert v.errors() == [], v.errors()
    assert v.foreign_requests() == [], v.foreign_requests()
    for chart in v.chart_marks():
        assert chart["svgs"] == 1 and chart["marks"] > 0, chart
    assert v.page.evaluate("() => window.pwned") is None


def test_report_counts_cut_off_thinking_charts_tokens_and_folds_each_items_thinking(tmp_path, browser):
    records = reasoning_run(str(tmp_path / "run"))
    assert shardeval_cmd("merge", str(tmp_path / "run"), "-q").returncode == 3  # written; (3, 1) is an error
    merged = tmp_path / "run" / "merged"
    scores = json.loads((merged / "scores.json").read_text())[BENCH]
    expected = scores.get("reasoning") or expected_reasoning(records)  # scores.json's, once the merge writes it
    assert expected["truncated_reasoning"] == 3 and expected["n_answered"] == 23  # the error that thought counts nowhere
    html = (merged / "report.html").read_text()
    assert "x" * (LONG // 10) not in html  # a 100 KB thinking is cut, not embedded
    with visit(browser, merged.joinpath("report.html").as_uri(), ready=READY) as v:
        assert_clean(v)
        shown = shown_numbers(v, f"#reasoning-line-{BENCH}") | shown_numbers(v, "table.reasoning-tokens")
        want = flat(expected, f"{BENCH}/reasoning")
        assert shown == {key: want.get(key) for key in shown}  # each number on the page is scores.json's
        assert set(shown) == set(flat(expected_reasoning(records), f"{BENCH}/reasoning"))  # and every one of them is shown
        line = v.page.inner_text(f"#reasoning-line-{BENCH}")
        assert "truncated while thinking: 3 of 23 (13.0 %)" in line and "cut off after answering: 1" in line
        # the histogram: one bar per (bin, outcome), every reply with a count in it, the cut-off ones at the budget
        assert f"reasoning-{BENCH}" in {c["id"] for c in v.chart_marks()}
        spec = json.loads(html.split('id="chart-specs">', 1)[1].split("</script>", 1)[0])[f"reasoning-{BENCH}"]
        bars = spec["data"]["values"]
        assert sum(b["n"] for b in bars) == expected["reasoning_tokens"]["n"]
        assert sum(b["n"] for b in bars if b["outcome"] == "truncated while thinking") == expected["truncated_reasoning"]
        # the items: the cut-off problems have a group of their own, marked, and their extracted reads so
        assert v.page.eval_on_selector_all("h4", "hs => hs.map(h => h.textContent)").count("Cut off while thinking") == 1
        marked = v.page.eval_on_selector_all("details.item:has(summary .truncated-reasoning)", "ds => ds.map(d => d.id)")
        assert marked == [f"i-{BENCH}-{p}" for p in (1, 5, 9)]
        # every thinking folded (collapsed) under its answer, with its token count and who counted it
        folds = v.page.eval_on_selector_all(
            "details.thinking",
            """ds => ds.map(d => ({id: d.id, open: d.open,
            summary: d.querySelector('summary').textContent, text: (d.querySelector('.thinking-text') || {}).textContent}))""",
        )
        by_id = {f["id"]: f for f in folds}
        assert folds and not any(f["open"] for f in folds)
        assert by_id[f"t-{BENCH}-1-0"]["summary"].startswith("thinking: 2048 tokens (usage), ")
        assert by_id[f"t-{BENCH}-2-0"]["summary"].startswith("thinking: 200 tokens (counted by stream), ")
        assert f"t-{BENCH}-3-1" not in by_id  # an error's thinking is not an answer's
        # hostile thinking is text: </details> closed nothing, <script> and onerror ran nothing
        assert by_id[f"t-{BENCH}-2-0"]["text"] == HOSTILE_THINKING.replace("\x00", "\u2400") + " think 2/0"
        assert v.page.evaluate("() => document.querySelectorAll('img').length") == 0
        assert v.page.evaluate("() => document.querySelectorAll('script').length") == 3
        assert v.page.evaluate(f"() => document.getElementById('t-{BENCH}-2-0').parentElement.closest('details').id") == f"i-{BENCH}-2"
        # a long thinking: its head and its end, with its whole length and where the rest is
        long = by_id[f"t-{BENCH}-9-0"]
        assert "100,013 characters" in long["summary"] and long["text"].startswith("long xxx") and long["text"].endswith(" end 9/0")
        assert f"left out here; the whole thinking is in merged/{BENCH}/trajectories.jsonl" in long["text"]
        assert len(long["text"]) < 4300
        # the answer above it says there is none; a reader who opens the fold sees the thinking
        v.page.click(f"a[href='#i-{BENCH}-9']")
        v.page.wait_for_function(f"() => document.getElementById('i-{BENCH}-9').open === true", timeout=5_000)
        reply = v.page.inner_text(f"#i-{BENCH}-9 .reply[data-repeat='0']")
        assert "no answer: cut off while thinking, scored 0" in reply and "long xxx" not in reply
        v.page.click(f"#t-{BENCH}-9-0 > summary")
        assert v.page.evaluate(f"() => document.getElementById('t-{BENCH}-9-0').open") is True
        assert "long xxx" in v.page.inner_text(f"#t-{BENCH}-9-0")
        assert v.errors() == []


def test_a_run_without_thinking_shows_none_of_it(tmp_path, browser):
    for i in range(2):
        make_shard(str(tmp_path / "run"), i, 2, n_problems=10)
    assert shardeval_cmd("merge", str(tmp_path / "run"), "-q").returncode == 0
    assert "reasoning" not in json.loads((tmp_path / "run" / "merged" / "scores.json").read_text())["arith"]
    with visit(browser, (tmp_path / "run" / "merged" / "report.html").as_uri(), ready=READY) as v:
        assert_clean(v)
        assert v.page.evaluate("() => document.querySelectorAll('.reasoning, .reasoning-tokens, details.thinking, .replies').length") == 0
        assert not any(c["id"].startswith("reasoning-") for c in v.chart_marks())
    ours = (
        (tmp_path / "run" / "merged" / "report.html").read_text().split("<body>", 1)[1].split("<script", 1)[0]
    )  # its body, before any script
    assert "truncated while thinking" not in ours and "reasoning tokens" not in ours and "thinking:" not in ours


def test_each_item_and_the_page_embed_a_bounded_share_of_thinking():
    """THINKING_PER_ITEM over an item's repeats, then lengths only; PAGE_THINKING_BYTES over the
    page, then placeholders: a run of long thinking draws a bounded page."""
    from reasoning_support import reasoning_records
    from shardeval_pages import report_page as rp

    recs = [msgspec.structs.replace(r, reasoning="y" * 50_000) for r in reasoning_records(lo=4, hi=5)] * 3  # six repeats
    html = rp.replies("k", 4, [(r, None) for r in recs], rp.ThinkingBudget(), "merged/think/trajectories.jsonl")
    embedded = sum(len(run) for run in re.findall("y{100,}", html))
    assert embedded == rp.THINKING_PER_ITEM and html.count('class="text thinking-text"') == 3
    assert html.count(f"this item shows {rp.THINKING_PER_ITEM:,} characters of thinking") == 3
    small = rp.ThinkingBudget(left=5_000)
    html = rp.replies("k", 4, [(r, None) for r in recs[:2]], small, "merged/think/trajectories.jsonl")
    assert html.count('class="text thinking-text"') == 1 and "the page holds its 1024 KiB of thinking" in html


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("reasoning-sweep") / "sweep"
    records = reasoning_sweep(str(root), MODELS)
    assert shardeval_cmd("merge", str(root), "-q").returncode == 3  # each thinking model has its error cell
    return root, records


def test_sweep_html_shows_cut_off_thinking_and_tokens_per_checkpoint_in_the_sweeps_order(sweep, browser):
    root, records = sweep
    doc = json.loads((root / "merged" / "sweep.json").read_text())
    expected = {}
    for m in MODELS[1:]:  # sweep.json's, once the merge writes it; else counted from the records
        cell = next(c for c in doc["cells"] if c["service"] == m and c["benchmark"] == BENCH)
        expected[m] = cell.get("reasoning") or expected_reasoning(records[m])
    with visit(browser, (root / "merged" / "sweep.html").as_uri(), ready=READY) as v:
        assert_clean(v)
        ids = {c["id"] for c in v.chart_marks()}
        assert {f"reasoning-rate-{BENCH}", f"reasoning-tokens-{BENCH}"} <= ids and not any("plain" in i for i in ids if "reasoning" in i)
        for chart in (f"reasoning-rate-{BENCH}", f"reasoning-tokens-{BENCH}"):
            models = v.page.eval_on_selector_all(
                f"#{chart} g.role-axis[aria-label^='X-axis'] g.role-axis-label text", "ts => ts.map(t => t.textContent)"
            )
            assert models == MODELS[1:]  # the sweep's order; the baseline never thought: no point
        numbers = dict(v.table_numbers("#reasoning-table"))
        want = {}
        for m, s in expected.items():
            want |= {
                f"reasoning/{m}/{BENCH}/truncated_reasoning": s["truncated_reasoning"],
                f"reasoning/{m}/{BENCH}/truncated": s["truncated"],
                f"reasoning/{m}/{BENCH}/mean": s["reasoning_tokens"]["mean"],
                f"reasoning/{m}/{BENCH}/p50": s["reasoning_tokens"]["p50"],
            }
        assert numbers == want
        rows = v.page.eval_on_selector_all("#reasoning-table tbody tr", "rs => rs.map(r => r.textContent)")
        assert rows[0].startswith("base—") and "3 of 23 (13.0 %)" in rows[1]
    assert expected["step10"]["reasoning_tokens"]["mean"] == pytest.approx(expected["step2"]["reasoning_tokens"]["mean"] + 300)


def test_a_sweep_without_thinking_shows_none_of_it(tmp_path):
    make_sweep(str(tmp_path / "sweep"), 2, 1)
    assert shardeval_cmd("merge", str(tmp_path / "sweep"), "-q").returncode == 0
    html = (tmp_path / "sweep" / "merged" / "sweep.html").read_text()
    assert 'id="reasoning' not in html and '"reasoning"' not in html.split("<script>", 1)[0]


@contextmanager
def status_page(root: Path, add: Callable[[str | None, dict[str, Any]], None]) -> Iterator[str]:
    """The live page's server (status_server.make_app) on 127.0.0.1 in a thread of its own, its
    JSON's benchmarks given what `add(model, benchmark)` puts in: the `reasoning` object the
    status computes once the core counts it (this branch only draws it)."""
    from aiohttp import web
    from shardeval_pages.status_server import Snapshots, make_app

    class WithReasoning(Snapshots):
        def compute(self) -> bytes:
            doc = json.loads(super().compute())
            for model, run in [(None, doc["run"])] + [(m["name"], m["run"]) for m in (doc["sweep"] or {}).get("models", [])]:
                for b in (run or {}).get("benchmarks", []):
                    add(model, b)
            return json.dumps(doc).encode()

    started, state = threading.Event(), {}

    async def main() -> None:
        snapshots = WithReasoning(str(root), interval=0.2)
        runner = web.AppRunner(make_app(snapshots))
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        state["url"], state["stop"], state["loop"] = (
            f"http://127.0.0.1:{runner.addresses[0][1]}/",
            asyncio.Event(),
            asyncio.get_running_loop(),
        )
        started.set()
        try:
            await state["stop"].wait()
        finally:
            snapshots.close()
            await runner.cleanup()

    thread = threading.Thread(target=lambda: asyncio.run(main()), daemon=True)
    thread.start()
    assert started.wait(30)
    try:
        yield state["url"]
    finally:
        state["loop"].call_soon_threadsafe(state["stop"].set)
        thread.join(10)


def test_live_status_page_counts_answers_cut_off_while_thinking_per_benchmark(tmp_path, browser):
    records = reasoning_run(str(tmp_path / "run"))
    summary = expected_reasoning(records)

    def add(model: str | None, b: dict[str, Any]) -> None:
        if b["name"] == BENCH:
            b["reasoning"] = summary

    with status_page(tmp_path / "run", add) as url, visit(browser, url) as v:
        v.page.wait_for_function("() => document.querySelector('[data-k=reasoning]') !== null", timeout=30_000)
        assert v.page.inner_text(f"[data-row='bench:{BENCH}'] [data-k=reasoning]") == "truncated while thinking: 3 of 23"
        assert "reasoning" in v.page.eval_on_selector_all("th", "ts => ts.map(t => t.textContent)")
        assert v.errors() == [] and v.foreign_requests() == []


def test_live_status_page_of_a_sweep_counts_per_checkpoint_and_a_run_without_thinking_shows_none(sweep, tmp_path, browser):
    root, records = sweep
    summaries = {m: expected_reasoning(rs) for m, rs in records.items()}

    def add(model: str | None, b: dict[str, Any]) -> None:
        if b["name"] == BENCH and model in summaries:
            b["reasoning"] = summaries[model]

    with status_page(root, add) as url, visit(browser, url) as v:
        v.page.wait_for_function("() => document.querySelector('[data-k=reasoning]') !== null", timeout=30_000)
        shown = v.page.eval_on_selector_all(
            "[data-row^='grid:'] [data-k=reasoning]", "es => es.map(e => [e.closest('[data-row]').dataset.row, e.textContent])"
        )
        assert shown == [
            [f"grid:{m}:{BENCH}", f"truncated while thinking: {summaries[m]['truncated_reasoning']} of {summaries[m]['n_answered']}"]
            for m in MODELS[1:]
        ]
        assert v.errors() == [] and v.foreign_requests() == []
    make_shard(str(tmp_path / "plain"), 0, 1, n_problems=8)
    with status_page(tmp_path / "plain", lambda model, b: None) as url, visit(browser, url) as v:
        v.page.wait_for_function("() => document.querySelector('[data-row=\"bench:arith\"]') !== null", timeout=30_000)
        assert v.page.evaluate("() => document.querySelectorAll('[data-k=reasoning]').length") == 0
        assert "reasoning" not in v.page.eval_on_selector_all("th", "ts => ts.map(t => t.textContent)")
        assert v.errors() == []
