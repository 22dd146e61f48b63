"""One number, one text (issue 40, point 11).

443/800 read 0.5538 on sweep.html and the live page and 0.5537 in sweep.md and the terminal: the
pages' script rounded the decimal half to even, the Markdown and the text formatted the binary
float. Every output now takes its rule from shardeval.numbers.fmt (the shortest decimal form, a tie
to even), which the pages' script applies too (Intl halfEven reads the same form). Tested at ties,
where the two rules part, in every text output: the terminal, report.md, sweep.md, report.html,
sweep.html and the live page (`status --serve`) in headless Chromium. (The exports carry numbers,
not text; `status` without --serve shows no score.)
"""

from __future__ import annotations

import pytest

from browser import browser, visit  # noqa: F401  (browser is a fixture)
from conftest import shardeval_cmd
from served import status_serve
from shard_factory import make_shard, make_sweep, record
from shardeval.numbers import fmt, percent

# (problems, right answers, the text every output shows, the text the binary float's rounding gave)
TIES = [(800, 443, "0.5538", "0.5537"), (160, 7, "0.0438", "0.0437"), (32, 1, "0.0312", "0.0313")]
READY = "document.body.dataset.charts"


def test_the_rule_at_ties_and_around_them():
    assert [fmt(k / n) for n, k, _, _ in TIES] == [shown for _, _, shown, _ in TIES]
    assert (fmt(0.00015), fmt(0.00025), fmt(0.00005), fmt(1 / 8, 2), fmt(3 / 8, 2)) == ("0.0002", "0.0002", "0.0000", "0.12", "0.38")
    assert (fmt(None), fmt(float("nan")), fmt(-0.0), fmt(2), fmt(0.123449999)) == ("—", "—", "-0.0000", "2.0000", "0.1234")


@pytest.mark.parametrize("n, k, shown, other", TIES)
def test_a_run_says_one_text_in_the_terminal_report_md_report_html_and_the_live_page(tmp_path, browser, n, k, shown, other):
    root = tmp_path / "run"
    make_shard(str(root), 0, 1, n_problems=n, score=lambda p, r: float(p < k), metrics=["accuracy"])
    merged = shardeval_cmd("merge", str(root))
    assert merged.returncode == 0, merged.stderr
    md = (root / "merged" / "report.md").read_text()
    for name, text in (("terminal", merged.stdout + merged.stderr), ("report.md", md)):
        assert shown in text, (name, text[:2000])
        assert other not in text, name
    with visit(browser, (root / "merged" / "report.html").as_uri(), ready=READY) as v:
        page = v.page.inner_text("body")
    assert shown in page and other not in page
    with status_serve(root, "--interval", "0.3") as url, visit(browser, url) as v:
        v.page.wait_for_function(
            f"() => document.body.innerText.includes('{shown}') || document.body.innerText.includes('{other}')", timeout=30_000
        )
        live = v.page.inner_text("body")
    assert shown in live and other not in live, live


@pytest.mark.parametrize("n, k, shown, other", TIES[:2])
def test_a_sweep_says_one_text_in_sweep_md_and_sweep_html(tmp_path, browser, n, k, shown, other):
    root = tmp_path / "sweep"
    make_sweep(str(root), 2, 1, n_problems=n, score=lambda m, b, p, r: float(p < k + m))
    merged = shardeval_cmd("merge", str(root))
    assert merged.returncode == 0, merged.stderr
    md = (root / "merged" / "sweep.md").read_text()
    assert shown in md and other not in md, md[:2000]
    assert shown in merged.stdout + merged.stderr
    with visit(browser, (root / "merged" / "sweep.html").as_uri(), ready=READY) as v:
        page = v.page.inner_text("body")
    assert shown in page and other not in page


def test_a_percentage_reads_the_same_in_the_terminal_and_on_the_live_page(tmp_path, browser):
    """1 of 400 records done: 0.25 %, a tie at one decimal. The terminal's `status` and the live page
    both say 0.2% (half to even from the shortest decimal form); the page's toFixed said 0.3%, and
    f"{0.575:.0%}" says 57% where the rule says 58%."""
    assert (percent(1 / 400, 1), percent(0.575), percent(0.95), percent(0.00125, 2)) == ("0.2%", "58%", "95%", "0.12%")
    root = tmp_path / "run"
    make_shard(str(root), 0, 1, n_problems=400, state="running", records=[record("arith", 0, 0, 0)])
    terminal = shardeval_cmd("status", str(root))
    assert "1/400 records (0.2%)" in terminal.stdout, terminal.stdout + terminal.stderr
    with status_serve(root, "--interval", "0.3") as url, visit(browser, url) as v:
        v.page.wait_for_function("() => document.body.innerText.includes('records (')", timeout=30_000)
        live = v.page.inner_text("body")
    assert "records (0.2%)" in live and "0.3%" not in live, live


def test_a_charts_tooltip_says_the_tables_text(tmp_path, browser):
    """Vega's ".4f" rounded the binary value: hovering the accuracy at 443/800 said 0.5537 beside the
    table's 0.5538. The charts' tooltips now use the pages' format type `decimals` (the one rule)."""
    root = tmp_path / "run"
    make_shard(str(root), 0, 1, n_problems=800, score=lambda p, r: float(p < 443), metrics=["accuracy"])
    assert shardeval_cmd("merge", str(root)).returncode == 0
    with visit(browser, (root / "merged" / "report.html").as_uri(), ready=READY) as v:
        assert v.page.evaluate(READY) == "drawn"
        point = v.page.locator("svg .mark-symbol path").first
        point.scroll_into_view_if_needed()
        point.hover(force=True)
        v.page.wait_for_selector("#vg-tooltip-element.visible", timeout=10_000)
        tip = v.page.inner_text("#vg-tooltip-element")
    assert "0.5538" in tip and "0.5537" not in tip, tip
