"""sweep.html: a sweep's models × benchmarks grid drawn, beside sweep.json and sweep.md.

Built from sweep.json's document alone, so the page cannot disagree with it: for each metric a
forest of every (model, benchmark) value with its interval and the grid as a table, then each
model's paired difference against the baseline with its interval against zero, p and Holm p.
Each model's own report.html is one relative link away (the folder can be moved or mailed whole).
A reasoning model's checkpoints add, per benchmark, the share of answers cut off while thinking and
the reasoning tokens per reply of every model (sweep.json's `reasoning` where its cells carry it,
else each model's merge: shardeval_pages.reasoning).
"""

from __future__ import annotations

import os
from collections import Counter
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from shardeval.api.pages import NOT_COMPARED, not_compared_notes
from shardeval.api.records import percent
from shardeval_pages.charts import across_models, series_across_models
from shardeval_pages.page import Page, esc, finite, gate_cell, num, table
from shardeval_pages.reasoning import TRUNCATED, TRUNCATED_REASONING, rate, sweep_reasoning
from shardeval_pages.report_page import PASS1_IS_ACCURACY, same_numbers, slug

if TYPE_CHECKING:
    from shardeval.api.pages import SweepMerge

PARTIAL_CELL = "‡ not every (problem, repeat) pair has an ok record: the value covers the ok ones (ok/expected)."
PARTIAL_PAIR = (
    "† compared only on the cells both models answered; the cells left out are counted in sweep.json (n_only_baseline, n_only_other)."
)


def render_sweep_html(sweep: SweepMerge, confidence: float, links: dict[str, str]) -> bytes:
    """The page; `links`: each model's report.html relative to the page. Raises
    vendor.BundleMissing without the charts' JavaScript."""
    doc, plan = sweep.document, sweep.plan
    benches = list(dict.fromkeys(c["benchmark"] for c in doc["cells"]))
    verdict, why = sweep.verdict, sweep.verdict_line().removeprefix(sweep.verdict)
    page = Page(f"shardeval sweep: {os.path.basename(os.path.normpath(sweep.root))}")
    page.add(
        f"<h1>shardeval sweep: {esc(sweep.root)}</h1>",
        f"<p>{len(plan.services)} models × {len(benches)} benchmarks, baseline <b>{esc(plan.baseline)}</b>, "
        f"{percent(confidence)} intervals; errors {'scored as wrong' if doc['errors_as_wrong'] else 'excluded from scores'}. "
        f'<span class="verdict {"complete" if sweep.complete else "partial"}" id="verdict">{verdict}</span>{esc(why)}</p>',
    )
    notes = [f"{m['service']}: {m['why']}" + (f" ({m['benchmark']})" if "benchmark" in m else "") for m in doc["missing"]]
    notes += not_compared_notes(doc)
    notes += [note] if (note := doc.get("vs_baseline_note")) else []
    if notes:
        page.add('<ul class="notes">' + "".join(f'<li class="warn">{esc(n)}</li>' for n in notes) + "</ul>")
    page.add("<h2>Models</h2>", models_table(sweep, links))
    cell_datasets(page, doc)
    for metric in dict.fromkeys(c["metric"] for c in doc["cells"]):
        if metric == "pass@1" and same_as_accuracy(doc["cells"]):
            page.add(
                f'<h2 id="m-{slug(metric)}">pass@1</h2><p class="muted pass1">{esc(PASS1_IS_ACCURACY)} in every cell; '
                "sweep.json holds both.</p>"
            )
            continue
        page.add(*metric_section(page, doc, plan.services, metric, benches, confidence))
    page.add(*reasoning_section(page, sweep, plan.services, benches))
    page.add(*vs_section(page, doc, plan.baseline, plan.services, benches, confidence))
    if "gate" in doc:
        page.add(*gate_section(doc["gate"], plan.baseline))
    return page.render()


def gate_section(gate: dict[str, Any], baseline: str) -> list[str]:
    """Each model GO / NO-GO / INCONCLUSIVE against the baseline under the sweep's rule, with each
    benchmark's verdict, difference and one-sided bounds (sweep.json's `gate`; docs/decisions.md)."""
    rule = gate["rule"]
    rows = []
    for model in gate["models"]:
        for i, row in enumerate(model.get("benchmarks") or [{}]):
            first = i == 0
            rows.append(
                [
                    esc(model["service"]) if first else "",
                    gate_cell(model.get("verdict")) if first else "<td></td>",
                    esc(row.get("benchmark", model.get("why", ""))),
                    gate_cell(row.get("verdict")) if row else "<td></td>",
                    num(row.get("diff"), "diff"),
                    num(row.get("lower"), "lower"),
                    num(row.get("upper"), "upper"),
                    num((row.get("plan") or {}).get("problems"), "plan_problems"),
                ]
            )
    return [
        f'<h2 id="gate">Gate: each model against {esc(baseline)}</h2>',
        f'<p class="muted">margin {rule["margin"]:g}, α {rule.get("alpha", 0.05):g}: GO when shown not worse than the baseline by more '
        "than the margin on every benchmark, NO-GO when shown worse on one, INCONCLUSIVE otherwise (docs/decisions.md).</p>",
        table(
            ["model", "verdict", "benchmark", "its verdict", "difference", "lower bound", "upper bound", "problems that would settle it"],
            rows,
            cls="gate",
        ),
    ]


def same_as_accuracy(cells: list[dict[str, Any]]) -> bool:
    """Whether every pass@1 cell is its accuracy cell again (report_page.pass1_is_accuracy): the
    page would show the same grid twice."""
    accuracy = {(c["service"], c["benchmark"]): c for c in cells if c["metric"] == "accuracy"}
    pass1 = [c for c in cells if c["metric"] == "pass@1"]
    return bool(pass1) and all(same_numbers(accuracy.get((c["service"], c["benchmark"])), c) for c in pass1)


def models_table(sweep: SweepMerge, links: dict[str, str]) -> str:
    rows = []
    verdicts = {g["service"]: g.get("verdict") for g in sweep.document.get("gate", {}).get("models", [])}
    for m in sweep.models:
        state = m.note if m.result is None else m.result.verdict.lower()
        href = links.get(m.service) if m.service is not None else None  # a sweep's models all have one
        rows.append(
            [
                esc(m.service) + (' <span class="muted">(baseline)</span>' if m.service == sweep.plan.baseline else ""),
                f'<td class="{"complete" if state == "complete" else "partial"} state">{esc(state)}</td>',
                f'<a class="report" href="{esc(quote(href))}">{esc(href)}</a>' if href else '<span class="muted">—</span>',
            ]
            + ([gate_cell(verdicts.get(m.service)) if m.service != sweep.plan.baseline else "baseline"] if "gate" in sweep.document else [])
        )
    headers = ["model", "state", "its report"] + (["gate"] if "gate" in sweep.document else [])
    models = table(headers, rows, cls="models")
    if len(rows) <= MODELS_OPEN:
        return models
    states = Counter(m.note if m.result is None else m.result.verdict.lower() for m in sweep.models)
    said = ", ".join(f"{n} {state}" for state, n in states.most_common())
    return f'<details class="models"><summary>{len(rows)} models: {esc(said)}</summary>{models}</details>'


CELL_FIELDS = ["metric", "benchmark", "service", "value", "ci_low", "ci_high", "ci_method", "n_ok", "ok_shown", "complete", "n"]
VS_FIELDS = [
    "service",
    "benchmark",
    "metric",
    "diff",
    "ci_low",
    "ci_high",
    "ci_method",
    "p_value",
    "p_holm",
    "test",
    "n",
    "note",
    "complete",
]
GRID_PAGE, VS_PAGE = 25, 50  # rows a paged table shows at once: a page, not thousands of rows
MODELS_OPEN = 25  # a longer list of models is folded: the charts come first
NUM, TEXT = "num", "text"


def cell_datasets(page: Page, doc: dict[str, Any]) -> None:
    """sweep.json's cells and differences as the page's two datasets, read by every chart and
    table of the page (embedded once)."""
    page.dataset(
        "cells",
        CELL_FIELDS,
        [
            [
                c["metric"],
                c["benchmark"],
                c["service"],
                c["value"],
                c["ci_low"],
                c["ci_high"],
                c.get("ci_method"),
                c["n_ok"],
                f"{c['n_ok']}/{c['n_expected']}" + ("" if c["complete"] else " ‡") + (" ≠" if c.get("differs_from_baseline") else ""),
                c["complete"],
                c["n"],
            ]
            for c in doc["cells"]
        ],
    )
    page.dataset(
        "vs",
        VS_FIELDS,
        [
            [
                r["service"],
                r["benchmark"],
                r["metric"],
                r["diff"],
                r["ci_low"],
                r["ci_high"],
                r.get("ci_method"),
                r["p_value"],
                r["p_holm"],
                r.get("test"),
                r["n"],
                r.get("reason")
                or ("" if r["complete"] else f"† {r['n_only_baseline']} baseline and {r['n_only_other']} model cells unpaired"),
                r["complete"],
            ]
            for r in doc["vs_baseline"]
        ],
    )


def metric_section(page: Page, doc: dict[str, Any], services: list[str], metric: str, benches: list[str], confidence: float) -> list[str]:
    """One metric: a chart per benchmark of every model's value in the sweep's order (a training
    run's checkpoints read left to right), then the grid as a paged table."""
    cells = [c for c in doc["cells"] if c["metric"] == metric]
    out = [f'<h2 id="m-{slug(metric)}">{esc(metric)}</h2>']
    level = f"{percent(confidence)}"
    for b in benches:
        if any(finite(c["value"]) for c in cells if c["benchmark"] == b):
            out.append(
                page.chart(
                    f"grid-{slug(metric)}-{slug(b)}",
                    across_models(
                        "cells",
                        {"metric": metric, "benchmark": b},
                        f"{b}: {metric} of every model, {level} intervals",
                        order=services,
                        value="value",
                        y_title=metric,
                    ),
                )
            )
    head = (
        '<tr><th rowspan="2">model</th>'
        + "".join(f'<th colspan="5">{esc(b)}</th>' for b in benches)
        + "</tr><tr>"
        + f"<th>value</th><th>{level} low</th><th>{level} high</th><th>method</th><th>ok/expected</th>" * len(benches)
        + "</tr>"
    )
    out.append(
        page.paged_table(
            f"grid-table-{slug(metric)}",
            head,
            {
                "data": "cells",
                "where": {"metric": metric},
                "key": metric,
                "page": GRID_PAGE,
                "rows": {"field": "service", "order": services},
                "cols": {"field": "benchmark", "order": benches},
                "cells": [
                    {"field": "value", "kind": NUM},
                    {"field": "ci_low", "kind": NUM},
                    {"field": "ci_high", "kind": NUM},
                    {"field": "ci_method", "kind": TEXT, "cls": "method"},
                    {"field": "n_ok", "kind": "int", "shown": "ok_shown", "partial": "complete"},
                ],
            },
            cls="grid",
            search="filter models",
        )
    )
    if any(not c["complete"] for c in cells):
        out.append(f'<p class="muted">{esc(PARTIAL_CELL)}</p>')
    if any(c.get("differs_from_baseline") for c in cells):
        out.append(f'<p class="muted">{esc(NOT_COMPARED)}</p>')
    return out


REASONING_FIELDS = [
    "service",
    "benchmark",
    "truncated_reasoning",
    "n_answered",
    "rate",
    "shown",
    "truncated",
    "with_reasoning",
    "mean",
    "mean_shown",
    "p50",
    "p50_shown",
    "n",
]


def reasoning_section(page: Page, sweep: SweepMerge, services: list[str], benches: list[str]) -> list[str]:
    """A reasoning model's checkpoints: per benchmark, the share of answers cut off while thinking
    and the reasoning tokens per reply (mean and median) of every model in the sweep's order, then
    the counts as a paged table. Nothing when no (model, benchmark) has thinking or cut-off replies."""
    found = sweep_reasoning(sweep)
    if not found:
        return []
    rows = []
    for (service, bench), s in found.items():
        tokens = s.get("reasoning_tokens") or {}
        share = rate(s)
        rows.append(
            [
                service,
                bench,
                s["truncated_reasoning"],
                s["n_answered"],
                share,
                f"{s['truncated_reasoning']} of {s['n_answered']}" + (f" ({percent(share, 1, ' ')})" if share is not None else ""),
                s["truncated"],
                s["with_reasoning"],
                tokens.get("mean"),
                _tokens(tokens.get("mean")),
                tokens.get("p50"),
                _tokens(tokens.get("p50")),
                s["n_answered"],
            ]
        )
    page.dataset("reasoning", REASONING_FIELDS, rows)
    out = ['<h2 id="reasoning">reasoning: answers cut off while thinking, and reasoning tokens per reply</h2>']
    shown = [b for b in benches if any((m, b) in found for m in services)]
    for b in shown:
        out.append(
            page.chart(
                f"reasoning-rate-{slug(b)}",
                across_models(
                    "reasoning",
                    {"benchmark": b},
                    f"{b}: share of answers {TRUNCATED_REASONING} (of every ok answer)",
                    order=services,
                    value="rate",
                    y_title=f"share {TRUNCATED_REASONING}",
                    share=True,
                ),
            )
        )
        if any((found.get((m, b)) or {}).get("reasoning_tokens") for m in services):
            out.append(
                page.chart(
                    f"reasoning-tokens-{slug(b)}",
                    series_across_models(
                        "reasoning",
                        {"benchmark": b},
                        f"{b}: reasoning tokens per reply, mean and median",
                        order=services,
                        values=["mean", "p50"],
                        y_title="reasoning tokens",
                    ),
                )
            )
    head = (
        '<tr><th rowspan="2">model</th>'
        + "".join(f'<th colspan="4">{esc(b)}</th>' for b in shown)
        + "</tr><tr>"
        + f"<th>{esc(TRUNCATED_REASONING)}</th><th>{esc(TRUNCATED)}</th><th>tokens mean</th><th>tokens p50</th>" * len(shown)
        + "</tr>"
    )
    out.append(
        page.paged_table(
            "reasoning-table",
            head,
            {
                "data": "reasoning",
                "key": "reasoning",
                "page": GRID_PAGE,
                "rows": {"field": "service", "order": services},
                "cols": {"field": "benchmark", "order": shown},
                "cells": [
                    {"field": "truncated_reasoning", "kind": "int", "shown": "shown"},
                    {"field": "truncated", "kind": "int"},
                    {"field": "mean", "kind": NUM, "shown": "mean_shown"},
                    {"field": "p50", "kind": NUM, "shown": "p50_shown"},
                ],
            },
            cls="reasoning",
            search="filter models",
        )
    )
    return out


def _tokens(value: Any) -> str:
    return "—" if value is None else f"{value:.1f}"


def vs_section(page: Page, doc: dict[str, Any], baseline: str, services: list[str], benches: list[str], confidence: float) -> list[str]:
    """Each model − baseline, paired on the same (problem, repeat) cells: a chart per benchmark
    against zero, then every difference as a paged table."""
    vs = doc["vs_baseline"]
    if not vs:
        return []
    out = [f'<h2 id="vs-baseline">vs baseline: model − {esc(baseline)}, paired on the same (problem, repeat) cells</h2>']
    level = f"{percent(confidence)}"
    for b in benches:
        if any(finite(r["diff"]) for r in vs if r["benchmark"] == b):
            out.append(
                page.chart(
                    f"vs-{slug(b)}",
                    across_models(
                        "vs",
                        {"benchmark": b},
                        f"{b}: difference against {baseline} with its {level} interval",
                        order=services,
                        value="diff",
                        y_title=f"model − {baseline}",
                        zero_rule=True,
                    ),
                )
            )
    head = (
        "<tr>"
        + "".join(
            f"<th>{esc(h)}</th>"
            for h in [
                "model",
                "benchmark",
                "metric",
                "difference",
                f"{level} low",
                f"{level} high",
                "method",
                "p",
                "p (Holm)",
                "test",
                "cells",
                "note",
            ]
        )
        + "</tr>"
    )
    out.append(
        page.paged_table(
            "vs-table",
            head,
            {
                "data": "vs",
                "key": "vs",
                "keys": ["service", "benchmark"],
                "page": VS_PAGE,
                "search": ["service", "benchmark"],
                "cells": [
                    {"field": "service", "kind": TEXT},
                    {"field": "benchmark", "kind": TEXT},
                    {"field": "metric", "kind": TEXT},
                    {"field": "diff", "kind": NUM},
                    {"field": "ci_low", "kind": NUM},
                    {"field": "ci_high", "kind": NUM},
                    {"field": "ci_method", "kind": TEXT},
                    {"field": "p_value", "kind": "p"},
                    {"field": "p_holm", "kind": "p"},
                    {"field": "test", "kind": TEXT},
                    {"field": "n", "kind": "int"},
                    {"field": "note", "kind": TEXT, "partial": "complete"},
                ],
            },
            cls="vs",
            search="filter models or benchmarks",
        )
    )
    if not all(r["complete"] for r in vs):
        out.append(f'<p class="muted">{esc(PARTIAL_PAIR)}</p>')
    return out
