"""report.html: the merge's numbers drawn, for people who decide by looking.

Built from the same documents as scores.json and timing.json (so the page cannot disagree with
them) plus the merge's per-cell arrays for what those files do not hold: errors and coverage per
shard, latency percentiles, and the items to read (worst, most disagreeing, errored) with their
standing record and conversation, and for an image benchmark the thumbnails of the images each
item showed the model (from the shards' images.jsonl). A reasoning model's benchmark also shows
how many answers were cut off while thinking, its reasoning tokens per reply, and each item's
thinking folded under its answer (shardeval_pages.reasoning; cut to THINKING_LIMIT per reply,
THINKING_PER_ITEM per item, PAGE_THINKING_BYTES per page). Every chart's data is aggregated and
the thumbnails and the thinking each share one budget; the page's size does not grow with the run's.
"""

from __future__ import annotations

import heapq
import json
import os
import re
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from shardeval.api.pages import BenchmarkView, ReportView
from shardeval.api.records import TRAJECTORIES_FILE, ImageInfo, ImageThumbnail, ResultRecord, TrajectoryRecord, percent
from shardeval_pages.charts import (
    ERROR_COLOR,
    OUTCOME_COLORS,
    ecdf,
    error_kind_colors,
    forest,
    histogram,
    interval_rows,
    pass_at_k,
    stacked_counts,
)
from shardeval_pages.page import Page, esc, finite, gate_cell, num, span, table
from shardeval_pages.reasoning import TRUNCATED, TRUNCATED_REASONING, rate, reasoning_of, token_bins

if TYPE_CHECKING:
    from shardeval.api.pages import BenchmarkMerge
    from shardeval.api.records import MergeResult

ITEMS = 20  # rows per table of items to read
TEXT_LIMIT = 6000  # characters of one message shown; the rest is in trajectories.jsonl
PASS_AT = re.compile(r"pass@(\d+)$")
COVERAGE_COLORS = {"ok": "#4c9a2a", "error": ERROR_COLOR, "missing": "#bbbbbb"}
THUMBS_PER_ITEM = 4  # thumbnails shown of one item's images; the rest are counted ("+N more")
PAGE_THUMBNAIL_BYTES = 1024 * 1024  # the data: URLs one page embeds, over every item; then text placeholders
THUMB_SIDE = 96  # the longest side a shard makes a thumbnail (shardeval.benchmark.images)
NAME_LIMIT = 120  # characters of an image's name shown (a name may be a long URL); the title holds more
TITLE_LIMIT = 1000
# The only image sources a page embeds: a thumbnail's own base64 data URL of a raster type, bounded
# (8 KiB of image as base64, with room). Anything else a line claims (a path, an http URL, SVG,
# markup) is not drawn: the image is named as text instead.
THUMBNAIL_URL = re.compile(r"data:image/(?:webp|jpeg|png|gif);base64,[A-Za-z0-9+/]+={0,2}")
MAX_THUMBNAIL_URL = 16 * 1024
# A reasoning model's thinking, folded under each repeat's answer in the items to read: a reply's
# thinking may be 100 KB, so each is cut to its first and last THINKING_LIMIT / 2 characters (the
# end is where it concluded, or where it was cut off), an item embeds THINKING_PER_ITEM characters
# of thinking over all its repeats (then their lengths only), and the page PAGE_THINKING_BYTES
# (UTF-8) in all (then placeholders). What is left out is said with the whole length; every
# thinking is whole in merged/<bench>/trajectories.jsonl (and results.jsonl's `reasoning`).
THINKING_LIMIT = 4000
THINKING_PER_ITEM = 12000
PAGE_THINKING_BYTES = 1024 * 1024


@dataclass
class ThumbnailBudget:
    """What is left of the page's PAGE_THUMBNAIL_BYTES: a run of any size draws a bounded page."""

    left: int = PAGE_THUMBNAIL_BYTES

    def take(self, n: int) -> bool:
        if n > self.left:
            self.left = 0  # once one is left out, the later ones are too: the page says so from there on
            return False
        self.left -= n
        return True


@dataclass
class ThinkingBudget(ThumbnailBudget):
    """What is left of the page's PAGE_THINKING_BYTES of thinking text."""

    left: int = PAGE_THINKING_BYTES


_MARKUP = re.compile(r"\\([!-/:-@\[-`{-~])|\*\*|`")


def plain(markdown: str) -> str:
    """A note written for report.md, as text: its `**` and backticks dropped, the characters
    md_text escaped (`\\|`, `\\<`) as themselves."""
    return _MARKUP.sub(lambda m: m.group(1) or "", markdown)


def slug(*parts: Any) -> str:
    """An element id from names that may hold anything."""
    return "-".join(re.sub(r"[^A-Za-z0-9_.-]", lambda m: f"_{ord(m.group()):x}", str(p)) for p in parts)


def metric_table(name: str, metrics: dict[str, Any], confidence: float) -> str:
    rows = [
        [
            esc(m),
            num(v.get("value"), f"{name}/{m}/value"),
            num(v.get("ci_low"), f"{name}/{m}/ci_low"),
            num(v.get("ci_high"), f"{name}/{m}/ci_high"),
            num(v.get("stderr"), f"{name}/{m}/stderr"),
            esc(v.get("ci_method") or "—"),
            num(v.get("n"), f"{name}/{m}/n"),
        ]
        for m, v in metrics.items()
    ]
    return table(
        ["metric", "value", f"{percent(confidence)} low", f"{percent(confidence)} high", "stderr", "method", "n"], rows, cls="metrics"
    )


def metric_rows(metrics: dict[str, Any], **labels: Any) -> list[dict[str, Any]]:
    """Chart rows for metrics that have a value (an interval where they have one)."""
    return [
        {**labels, "metric": m, **span(v["value"], v.get("ci_low"), v.get("ci_high")), "n": v.get("n")}
        for m, v in metrics.items()
        if finite(v.get("value"))
    ]


def _as_dicts(metrics: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m: msgspec.to_builtins(v) for m, v in metrics.items()}


PASS1_IS_ACCURACY = "pass@1 is accuracy again here (same value and interval; always so with one repeat): shown once, as accuracy"
SAME_NUMBERS = ("value", "ci_low", "ci_high")


def pass1_is_accuracy(metrics: dict[str, Any]) -> bool:
    """Whether pass@1 says exactly what accuracy says (with one repeat the mean of one sample is
    the sample): the page then shows that number once."""
    return same_numbers(metrics.get("accuracy"), metrics.get("pass@1"))


def same_numbers(accuracy: dict[str, Any] | None, pass1: dict[str, Any] | None) -> bool:
    """Whether two metrics' entries have the same SAME_NUMBERS (a sweep page asks it of every
    cell, so written out rather than looped)."""
    if accuracy is None or pass1 is None:
        return False
    a, p = accuracy.get, pass1.get
    value, low, high = SAME_NUMBERS
    return a(value) == p(value) and a(low) == p(low) and a(high) == p(high)


def shown_metrics(metrics: dict[str, Any]) -> dict[str, Any]:
    """The metrics a benchmark's summary shows: pass@1 left out where it is accuracy again."""
    return {m: v for m, v in metrics.items() if m != "pass@1"} if pass1_is_accuracy(metrics) else metrics


def summary_charts(page: Page, result: MergeResult, metrics: dict[str, dict[str, Any]], confidence: float) -> list[str]:
    """One chart per metric over every benchmark, pass@k for every k in one chart (a row per k),
    and each benchmark with no value to chart named with the reason."""
    by_metric: dict[str, list[dict[str, Any]]] = {}
    passk: list[dict[str, Any]] = []
    for name, ms in metrics.items():
        for row in metric_rows(shown_metrics(ms), benchmark=name):
            if k := PASS_AT.match(row["metric"]):
                passk.append({**row, "metric": "pass@k", "k": f"k = {k.group(1)}", "order": int(k.group(1))})
            else:
                by_metric.setdefault(row["metric"], []).append(row)
    level = f"{percent(confidence)}"
    out = [
        page.chart(f"summary-{slug(metric)}", forest(rows, f"{metric} of every benchmark with its {level} interval"))
        for metric, rows in by_metric.items()
    ]
    if passk:
        ks = [f"k = {k}" for k in sorted({r["order"] for r in passk})]
        out.append(
            page.chart(
                "summary-pass_k",
                forest(passk, f"pass@k of every benchmark for every k ({', '.join(ks)}) with its {level} interval", color="k", order=ks),
            )
        )
    drawn = {r["benchmark"] for rows in [*by_metric.values(), passk] for r in rows}
    missing = [(b.manifest.name, no_value_reason(b, metrics[b.manifest.name])) for b in result.benchmarks if b.manifest.name not in drawn]
    if missing:
        out.append(
            '<ul class="notes no-value">'
            + "".join(f'<li class="warn" data-benchmark="{esc(n)}">{esc(n)}: no value to chart: {esc(why)}</li>' for n, why in missing)
            + "</ul>"
        )
    return out


def no_value_reason(b: BenchmarkMerge, metrics: dict[str, dict[str, Any]]) -> str:
    """Why a benchmark has no metric value: every record an error (by kind), none at all, or what
    its metrics say."""
    c = BenchmarkView(b).counts()
    if c["n_records"] and c["n_errors"] == c["n_records"]:
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(c["error_kinds"].items(), key=lambda kv: -kv[1]))
        return f"all {c['n_records']} records are errors ({kinds})"
    if not c["n_records"]:
        return "no record yet"
    reasons = [v.get("details", {}).get("reason") for v in metrics.values()]
    return next((r for r in reasons if r), "no metric has a value") + "".join(f"; {p}" for p in b.metric_problems)


def gate_section(gate: dict[str, Any]) -> list[str]:
    """The verdict of merged/gate.json against its baseline, as report.md shows it; when it was
    decided on other answers than this merge's, only that it is out of date (docs/decisions.md)."""
    head = f'<h2 id="gate">Gate against {esc(str(gate.get("base")))}</h2>'
    if not gate["current"]:
        return [
            head,
            f'<p class="warn" id="gate-stale">merged/gate.json was decided on other answers than these: its verdict '
            f"{esc(str(gate.get('verdict')))} is not this run's; run shardeval gate again.</p>",
        ]
    rows = [
        [
            esc(str(row.get("benchmark"))),
            gate_cell(row.get("verdict")),
            num(row.get("diff"), "diff"),
            num(row.get("lower"), "lower"),
            num(row.get("upper"), "upper"),
            num((row.get("plan") or {}).get("problems"), "plan_problems"),
        ]
        for row in gate.get("benchmarks", [])
    ]
    return [
        head,
        "<p>"
        + table(["overall"], [[gate_cell(gate.get("verdict"))]], cls="gate-overall")
        + f'<span class="muted">margin {gate.get("margin")}, α {gate.get("alpha")} (one-sided; docs/decisions.md)</span></p>',
        table(["benchmark", "verdict", "difference", "lower bound", "upper bound", "problems that would settle it"], rows, cls="gate"),
    ]


def render_report_html(result: MergeResult, confidence: float = 0.95) -> bytes:
    """The page. Raises vendor.BundleMissing without the charts' JavaScript."""
    run = result.run
    metrics = {b.manifest.name: _as_dicts(b.metrics) for b in result.benchmarks}  # scores.json's "metrics", as JSON values
    page = Page(f"shardeval report: {os.path.basename(os.path.normpath(run.root))}")
    verdict, why = result.verdict, result.verdict_line().removeprefix(result.verdict)
    page.add(
        f"<h1>shardeval report: {esc(run.root)}</h1>",
        f"<p>Run <code>{esc(run.config_hash)}</code>: {len(run.present())}/{run.total_shards} shards present. "
        f'<span class="verdict {"complete" if result.complete else "partial"}" id="verdict">{verdict}</span>{esc(why)}</p>',
    )
    if notes := ReportView(result).notes():
        page.add('<ul class="notes">' + "".join(f'<li class="warn">{esc(plain(n))}</li>' for n in notes) + "</ul>")
    if (gate := ReportView(result).gate()) is not None:
        page.add(*gate_section(gate))
    page.add(
        '<nav class="muted">'
        + " · ".join(f'<a href="#b-{slug(b.manifest.name)}">{esc(b.manifest.name)}</a>' for b in result.benchmarks)
        + ' · <a href="#provenance">provenance</a></nav>'
    )
    page.add(
        "<h2>Summary</h2>",
        *summary_charts(page, result, metrics, confidence),
        *(
            f"<h3>{esc(name)}</h3>"
            + metric_table(name, shown_metrics(ms), confidence)
            + (f'<p class="muted pass1">{esc(PASS1_IS_ACCURACY)}; scores.json holds both.</p>' if pass1_is_accuracy(ms) else "")
            for name, ms in metrics.items()
        ),
    )
    budget, thinking = ThumbnailBudget(), ThinkingBudget()
    for b in result.benchmarks:
        page.add(*benchmark_section(page, result, b, metrics[b.manifest.name], confidence, budget, thinking))
    page.add('<h2 id="provenance">Provenance</h2>', provenance_table(ReportView(result)))
    return page.render()


def benchmark_section(
    page: Page,
    result: MergeResult,
    b: BenchmarkMerge,
    metrics: dict[str, dict[str, Any]],
    confidence: float,
    budget: ThumbnailBudget | None = None,
    thinking: ThinkingBudget | None = None,
) -> list[str]:
    view, facts = ReportView(result), BenchmarkView(b)
    name, c = b.manifest.name, facts.counts()
    key = slug(name)
    out = [
        f'<h2 id="b-{key}">{esc(name)}</h2>',
        f"<p>coverage: {c['n_records']}/{c['n_expected']} (problem, repeat) pairs recorded ({c['n_problems']} problems × "
        f"{c['repeats']} repeats), {c['n_missing']} missing; errors: {c['n_errors']} "
        f"({'scored as wrong' if result.errors_as_wrong else 'excluded from scores'})</p>",
    ]
    out += [f'<p class="warn">{esc(problem)}</p>' for problem in b.metric_problems]
    out += reasoning_section(page, b)
    per_cluster = (metrics.get("accuracy") or {}).get("details", {}).get("per_cluster")
    if per_cluster:
        rows = [
            {"category": k, **span(e["value"], e.get("ci_low"), e.get("ci_high")), "n": e["n"]}
            for k, e in sorted(per_cluster.items(), key=lambda kv: -kv[1]["value"])
        ]
        methods = ", ".join(sorted({str(e.get("ci_method")) for e in per_cluster.values() if e.get("ci_low") is not None}))
        out.append(
            page.chart(
                f"categories-{key}",
                interval_rows(
                    rows,
                    f"{name}: accuracy per category, {percent(confidence)} intervals" + (f" ({methods})" if methods else ""),
                    y="category",
                    x_title="accuracy",
                ),
            )
        )
    passk = sorted((int(k.group(1)), v) for m, v in metrics.items() if (k := PASS_AT.match(m)) and v.get("value") is not None)
    if len(passk) > 1:
        rows = [{"benchmark": name, "k": k, **span(v["value"], v.get("ci_low"), v.get("ci_high"))} for k, v in passk]
        out.append(page.chart(f"passk-{key}", pass_at_k(rows, f"{name}: pass@k against k")))
    t = facts.timing()
    for label, field in (("latency", "latency_s"), ("TTFT", "ttft_s")):
        if points := facts.distribution(field):
            rows = [{"benchmark": name, "q": q, "seconds": v} for q, v in points]
            out.append(page.chart(f"{label.lower()}-{key}", ecdf(rows, f"{name}: {label} distribution", "seconds")))
    if t["n"]:
        timing_rows = [
            [esc(label), *(num(t[field][q], f"{name}/timing/{field}/{q}", 3) for q in ("p50", "p90", "p99"))]
            for label, field in (("latency (s)", "latency_s"), ("TTFT (s)", "ttft_s"))
        ]
        out.append(
            table(["", "p50", "p90", "p99"], timing_rows, cls="timing")
            + f'<p class="muted">{t["n"]} answers asked of the model; {t["n_cached"]} from the response cache (left out); '
            f"{t['completion_tokens_per_s'] or 0:.1f} completion tokens/s over {t['wall_span_s'] or 0:.1f} s</p>"
        )
    states, errors = view.shard_outcomes(b)
    coverage = [
        {"shard": f"shard {i}", "state": st, "n": states[(i, st)]}
        for i in range(result.run.total_shards)
        for st in ("ok", "error", "missing")
        if states[(i, st)]
    ]
    out.append(
        page.chart(
            f"coverage-{key}",
            stacked_counts(coverage, f"{name}: coverage per shard", y="shard", color="state", colors=COVERAGE_COLORS),
        )
    )
    if errors:
        by_kind: Counter[str] = Counter()
        for (_, error_kind), n in errors.items():
            by_kind[error_kind] += n
        out.append(
            page.chart(
                f"errors-{key}",
                stacked_counts(
                    [{"shard": f"shard {i}", "kind": k, "n": n} for (i, k), n in sorted(errors.items())],
                    f"{name}: errors by shard and kind ({', '.join(f'{k} {n}' for k, n in by_kind.most_common())})",
                    y="shard",
                    color="kind",
                    colors=error_kind_colors([k for k, _ in by_kind.most_common()]),
                ),
            )
        )
    out += items_section(
        result, b, budget if budget is not None else ThumbnailBudget(), thinking if thinking is not None else ThinkingBudget()
    )
    return out


def reasoning_section(page: Page, b: BenchmarkMerge) -> list[str]:
    """A reasoning benchmark's replies: how many were cut off while thinking (counted apart from
    every other answer: scored 0, never from their thinking) and after answering, then the
    reasoning tokens per reply as numbers and as a histogram. Nothing for a benchmark without
    thinking or cut-off replies."""
    summary = reasoning_of(b)
    if summary is None:
        return []
    name, key = b.manifest.name, slug(b.manifest.name)
    k = f"{name}/reasoning"
    share = rate(summary)
    line = (
        f'<p class="reasoning" id="reasoning-line-{key}"><span class="badge{" warn" if summary["truncated_reasoning"] else ""}">'
        f"{esc(TRUNCATED_REASONING)}: {figure(summary['truncated_reasoning'], f'{k}/truncated_reasoning')} of "
        f"{figure(summary['n_answered'], f'{k}/n_answered')}" + (f" ({percent(share, 1, ' ')})" if share is not None else "") + "</span> · "
        f"{esc(TRUNCATED)}: {figure(summary['truncated'], f'{k}/truncated')} · "
        f"with thinking: {figure(summary['with_reasoning'], f'{k}/with_reasoning')}</p>"
    )
    out = [line]
    tokens = summary.get("reasoning_tokens")
    if tokens:
        fields = ["n", "mean", "p50", "p90", "max"]
        source = tokens.get("from") or {}
        out.append(
            table(
                ["reasoning tokens per reply", *fields, "from usage", "counted by stream"],
                [
                    [
                        "all answered replies with a count",
                        *(num(tokens.get(f), f"{k}/reasoning_tokens/{f}", 1) for f in fields),
                        num(source.get("usage"), f"{k}/reasoning_tokens/from/usage"),
                        num(source.get("stream"), f"{k}/reasoning_tokens/from/stream"),
                    ]
                ],
                cls="reasoning-tokens",
            )
        )
    if rows := token_bins(b):
        out.append(
            page.chart(
                f"reasoning-{key}",
                histogram(rows, f"{name}: reasoning tokens per reply, by outcome", x_title="reasoning tokens", colors=OUTCOME_COLORS),
            )
        )
    return out


def figure(value: Any, key: str) -> str:
    """A number inside a line of text, its exact value in data-value (as `num`'s cells)."""
    return f'<span class="num" data-key="{esc(key)}" data-value="{esc(json.dumps(value))}">{esc(value)}</span>'


def items_section(result: MergeResult, b: BenchmarkMerge, budget: ThumbnailBudget, thinking: ThinkingBudget | None = None) -> list[str]:
    """The items worth reading: lowest mean score, most disagreement between repeats, errors, cut
    off while thinking; each links to its standing records (a reasoning model's thinking folded
    under each answer), one conversation and the images it showed, shown escaped."""
    worst: list[tuple[float, int]] = []  # the ITEMS lowest (mean, problem), the ITEMS largest (spread, lowest problem)
    spread: list[tuple[float, int]] = []
    errored: list[int] = []
    for p, s, errors in BenchmarkView(b).problem_scores():
        if s and sum(s) < len(s):
            _keep(worst, (-sum(s) / len(s), -p))
        if len(s) > 1 and min(s) != max(s):  # not the variance's float noise: 3 x 0.1 is not a disagreement
            _keep(spread, (_variance(s), -p))
        if errors and len(errored) < ITEMS:
            errored.append(p)
    worst = sorted((-m, -p) for m, p in worst)
    spread = sorted((-v, -p) for v, p in spread)
    groups = [
        ("Lowest mean score", [p for _, p in worst]),
        ("Most disagreement between repeats", [p for _, p in spread]),
        ("With errors", errored),
        ("Cut off while thinking", cut_off_while_thinking(b)),
    ]
    chosen = sorted({p for _, ps in groups for p in ps})
    if not chosen:
        return []
    records = read_items(result, b, chosen)
    name, key = b.manifest.name, slug(b.manifest.name)
    out = [f"<h3>{esc(name)}: items to read</h3>"]
    categories = bool(b.cells.clusters)
    judged = any(judged_record(r) for p in chosen for r, _ in records[p])
    answers = ["answer per repeat", "judge's verdict per repeat"] if judged else ["extracted per repeat"]
    for title, ps in groups:
        if not ps:
            continue
        rows = []
        for p in ps:
            recs = records[p]
            first = recs[0][0]
            s = [r.score for r, _ in recs if r.status == "ok" and r.score is not None]
            rows.append(
                [
                    f'<a href="#i-{key}-{p}">{esc(first.problem_id)}</a>',
                    *([esc(first.cluster or "")] if categories else []),
                    num(sum(s) / len(s) if s else None, f"{name}/item/{p}/mean"),
                    esc(f"{len(s)}/{b.cells.repeats}"),
                    f'<td class="text-cell">{esc(first.reference)}</td>',
                    *(
                        [
                            f'<td class="text-cell answer">{esc(" | ".join(_answer(r) for r, _ in recs))}</td>',
                            f'<td class="text-cell judge-verdict">{esc(" | ".join(_verdict(r) for r, _ in recs))}</td>',
                        ]
                        if judged
                        else [f'<td class="text-cell">{esc(" | ".join(_extracted(r) for r, _ in recs))}</td>']
                    ),
                ]
            )
        out.append(
            f"<h4>{esc(title)}</h4>"
            + table(["problem", *(["category"] if categories else []), "mean score", "valid", "reference", *answers], rows, cls="items")
        )
    images = {p: item_images(records[p]) for p in chosen}
    digests = {info.sha256 for shown in images.values() for info in shown[:THUMBS_PER_ITEM]}
    thumbs = ReportView(result).thumbnails(name, digests) if digests else {}
    thinking = thinking if thinking is not None else ThinkingBudget()
    out += [item_detail(key, p, records[p], gallery(images[p], thumbs, budget), thinking) for p in chosen]
    return out


def cut_off_while_thinking(b: BenchmarkMerge) -> list[int]:
    """The first ITEMS problems with a repeat whose standing answer was cut off while thinking."""
    problems = sorted({cell // b.cells.repeats for cell in b.cells.reasoning.cut_cells})
    return problems[:ITEMS]


def _extracted(r: ResultRecord) -> str:
    """What a repeat answered, as the items table shows it: — where nothing was extracted."""
    if r.status != "ok":
        return f"[{r.error_kind}]"
    if r.extracted is None and r.outcome == "truncated_reasoning":
        return f"[{TRUNCATED_REASONING}]"
    return "—" if r.extracted is None else str(r.extracted)


ANSWER_LIMIT = 200  # characters of one repeat's answer in the items table; the item's details hold it whole


def judged_record(r: ResultRecord) -> bool:
    """Scored by a judge: its `extracted` is the judge's verdict, not the model's answer."""
    return r.judge is not msgspec.UNSET


def _answer(r: ResultRecord) -> str:
    """A judged repeat's answer (the model's reply without its thinking, cut), as the items table shows it."""
    if r.status != "ok" and not r.response:
        return f"[{r.error_kind}]"
    if r.outcome == "truncated_reasoning":
        return f"[{TRUNCATED_REASONING}]"
    answer = r.scored_text().strip()
    return _cut(answer, ANSWER_LIMIT) if answer else "—"


def _verdict(r: ResultRecord) -> str:
    """What the judge said of a repeat's answer: its verdict, or why there is none."""
    j = r.judge if r.judge is not msgspec.UNSET else None  # judged_record(r), which mypy cannot see through
    if j is not None and j.verdict is not None:
        return j.verdict
    return f"[{r.error_kind or (j.error_kind if j is not None else None) or 'no verdict'}]"


def _keep(heap: list[tuple[float, int]], negated: tuple[float, int]) -> None:
    """Keep the ITEMS smallest keys seen, one pass: `heap` is a min-heap of the negated keys, so
    its top is the largest key kept, the one a smaller key replaces."""
    if len(heap) < ITEMS:
        heapq.heappush(heap, negated)
    elif negated > heap[0]:
        heapq.heapreplace(heap, negated)


def _variance(s: list[float]) -> float:
    m = sum(s) / len(s)
    return sum((x - m) ** 2 for x in s) / len(s)


def read_items(
    result: MergeResult, b: BenchmarkMerge, problems: list[int]
) -> dict[int, list[tuple[ResultRecord, TrajectoryRecord | None]]]:
    """The standing records (and their trajectories) of `problems`, read back from the shards."""
    return ReportView(result).standing_records(b, problems)


def _clip(text: str, where: str) -> str:
    if len(text) <= TEXT_LIMIT:
        return esc(text)
    return esc(text[:TEXT_LIMIT]) + f'<span class="muted">… {len(text) - TEXT_LIMIT} more characters in {esc(where)}</span>'


def item_images(recs: list[tuple[ResultRecord, TrajectoryRecord | None]]) -> list[ImageInfo]:
    """The images an item showed the model, in order (its records agree; none for a text problem)."""
    return next((r.images for r, _ in recs if r.images), [])


def gallery(images: list[ImageInfo], thumbs: dict[str, ImageThumbnail], budget: ThumbnailBudget) -> str:
    """The first THUMBS_PER_ITEM images of an item, each drawn from its thumbnail or named as text."""
    if not images:
        return ""
    more = len(images) - THUMBS_PER_ITEM
    return (
        '<div class="thumbs">'
        + "".join(thumb_figure(info, thumbs.get(info.sha256), budget) for info in images[:THUMBS_PER_ITEM])
        + (f'<span class="muted thumbs-more">+{more} more</span>' if more > 0 else "")
        + "</div>"
    )


def thumb_figure(info: ImageInfo, thumb: ImageThumbnail | None, budget: ThumbnailBudget) -> str:
    """One image: its thumbnail (only ever the line's own data: URL) or a text placeholder, and
    its name, size and digest as text. Every string from the shards' files goes through esc."""
    name = thumb.name if thumb is not None and thumb.name else f"sha256 {info.sha256[:12]}"
    facts = f"{info.width}×{info.height}, {_size(info.bytes)}, sha256 {info.sha256[:12]}"
    title = f"{_cut(name, TITLE_LIMIT)}\n{facts}"
    src = thumbnail_src(thumb)
    if src is None:
        why = "no thumbnail" if thumb is not None else "no thumbnail in the shards' images.jsonl"
        drawn = f'<div class="thumb-missing">{esc(why)}</div>'
    elif not budget.take(len(src)):
        drawn = f'<div class="thumb-missing">{esc(f"left out: the page holds its {PAGE_THUMBNAIL_BYTES // 1024} KiB of thumbnails")}</div>'
    else:
        assert thumb is not None
        w, h = thumb.thumb_width, thumb.thumb_height
        size = f' width="{w}" height="{h}"' if 0 < w <= THUMB_SIDE and 0 < h <= THUMB_SIDE else ""
        drawn = f'<img src="{esc(src)}"{size} alt="{esc(_cut(name, NAME_LIMIT))}">'
    return (
        f'<figure class="thumb" title="{esc(title)}">{drawn}<figcaption><span class="thumb-name">{esc(_cut(name, NAME_LIMIT))}'
        f'</span><br><span class="muted">{esc(facts)}</span></figcaption></figure>'
    )


def thumbnail_src(thumb: ImageThumbnail | None) -> str | None:
    """The thumbnail's data: URL when it is one this page embeds (THUMBNAIL_URL), else None."""
    url = thumb.thumbnail if thumb is not None else None
    if url is None or len(url) > MAX_THUMBNAIL_URL or not THUMBNAIL_URL.fullmatch(url):
        return None
    return url


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _size(n: int) -> str:
    return f"{n} B" if n < 1024 else f"{n / 1024:.1f} KiB" if n < 1024 * 1024 else f"{n / 1024 / 1024:.1f} MiB"


def item_detail(
    key: str, p: int, recs: list[tuple[ResultRecord, TrajectoryRecord | None]], images: str = "", thinking: ThinkingBudget | None = None
) -> str:
    """One problem's standing records, the images it showed (`images`, already drawn), each
    answer with its thinking folded under it (a reasoning model's), and the conversation of its
    first record that is not right."""
    first = recs[0][0]
    judged = any(judged_record(r) for r, _ in recs)
    said = (
        (lambda r: [f'<td class="text-cell answer">{esc(_answer(r))}</td>', f'<td class="text-cell judge-verdict">{esc(_verdict(r))}</td>'])
        if judged
        else (lambda r: [f'<td class="text-cell">{esc(r.extracted)}</td>'])
    )
    outcomes = any(r.outcome is not msgspec.UNSET for r, _ in recs)
    rows = [
        [
            num(r.repeat, f"item/{p}/repeat"),
            esc(r.status),
            num(r.score, f"item/{p}/{r.repeat}/score"),
            *said(r),
            *([outcome_cell(r)] if outcomes else []),
            esc(r.error_kind or ""),
            f'<td class="text-cell">{esc(r.error or "")}</td>',
        ]
        for r, _ in recs
    ]
    shown = next(((r, t) for r, t in recs if t is not None and r.score != 1.0), next(((r, t) for r, t in recs if t is not None), None))
    where = f"merged/{first.benchmark}/{TRAJECTORIES_FILE}"
    conversation = ""
    if shown is not None:
        r, t = shown
        assert t is not None
        last = max((i for i, m in enumerate(t.messages) if m.role == "assistant"), default=-1)
        conversation = f'<p class="muted">repeat {r.repeat}:</p>' + "".join(
            f'<div class="role">{esc(m.role)}</div><div class="text">{_clip(m.content, where)}</div>'
            if i != last or r.reasoning is msgspec.UNSET or r.status != "ok"
            # its answer: the thinking is folded above, not twice
            else f'<div class="role">{esc(m.role)} <span class="muted">(the answer; its thinking is folded under repeat {r.repeat} above)'
            f"</span></div>{_said(r, _clip(r.scored_text(), where))}"
            for i, m in enumerate(t.messages)
        )
        if r.status == "ok" and r.response and not any(m.role == "assistant" for m in t.messages):
            conversation += f'<div class="role">reply</div><div class="text">{_clip(r.scored_text(), where)}</div>'
    thoughts = replies(key, p, recs, thinking if thinking is not None else ThinkingBudget(), where)
    cut = any(r.outcome == "truncated_reasoning" for r, _ in recs)
    return (
        f'<details class="item" id="i-{key}-{p}"><summary>{esc(first.problem_id)} <span class="muted">(problem {p}'
        f"{', ' + esc(first.cluster) if first.cluster else ''})</span>"
        + (f' <span class="badge warn truncated-reasoning">{esc(TRUNCATED_REASONING)}</span>' if cut else "")
        + "</summary>"
        + images
        + f'<p>reference: <span class="text-inline">{esc(first.reference)}</span></p>'
        + table(
            [
                "repeat",
                "status",
                "score",
                *(["answer", "judge's verdict"] if judged else ["extracted"]),
                *(["outcome"] if outcomes else []),
                "error kind",
                "error",
            ],
            rows,
        )
        + thoughts
        + conversation
        + "</details>"
    )


def _said(r: ResultRecord, shown: str) -> str:
    """A reply's answer (`shown`: its text, escaped and cut), or that it has none and why."""
    if r.scored_text().strip():
        return f'<div class="text answer-text">{shown}</div>'
    why = "no answer: cut off while thinking, scored 0" if r.outcome == "truncated_reasoning" else "no answer"
    return f'<div class="muted answer-text">{why}</div>'


def outcome_cell(r: ResultRecord) -> str:
    """A cut-off reply's outcome in words (empty for a reply that ended on its own)."""
    if r.outcome == "truncated_reasoning":
        return f'<td class="outcome truncated-reasoning warn">{esc(TRUNCATED_REASONING)}</td>'
    return f'<td class="outcome">{esc(TRUNCATED if r.outcome == "truncated" else "")}</td>'


def replies(key: str, p: int, recs: list[tuple[ResultRecord, TrajectoryRecord | None]], budget: ThinkingBudget, where: str) -> str:
    """Each repeat of a reasoning model: its answer (what was scored), and under it its thinking
    folded (a collapsed <details>), with its token count and who counted them, cut to the item's
    and the page's share (THINKING_LIMIT, THINKING_PER_ITEM, PAGE_THINKING_BYTES)."""
    left = THINKING_PER_ITEM
    out = []
    for r, _ in recs:
        if r.status != "ok" or (r.reasoning is msgspec.UNSET and r.outcome != "truncated_reasoning"):
            continue
        answer = r.scored_text()
        cut = r.outcome == "truncated_reasoning"
        said = _said(r, esc(_cut(answer, TEXT_LIMIT)))
        out.append(
            f'<div class="reply" data-repeat="{r.repeat}"><div class="role">repeat {r.repeat}: answer'
            + (f' <span class="badge warn truncated-reasoning">{esc(TRUNCATED_REASONING)}</span>' if cut else "")
            + "</div>"
            + said
            + thinking_fold(key, p, r, left, budget, where)
            + "</div>"
        )
        if r.reasoning is not msgspec.UNSET:
            left -= min(len(r.reasoning), THINKING_LIMIT, left)
    return f'<div class="replies">{"".join(out)}</div>' if out else ""


TOKENS_FROM = {"usage": "usage", "stream": "counted by stream"}  # who counted a reply's reasoning tokens, in words


def thinking_fold(key: str, p: int, r: ResultRecord, left: int, budget: ThinkingBudget, where: str) -> str:
    """One reply's thinking, folded: its size in the summary, its text (cut) inside, as text."""
    source = TOKENS_FROM.get(r.reasoning_tokens_from) if r.reasoning_tokens_from is not msgspec.UNSET else None
    tokens = (
        ""
        if r.reasoning_tokens is msgspec.UNSET
        else (
            f'<span class="num" data-key="item/{p}/{r.repeat}/reasoning_tokens" data-value="{r.reasoning_tokens}">{r.reasoning_tokens}</span>'
            f" tokens{f' ({source})' if source else ''}, "
        )
    )
    if r.reasoning is msgspec.UNSET:
        return f'<p class="muted thinking-none">thinking: {tokens}its text not kept</p>'
    text = r.reasoning
    size = f'<span class="thinking-chars" data-value="{len(text)}">{len(text):,}</span> characters'
    limit = min(THINKING_LIMIT, left)
    whole = f"the whole thinking is in {where} (and results.jsonl's `reasoning`)"
    if limit <= 0:
        body = f'<p class="muted thinking-left-out">not embedded: this item shows {THINKING_PER_ITEM:,} characters of thinking; {esc(whole)}</p>'
    elif len(text) <= limit:
        body = _embed(esc(text), text, budget, whole)
    else:
        head, tail = text[: limit - limit // 2], text[len(text) - limit // 2 :]
        body = _embed(
            esc(head) + f'<span class="muted thinking-cut">\n… {len(text) - len(head) - len(tail):,} of its {len(text):,} '
            f"characters left out here; {esc(whole)} …\n</span>" + esc(tail),
            head + tail,
            budget,
            whole,
        )
    return f'<details class="thinking" id="t-{key}-{p}-{r.repeat}"><summary>thinking: {tokens}{size}</summary>{body}</details>'


def _embed(shown: str, raw: str, budget: ThinkingBudget, whole: str) -> str:
    if not budget.take(len(raw.encode("utf-8", "surrogatepass"))):
        return (
            f'<p class="muted thinking-left-out">not embedded: the page holds its {PAGE_THINKING_BYTES // 1024} KiB of thinking; '
            f"{esc(whole)}</p>"
        )
    return f'<div class="text thinking-text">{shown}</div>'


def provenance_table(view: ReportView) -> str:
    rows = []
    for name, values in view.provenance():
        shown = (
            "; ".join(f"{v} ({', '.join(paths[:3])}{' …' if len(paths) > 3 else ''})" for v, paths in values.items())
            if len(values) > 1
            else next(iter(values))
        )
        rows.append([esc(name), f'<td class="{"warn" if len(values) > 1 and name != "host" else ""}">{esc(shown)}</td>'])
    return table(["fact", "value"], rows, cls="provenance")
