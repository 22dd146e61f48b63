"""`shardeval compare RUN_A RUN_B --html FILE`: the comparison drawn, as one self-contained page.

Per shared benchmark: each run's own mean (accuracy, else mean) with its interval, as merge
computes it; the paired difference B − A over the shared problems with its interval against
zero; McNemar; the minimum detectable effect; what the pairing counted. The numbers are those of
`compare --json` and of each run's scores.json; the page computes none.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from shardeval.api.metric import headline_metric
from shardeval.api.records import percent
from shardeval_pages.charts import forest, interval_rows
from shardeval_pages.page import Page, esc, finite, num, p_cell, span, table

if TYPE_CHECKING:
    from shardeval.api.metric import MetricValue
    from shardeval.api.pages import BenchmarkMerge


def own_mean(metrics: dict[str, MetricValue]) -> tuple[str, MetricValue] | None:
    """(name, MetricValue) of the run's mean score, when it has one."""
    name = headline_metric(m for m, v in metrics.items() if finite(v.value))
    return None if name is None else (name, metrics[name])


def render_compare_html(
    run_a: str,
    run_b: str,
    a: dict[str, BenchmarkMerge],
    b: dict[str, BenchmarkMerge],
    results: list[dict[str, Any]],
    confidence: float,
    errors_as_wrong: bool,
) -> bytes:
    """The page; `a`, `b`: {benchmark: its BenchmarkMerge}, `results`: compare_tables' per shared
    benchmark. Raises vendor.BundleMissing without the charts' JavaScript."""
    level = f"{percent(confidence)}"
    page = Page(f"shardeval compare: {os.path.basename(os.path.normpath(run_b))} vs {os.path.basename(os.path.normpath(run_a))}")
    page.add(
        "<h1>shardeval compare</h1>",
        f'<p>B = <span class="run" id="run-b">{esc(run_b)}</span><br>A = <span class="run" id="run-a">{esc(run_a)}</span></p>',
        f"<p>{len(results)} shared benchmarks, {level} intervals; errors "
        f"{'scored as wrong in both runs' if errors_as_wrong else 'left out of the scores'}.</p>",
    )
    alone = [
        f"only in {label}: {', '.join(sorted(set(mine) - set(other)))}"
        for label, mine, other in (("A", a, b), ("B", b, a))
        if set(mine) - set(other)
    ]
    alone += [f"{r['benchmark']}: {r['not_compared']}" for r in results if "not_compared" in r]
    results = [r for r in results if "not_compared" not in r]  # other questions: named above, never drawn as a difference
    if alone:
        page.add('<ul class="notes">' + "".join(f'<li class="warn">{esc(n)} (not compared)</li>' for n in alone) + "</ul>")

    rows, cells = [], []
    for r in results:
        bench = r["benchmark"]
        for label, run, shared in (("A", a, r["a_mean"]), ("B", b, r["b_mean"])):
            found = own_mean(run[bench].metrics)
            if found is None:
                continue
            metric, v = found
            if v.value is None:  # own_mean's value is finite: never None
                continue
            key = f"{bench}/{label}/{metric}"
            rows.append({"metric": metric, "benchmark": bench, "run": label, **span(v.value, v.ci_low, v.ci_high), "n": v.n})
            cells.append(
                [
                    esc(bench),
                    esc(label),
                    esc(metric),
                    num(v.value, f"{key}/value"),
                    num(v.ci_low, f"{key}/ci_low"),
                    num(v.ci_high, f"{key}/ci_high"),
                    num(v.n, f"{key}/n"),
                    num(shared, f"{bench}/{label.lower()}_mean"),
                ]
            )
    page.add(
        "<h2>Each run's mean</h2>",
        page.chart("means", forest(rows, f"each run's mean with its {level} interval", color="run", order=["A", "B"])) if rows else "",
        table(
            ["benchmark", "run", "metric", "value", f"{level} low", f"{level} high", "n", "mean over the shared problems"],
            cells,
            cls="means",
        ),
        '<p class="muted">value and interval: the run\'s own, over all its records (as its merge reports them); '
        "the difference below is over the problems both runs answered.</p>",
    )

    diffs = [
        {"benchmark": r["benchmark"], **span(r["diff"], r["ci_low"], r["ci_high"]), "n": r["n_shared"]}
        for r in results
        if finite(r["diff"])
    ]
    page.add(
        "<h2>Difference B − A, paired on the shared problems</h2>",
        page.chart("diff", interval_rows(diffs, f"B − A with its {level} interval", y="benchmark", x_title="B − A", zero_rule=True))
        if diffs
        else "",
        table(
            ["benchmark", "B − A", f"{level} low", f"{level} high", "stderr", "interval", "p", "correlation", "MDE (80 % power)"],
            [
                [
                    esc(r["benchmark"]),
                    *(num(r[f], f"{r['benchmark']}/{f}") for f in ("diff", "ci_low", "ci_high", "stderr")),
                    esc(r["ci_method"]),
                    p_cell(r["p_value"], f"{r['benchmark']}/p_value"),
                    num(r["correlation"], f"{r['benchmark']}/correlation"),
                    num(r["mde"], f"{r['benchmark']}/mde"),
                ]
                for r in results
            ],
            cls="diff",
        ),
    )

    counts = []
    for r in results:
        bench, m = r["benchmark"], r["mcnemar"] or {}
        counts.append(
            [
                esc(bench),
                *(num(r[f], f"{bench}/{f}") for f in ("n_shared", "n_only_a", "n_only_b", "n_shared_without_samples")),
                p_cell(m.get("p_value"), f"{bench}/mcnemar/p_value") if m else '<td class="muted">—</td>',
                *(num(m[f], f"{bench}/mcnemar/{f}") if m else '<td class="muted">—</td>' for f in ("a_right_b_wrong", "a_wrong_b_right")),
                esc(r["mcnemar_reason"] or r["details"].get("reason") or ""),
            ]
        )
    page.add(
        "<h2>McNemar and counts</h2>",
        table(
            [
                "benchmark",
                "problems compared",
                "only in A",
                "only in B",
                "shared, no valid answer in one run",
                "McNemar p",
                "A right, B wrong",
                "A wrong, B right",
                "note",
            ],
            counts,
            cls="counts",
        ),
    )
    return page.render()
