"""sweep.html and `compare --html`, opened in headless Debian chromium (tests/browser.py): every
chart drawn, nothing fetched, the numbers of sweep.json / compare --json shown, hostile names as
text; and without the charts' JavaScript (a source tree that never fetched it), merge and compare
still succeed and say so in one line.

One real sweep (three simulated models × two benchmarks, started by the local orchestrator,
which merges at its end) serves every test; its root folder's name is hostile, so every page
shows a hostile path.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from browser import browser, visit  # noqa: F401  (browser is a fixture)
from conftest import shardeval_cmd
from pages_support import FETCH_HINT, sweep_charts, sweep_numbers, without_javascript

READY = "document.body.dataset.charts"
MODELS = ["base", "step2", "step10"]  # table order, which is not alphabetical order
# a folder name cannot hold '/' or NUL; the hand-edited plan's model name below holds both
HOSTILE_DIR = "sweep <img src=x onerror=\"window.pwned=1\"> 'q' \u202eevil\u202c <script>window.pwned=2"
HOSTILE_MODEL = "<script>window.pwned=3</script> \"dq\" 'sq' \x00nul \u202eevil\u202c"


def page_numbers(v) -> dict[str, object]:
    """Every numeric cell's exact value (data-value) by its key."""
    cells = v.page.eval_on_selector_all("td[data-key]", "tds => tds.map(td => [td.dataset.key, td.dataset.value])")
    assert len(cells) == len({key for key, _ in cells}), "a data-key shown twice"
    return {key: json.loads(value) for key, value in cells}


def assert_drawn_offline_and_inert(v, charts: int) -> None:
    assert v.page.evaluate(READY) == "drawn"
    assert v.errors() == [], v.errors()
    assert v.foreign_requests() == [], v.foreign_requests()
    marks = v.chart_marks()
    assert len(marks) == charts, marks
    for chart in marks:
        assert chart["svgs"] >= 1 and chart["marks"] > 0, chart
    assert v.page.evaluate("() => window.pwned") is None  # no hostile string ran as markup


def html_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ".html" in line]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> tuple[Path, Path]:
    """(the sweep's root, its config): run and merged by `shardeval run`, as a user runs it."""
    tmp = tmp_path_factory.mktemp("grid")
    accuracy = dict(zip(MODELS, (0.5, 0.65, 0.8)))
    config = {
        "services": {name: {"type": "sim", "bench": "arith", "accuracy": acc, "ttft_ms": 1, "itl_ms": 0} for name, acc in accuracy.items()},
        "benchmarks": [
            {"name": "arith", "params": {"n": 30}, "max_concurrent": 8},
            {"name": "arith", "id": "arith_b", "params": {"n": 20, "seed": 3}, "repeats": 2, "max_concurrent": 8},
        ],
        "sweep": {"services": MODELS, "baseline": "base"},
        "cluster": {"type": "local", "shards": 2, "parallel": 3},
        "output": {"progress_interval_s": 0},
    }
    path = tmp / "sweep.json"
    path.write_text(json.dumps(config))
    root = tmp / HOSTILE_DIR
    run = shardeval_cmd("run", str(path), "-o", str(root), timeout=180)
    assert run.returncode == 0, run.stderr[-3000:]
    assert html_lines(run.stderr) == [], run.stderr  # the charts' JavaScript is there: nothing to say
    return root, path


def copy_without_merges(root: Path, to: Path) -> Path:
    shutil.copytree(root, to, ignore=shutil.ignore_patterns("merged"))
    return to


def test_sweep_html_draws_every_chart_offline_with_the_numbers_of_sweep_json(sweep, browser):
    root, _ = sweep
    merged = root / "merged"
    doc = json.loads((merged / "sweep.json").read_text())
    assert not doc["partial"] and len(doc["vs_baseline"]) == 4
    with visit(browser, (merged / "sweep.html").as_uri(), ready=READY) as v:
        assert_drawn_offline_and_inert(v, charts=sweep_charts(doc))
        assert page_numbers(v) == sweep_numbers(doc)
        assert v.page.inner_text("h1") == f"shardeval sweep: {root}"
        assert v.page.inner_text("#verdict") == "COMPLETE"
        for chart in ("grid-accuracy-arith", "grid-accuracy-arith_b"):
            models = v.page.eval_on_selector_all(
                f"#{chart} g.role-axis[aria-label^='X-axis'] g.role-axis-label text", "ts => ts.map(t => t.textContent)"
            )
            assert models == MODELS  # the sweep's order, not the alphabet's
        assert (
            v.page.eval_on_selector_all(
                "#vs-arith g.role-axis[aria-label^='X-axis'] g.role-axis-label text", "ts => ts.map(t => t.textContent)"
            )
            == MODELS[1:]
        )
        links = v.page.eval_on_selector_all("a.report", "as => as.map(a => [a.closest('tr').cells[0].textContent, a.href])")
    assert [(name.split(" ")[0], Path(unquote(urlsplit(href).path))) for name, href in links] == [
        (m, root / m / "merged" / "report.html") for m in MODELS
    ]  # relative links that resolve, hostile folder and all
    assert all((root / m / "merged" / "report.html").is_file() for m in MODELS)
    again = shardeval_cmd("merge", str(root))
    assert again.returncode == 0 and html_lines(again.stderr) == [], again.stderr
    assert f"open {merged / 'sweep.html'} in a browser" in again.stdout


def test_missing_models_and_partial_cells_are_said_on_the_page(sweep, browser, tmp_path):
    root = copy_without_merges(sweep[0], tmp_path / "partial")
    shutil.rmtree(root / "step10" / "shard_1")  # half of a model never ran
    plan = json.loads((root / "sweep_plan.json").read_text())
    plan["services"].append("step99")  # a model with no shard (its folder was never made)
    (root / "sweep_plan.json").write_text(json.dumps(plan))
    out = tmp_path / "elsewhere"
    merge = shardeval_cmd("merge", "-q", str(root), "-o", str(out))
    assert merge.returncode == 3 and "not complete: PARTIAL" in merge.stderr, merge.stderr
    doc = json.loads((out / "sweep.json").read_text())
    shown_name = "step99"
    with visit(browser, (out / "sweep.html").as_uri(), ready=READY) as v:
        assert_drawn_offline_and_inert(v, charts=sweep_charts(doc))
        assert v.page.inner_text("#verdict") == "PARTIAL"
        states = dict(
            v.page.eval_on_selector_all("table.models tbody tr", "rs => rs.map(r => [r.cells[0].textContent, r.cells[1].textContent])")
        )
        assert states == {"base (baseline)": "complete", "step2": "complete", "step10": "partial", shown_name: "no shard has written yet"}
        assert f"{shown_name}: no shard has written yet" in v.page.inner_text("ul.notes")
        partial = v.page.eval_on_selector_all("table.grid td.partial", "tds => tds.map(td => [td.dataset.key, td.textContent])")
        assert ["accuracy/step10/arith/n_ok", "15/30 ‡"] in partial and all(key.split("/")[1] == "step10" for key, _ in partial)
        row = v.page.eval_on_selector(
            "table.vs tbody", "b => Array.from(b.rows).map(r => r.textContent).find(t => t.startsWith('step10arith'))"
        )
        assert "†" in row
        assert "‡ not every (problem, repeat) pair" in v.page.inner_text("body")
        links = v.page.eval_on_selector_all("a.report", "as => as.map(a => a.getAttribute('href'))")
    assert links == [f"{m}/report.html" for m in MODELS] and all((out / link).is_file() for link in links)  # -o OUT: beside it


def test_a_hand_edited_plan_naming_a_hostile_model_is_refused_not_rendered(sweep, tmp_path):
    """Since issue 24 (H15) a model a plan lists must be a folder name of the sweep: the hostile
    name this page once had to escape is refused in one line, exit 2, before anything is written."""
    root = copy_without_merges(sweep[0], tmp_path / "hostile")
    plan = json.loads((root / "sweep_plan.json").read_text())
    plan["services"].append(HOSTILE_MODEL)
    (root / "sweep_plan.json").write_text(json.dumps(plan))
    merge = shardeval_cmd("merge", "-q", str(root), "-o", str(tmp_path / "out"))
    assert merge.returncode == 2 and "Traceback" not in merge.stderr and len(merge.stderr.strip().splitlines()) == 1
    assert "not a folder of this sweep" in merge.stderr and not (tmp_path / "out").exists()


def test_compare_html_shows_the_numbers_of_compare_json_and_of_each_runs_scores(sweep, browser, tmp_path):
    root, _ = sweep
    page = tmp_path / "compare.html"
    run_a, run_b = root / "base", root / "step2"
    out = shardeval_cmd("compare", str(run_a), str(run_b), "--json", "--html", str(page))
    assert out.returncode == 0 and out.stderr == "", out.stderr
    results = {r["benchmark"]: r for r in json.loads(out.stdout)}
    scores = {label: json.loads((run / "merged" / "scores.json").read_text()) for label, run in (("A", run_a), ("B", run_b))}
    expected = {}
    for bench, r in results.items():
        expected |= {
            f"{bench}/{f}": r[f]
            for f in (
                "diff",
                "ci_low",
                "ci_high",
                "stderr",
                "p_value",
                "correlation",
                "mde",
                "a_mean",
                "b_mean",
                "n_shared",
                "n_only_a",
                "n_only_b",
                "n_shared_without_samples",
            )
        }
        expected |= {f"{bench}/mcnemar/{f}": r["mcnemar"][f] for f in ("p_value", "a_right_b_wrong", "a_wrong_b_right") if r["mcnemar"]}
        expected |= {
            f"{bench}/{label}/accuracy/{f}": s[bench]["metrics"]["accuracy"][f]
            for label, s in scores.items()
            for f in ("value", "ci_low", "ci_high", "n")
        }
    assert results["arith"]["mcnemar"] and not results["arith_b"]["mcnemar"]  # repeats 2: McNemar does not apply
    with visit(browser, page.as_uri(), ready=READY) as v:
        assert_drawn_offline_and_inert(v, charts=2)  # the means, the differences
        assert page_numbers(v) == expected
        assert (v.page.inner_text("#run-a"), v.page.inner_text("#run-b")) == (str(run_a), str(run_b))
        assert "repeats > 1" in v.page.inner_text("table.counts")
    unwritable = shardeval_cmd("compare", str(run_a), str(run_b), "--html", str(tmp_path / "no" / "such" / "dir" / "c.html"))
    lines = unwritable.stderr.strip().splitlines()
    assert unwritable.returncode == 2 and len(lines) == 1 and "cannot write the comparison page to" in lines[0], unwritable.stderr


def test_without_the_charts_javascript_merge_run_and_compare_succeed_and_say_it_once(sweep, tmp_path):
    """Three models, so a line per page would be four: the orchestrator's merge and `shardeval
    merge` each say it once; compare prints its comparison and says it once."""
    root, config = sweep
    copy = copy_without_merges(root, tmp_path / "copy")
    env = without_javascript(tmp_path)
    rerun = shardeval_cmd("run", str(config), "-o", str(copy), env=env, timeout=180)  # every pair done: asks nothing, merges
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    lines = html_lines(rerun.stderr)
    assert len(lines) == 1 and FETCH_HINT in lines[0] and "sweep.html" in lines[0], rerun.stderr
    assert (copy / "merged" / "sweep.md").is_file() and not (copy / "merged" / "sweep.html").exists()
    assert not any(copy.glob("*/merged/report.html"))
    merge = shardeval_cmd("merge", str(copy), env=env)
    assert merge.returncode == 0 and "Traceback" not in merge.stderr, merge.stderr
    assert html_lines(merge.stderr) == lines and "## vs baseline" in merge.stdout
    (copy / "merged" / "sweep.html").write_text("earlier")  # a page from an earlier merge is kept, and said to be
    again = shardeval_cmd("merge", "-q", str(copy), env=env)
    assert again.returncode == 0 and (copy / "merged" / "sweep.html").read_text() == "earlier"
    assert len(html_lines(again.stderr)) == 1 and "from an earlier merge" in again.stderr
    compare = shardeval_cmd("compare", str(copy / "base"), str(copy / "step10"), "--html", str(tmp_path / "c.html"), env=env)
    assert compare.returncode == 0 and "# shardeval compare" in compare.stdout, compare.stderr
    lines = compare.stderr.strip().splitlines()
    assert len(lines) == 1 and "c.html not written: " in lines[0] and FETCH_HINT in lines[0], compare.stderr
    assert not (tmp_path / "c.html").exists()
