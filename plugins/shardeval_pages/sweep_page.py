"""sweep.html: a sweep's models × benchmarks grid drawn, beside sweep.json and sweep.md.

Built from sweep.json's document alone, so the page cannot disagree with it: for each metric a
forest of every (model, benchmark) value with its interval and the grid as a table, then each
model's paired difference against the baseline with its interval against zero, p and Holm p.
Each model's own report.html is one relative link away (the folder can be moved or mailed whole).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from shardeval.api import NOT_COMPARED, not_compared_notes
import shardeval_pages.charts as charts
from shardeval_pages.page import Page, esc, finite, num, p_cell, span, table
from shardeval_pages.report_page import PASS1_IS_ACCURACY, pass1_is_accuracy, slug

if TYPE_CHECKING:
    from shardeval.api import SweepMerge

PARTIAL_CELL = "‡ not every (problem, repeat) pair has an ok record: the value covers the ok ones (ok/expected)."
PARTIAL_PAIR = ("† compared only on the cells both models answered; the cells left out are counted in sweep.json "
                "(n_only_baseline, n_only_other).")


def render_sweep_html(sweep: "SweepMerge", confidence: float, links: dict[str, str]) -> bytes:
    """The page; `links`: each model's report.html relative to the page. Raises
    vendor.BundleMissing without the charts' JavaScript."""
    doc, plan = sweep.document, sweep.plan
    benches = list(dict.fromkeys(c["benchmark"] for c in doc["cells"]))
    verdict, why = sweep.verdict, sweep.verdict_line().removeprefix(sweep.verdict)
    page = Page(f"shardeval sweep: {os.path.basename(os.path.normpath(sweep.root))}")
    page.add(f"<h1>shardeval sweep: {esc(sweep.root)}</h1>",
             f"<p>{len(plan.services)} models × {len(benches)} benchmarks, baseline <b>{esc(plan.baseline)}</b>, "
             f"{confidence:.0%} intervals; errors {'scored as wrong' if doc['errors_as_wrong'] else 'excluded from scores'}. "
             f'<span class="verdict {"complete" if sweep.complete else "partial"}" id="verdict">{verdict}</span>{esc(why)}</p>')
    notes = [f"{m['service']}: {m['why']}" + (f" ({m['benchmark']})" if "benchmark" in m else "") for m in doc["missing"]]
    notes += not_compared_notes(doc)
    notes += [note] if (note := doc.get("vs_baseline_note")) else []
    if notes:
        page.add('<ul class="notes">' + "".join(f'<li class="warn">{esc(n)}</li>' for n in notes) + "</ul>")
    page.add("<h2>Models</h2>", models_table(sweep, links))
    for metric in dict.fromkeys(c["metric"] for c in doc["cells"]):
        if metric == "pass@1" and same_as_accuracy(doc["cells"]):
            page.add(f'<h2 id="m-{slug(metric)}">pass@1</h2><p class="muted pass1">{esc(PASS1_IS_ACCURACY)} in every cell; '
                     "sweep.json holds both.</p>")
            continue
        page.add(*metric_section(page, doc, plan.services, metric, benches, confidence))
    page.add(*vs_section(page, doc, plan.baseline, confidence))
    return page.render()


def same_as_accuracy(cells: list[dict[str, Any]]) -> bool:
    """Whether every pass@1 cell is its accuracy cell again (report_page.pass1_is_accuracy): the
    page would show the same grid twice."""
    accuracy = {(c["service"], c["benchmark"]): c for c in cells if c["metric"] == "accuracy"}
    pass1 = [c for c in cells if c["metric"] == "pass@1"]
    return bool(pass1) and all(pass1_is_accuracy({"accuracy": accuracy.get((c["service"], c["benchmark"])), "pass@1": c})
                               for c in pass1)


def models_table(sweep: "SweepMerge", links: dict[str, str]) -> str:
    rows = []
    for m in sweep.models:
        state = m.note if m.result is None else m.result.verdict.lower()
        href = links.get(m.service)
        rows.append([esc(m.service) + (" <span class=\"muted\">(baseline)</span>" if m.service == sweep.plan.baseline else ""),
                     f'<td class="{"complete" if state == "complete" else "partial"} state">{esc(state)}</td>',
                     f'<a class="report" href="{esc(quote(href))}">{esc(href)}</a>' if href else '<span class="muted">—</span>'])
    return table(["model", "state", "its report"], rows, cls="models")


def metric_section(page: Page, doc: dict[str, Any], services: list[str], metric: str, benches: list[str], confidence: float) -> list[str]:
    """One metric: the forest of its grid (y = benchmark, colour = model) and the grid as a table."""
    cells = {(c["service"], c["benchmark"]): c for c in doc["cells"] if c["metric"] == metric}
    rows = [{"metric": metric, "benchmark": b, "model": s, **span(c["value"], c["ci_low"], c["ci_high"]), "n": c["n"]}
            for (s, b), c in cells.items() if finite(c["value"])]
    shown = [s for s in services if any(r["model"] == s for r in rows)]
    out = [f'<h2 id="m-{slug(metric)}">{esc(metric)}</h2>']
    if rows:
        out.append(page.chart(f"grid-{slug(metric)}", charts.forest(
            rows, f"{metric} per benchmark and model, {confidence:.0%} intervals", color="model", order=shown)))
    level = f"{confidence:.0%}"
    head = ('<tr><th rowspan="2">model</th>' + "".join(f'<th colspan="5">{esc(b)}</th>' for b in benches) + "</tr><tr>"
            + f"<th>value</th><th>{level} low</th><th>{level} high</th><th>method</th><th>ok/expected</th>" * len(benches) + "</tr>")
    body = []
    for s in services:
        tds = []
        for b in benches:
            c, key = cells.get((s, b)), f"{metric}/{s}/{b}"
            if c is None:
                tds.append('<td class="muted" colspan="5">—</td>')
                continue
            mark = ("" if c["complete"] else " ‡") + (" ≠" if c.get("differs_from_baseline") else "")
            tds += [num(c["value"], f"{key}/value"), num(c["ci_low"], f"{key}/ci_low"), num(c["ci_high"], f"{key}/ci_high"),
                    f'<td class="method">{esc(c.get("ci_method") or "—")}</td>',
                    f'<td class="num{"" if c["complete"] else " partial"}" data-key="{esc(key)}/n_ok" data-value="{c["n_ok"]}">'
                    f'{c["n_ok"]}/{c["n_expected"]}{mark}</td>']
        body.append(f"<tr><td>{esc(s)}</td>{''.join(tds)}</tr>")
    out.append(f'<table class="grid"><thead>{head}</thead><tbody>{"".join(body)}</tbody></table>')
    if any(not c["complete"] for c in cells.values()):
        out.append(f'<p class="muted">{esc(PARTIAL_CELL)}</p>')
    if any(c.get("differs_from_baseline") for c in cells.values()):
        out.append(f'<p class="muted">{esc(NOT_COMPARED)}</p>')
    return out


def vs_section(page: Page, doc: dict[str, Any], baseline: str, confidence: float) -> list[str]:
    """Each model − baseline, paired on the same (problem, repeat) cells: the chart against zero and the table."""
    vs = doc["vs_baseline"]
    if not vs:
        return []
    rows = [{"pair": f"{r['service']} · {r['benchmark']}", **span(r["diff"], r["ci_low"], r["ci_high"]), "n": r["n"]}
            for r in vs if finite(r["diff"])]
    out = [f"<h2 id=\"vs-baseline\">vs baseline: model − {esc(baseline)}, paired on the same (problem, repeat) cells</h2>"]
    if rows:
        out.append(page.chart("vs-baseline-chart", charts.interval_rows(
            rows, f"difference against {baseline} with its {confidence:.0%} interval", y="pair",
            x_title=f"model − {baseline}", zero_rule=True)))
    body = []
    for r in vs:
        key = f"vs/{r['service']}/{r['benchmark']}"
        note = r.get("reason") or ("" if r["complete"] else f"† {r['n_only_baseline']} baseline and {r['n_only_other']} model cells unpaired")
        body.append([esc(r["service"]), esc(r["benchmark"]), esc(r["metric"]), num(r["diff"], f"{key}/diff"),
                     num(r["ci_low"], f"{key}/ci_low"), num(r["ci_high"], f"{key}/ci_high"), esc(r.get("ci_method") or "—"),
                     p_cell(r["p_value"], f"{key}/p_value"),
                     p_cell(r["p_holm"], f"{key}/p_holm"), esc(r.get("test") or "—"), num(r["n"], f"{key}/n"),
                     f'<td class="{"" if r["complete"] else "partial"}">{esc(note)}</td>'])
    level = f"{confidence:.0%}"
    out.append(table(["model", "benchmark", "metric", "difference", f"{level} low", f"{level} high", "method", "p", "p (Holm)", "test", "cells",
                      "note"], body, cls="vs"))
    if not all(r["complete"] for r in vs):
        out.append(f'<p class="muted">{esc(PARTIAL_PAIR)}</p>')
    return out
