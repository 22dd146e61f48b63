"""`shardeval merge` of a sweep: every model's run merged as any run, then one table.

Each model's directory is merged exactly as `shardeval merge <out>/<service>` would (duplicates,
missing cells, lost shards and mixed identities handled by the one merge), into its own merged/.
Then <out>/merged/sweep.json, sweep.md and sweep.html (sweep.html drawn by the pages plugin): models ×
benchmarks with every metric's value and interval, and each non-baseline model's paired
difference against the baseline on the (problem, repeat) cells both answered, Holm-adjusted
across the table (the statistics come from the `paired_differences` and `family_adjusted` hooks:
the metrics plugin). sweep.json is assembled from one part per model (shardeval.results.sweep_parts),
as a watched sweep's update assembles it (shardeval.results.incremental), so both write the same bytes.
A cell short of full coverage, or a pair compared on fewer cells than either model has, is
marked, never silently compared. A model whose benchmark was asked or scored otherwise than the
baseline's (data, prompt or scorer fingerprint: shardeval.identity.incomparable) is shown and
marked, and never paired with it.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from functools import cache, cached_property, lru_cache
from typing import Any
from collections.abc import Sequence

from shardeval.errors import os_error
from shardeval.numbers import percent
from shardeval.results.merge import COMPLETE, ERRORS, PARTIAL, MergeResult, merge_run, verdict_text, warnings
from shardeval.results.outputs import REPORT_HTML, write_merged
from shardeval.results import pages
from shardeval.results.metrics import MetricOptions
from shardeval.results.quoting import md_text
from shardeval.results.report import fmt, fmt_p, render_report
from shardeval.results.sweep_parts import assemble, by_benchmark, model_part
from shardeval.store.atomic import atomic_write
from shardeval.store.discover import MERGED_DIR, model_roots, naming_model, read_plan, refuse_inside_shard
from shardeval.store.records import SweepPlan, pretty_json

SWEEP_JSON, SWEEP_MD, SWEEP_HTML = "sweep.json", "sweep.md", "sweep.html"
NOT_WRITTEN_YET = "no shard has written yet"  # a model of the plan with no shard yet


@dataclass
class ModelMerge:
    service: str | None  # None: a run that is not a sweep's
    result: MergeResult | None  # None: no shard of it has written yet
    note: str | None = None


@dataclass
class SweepModel(ModelMerge):
    """A model of a sweep, named by its service there."""

    service: str


@dataclass
class SweepMerge:
    root: str
    plan: SweepPlan
    models: list[SweepModel]
    document: dict[str, Any]
    notices: list[str] = field(default_factory=list)  # what writing it left out (for stderr), one line per reason
    markdown: str = ""  # sweep.md as written

    # What the verdict reads, once: sweep.md, sweep.html and the report each ask for it, and it
    # walks every model's cells (a watched sweep of many checkpoints writes them at every update).
    # A SweepMerge's models do not change once it is made.
    @cached_property
    def partial(self) -> bool:
        return sweep_partial(self.models)

    @cached_property
    def verdict(self) -> str:
        """COMPLETE only when every model's run is (every cell ok); else PARTIAL or ERRORS."""
        return PARTIAL if self.partial else COMPLETE if all(m.result is not None and m.result.complete for m in self.models) else ERRORS

    @property
    def complete(self) -> bool:
        return self.verdict == "COMPLETE"

    @cached_property
    def _verdict_line(self) -> str:
        results = [m.result for m in self.models if m.result is not None]
        counted = [r.error_cells() for r in results]
        kinds: Counter[str] = sum((by_kind for _, by_kind in counted), Counter())
        cells = sum(n for n, _ in counted)
        missing = sum(r.missing_cells() for r in results)
        return verdict_text(self.verdict, cells, kinds, missing)

    def verdict_line(self) -> str:
        """The verdict with the counts over every model's cells (see MergeResult.verdict_line)."""
        return self._verdict_line


def merge_sweep(
    root: str, plan: SweepPlan, *, errors_as_wrong: bool = False, options: MetricOptions | None = None, allow_mixed_models: bool = False
) -> SweepMerge:
    """Merge every model of the sweep (writes nothing) and compare each against the baseline."""
    options = options or MetricOptions()
    models: list[SweepModel] = []
    for name, run_root in model_roots(root, plan):
        if run_root is None:
            models.append(SweepModel(name, None, NOT_WRITTEN_YET))
            continue
        with naming_model(name):
            result = merge_run(
                run_root, errors_as_wrong=errors_as_wrong, options=options, keep_ids=True, allow_mixed_models=allow_mixed_models
            )
        models.append(SweepModel(name, result))
    return SweepMerge(root, plan, models, sweep_document(plan, models, options, errors_as_wrong))


def sweep_document(plan: SweepPlan, models: list[SweepModel], options: MetricOptions, errors_as_wrong: bool) -> dict[str, Any]:
    """sweep.json: the table's cells, the paired differences against the baseline, what is missing;
    assembled from one part per model (shardeval.results.sweep_parts), as a watched sweep's is."""
    base = by_benchmark(next((m.result for m in models if m.service == plan.baseline), None))
    parts = [model_part(m.service, m.result, m.note, base, plan.baseline, options, plan.gate) for m in models]
    return assemble(plan, parts, sweep_partial(models), options, errors_as_wrong)


def sweep_partial(models: Sequence[ModelMerge]) -> bool:
    """sweep.json's `partial`: some model has no merge yet, or cells still missing."""
    return any(m.result is None or m.result.partial for m in models)


def write_sweep(sweep: SweepMerge, out_dir: str | None = None, confidence: float = 0.95) -> str:
    """Each model's merged/ (or OUT/<service>/ with `out_dir`), then sweep.json, sweep.md and
    sweep.html (without the plotting extra: one line in sweep.notices says how to get it)."""
    refuse_inside_shard(out_dir or os.path.join(sweep.root, MERGED_DIR), "-o")
    reports = write_models(sweep.models, out_dir, confidence)
    out_dir = out_dir or os.path.join(sweep.root, MERGED_DIR)
    write_sweep_files(sweep, out_dir, reports, confidence)
    return out_dir


def write_models(models: Sequence[SweepModel], out_dir: str | None, confidence: float) -> dict[str, str]:
    """Each merged model's merged/ (or OUT/<service>/ with `out_dir`): its report.html's path by model."""
    return {
        m.service: os.path.join(
            write_merged(m.result, os.path.join(out_dir, m.service) if out_dir else None, confidence=confidence), REPORT_HTML
        )
        for m in models
        if m.result is not None
    }


def write_sweep_files(sweep: SweepMerge, out_dir: str, reports: dict[str, str], confidence: float) -> None:
    """sweep.json, sweep.md (kept in sweep.markdown) and sweep.html into `out_dir`; `reports`:
    each model's report.html, linked from sweep.html when it is there. sweep.notices: what the
    pages left out."""
    sweep.markdown = render_sweep(sweep, confidence)
    try:
        os.makedirs(out_dir, exist_ok=True)
        atomic_write(os.path.join(out_dir, SWEEP_JSON), pretty_json(sweep.document))
        atomic_write(os.path.join(out_dir, SWEEP_MD), sweep.markdown.encode())
        links = {name: os.path.relpath(path, out_dir) for name, path in reports.items() if os.path.exists(path)}
        page = os.path.join(out_dir, SWEEP_HTML)
        missing = pages.sweep_page(sweep, page, confidence, links)
    except OSError as exc:
        raise os_error(exc, "write the merged results to", alternative="pass -o DIR to write them elsewhere") from None
    sweep.notices = fold_notices(
        missing, [(m.service, n) for m in sweep.models if m.result is not None for n in m.result.notices], [page, *reports.values()]
    )


def fold_notices(missing: str, of_models: list[tuple[str, str]], paths: list[str]) -> list[str]:
    """The lines for stderr. A model's notices can only say its report.html was not written, for
    the reason sweep.html was not (`missing`: why not): then one line says so, not one per model."""
    if not missing:
        return [f"{name}: {line}" for name, line in of_models]
    stale = "; the pages there are from an earlier merge" if any(os.path.exists(p) for p in paths) else ""
    return [f"{SWEEP_HTML} and the models' {REPORT_HTML} not written: {missing}{stale}"]


# sweep.md formats every number of the table again at each update of a watched sweep; the same
# numbers, so kept (a pure function of its arguments: the text is the same either way)
_num = lru_cache(maxsize=1 << 16)(fmt)
_p = lru_cache(maxsize=1 << 16)(fmt_p)


def _cell_text(cell: dict[str, Any]) -> str:
    text = f"{_num(cell['value'])} [{_num(cell['ci_low'])}, {_num(cell['ci_high'])}]"
    if cell.get("ci_low") is not None:
        text += f" {cell['ci_method']}"
    text = text if cell["complete"] else f"{text} ‡ {cell['n_ok']}/{cell['n_expected']}"
    return f"{text} ≠" if cell.get("differs_from_baseline") else text


NOT_COMPARED = "≠ asked or scored otherwise than the baseline (data, prompts or scorer): shown apart, never compared with it."


def not_compared_notes(doc: dict[str, Any]) -> list[str]:
    """One line per model × benchmark left out of the comparison for having other questions."""
    return [f"{m['service']} ({m['benchmark']}): {m['why']}" for m in doc.get("not_compared", [])]


def render_sweep(sweep: SweepMerge, confidence: float = 0.95) -> str:
    """sweep.md: for each metric a models × benchmarks table, then the differences against the baseline."""
    doc, plan = sweep.document, sweep.plan
    benches = list(dict.fromkeys(c["benchmark"] for c in doc["cells"]))
    lines = [
        f"# shardeval sweep: {md_text(sweep.root)}",
        "",
        f"{len(plan.services)} models × {len(benches)} benchmarks, baseline **{md_text(plan.baseline)}**, {percent(confidence)} intervals. "
        f"**{sweep.verdict}**{md_text(sweep.verdict_line().removeprefix(sweep.verdict))}",
    ]
    lines += [
        f"- {md_text(m['service'])}: {md_text(m['why'])}" + (f" ({md_text(m['benchmark'])})" if "benchmark" in m else "")
        for m in doc["missing"]
    ]
    lines += [
        f"- {md_text(m.service)}: {md_text(m.result.verdict_line())} (see {md_text(m.service)}/merged/report.md)"
        for m in sweep.models
        if m.result is not None and not m.result.complete
    ]
    lines += [f"- {md_text(note)}" for note in not_compared_notes(doc)]
    lines += [f"- {md_text(f['service'])}: shard {f['shard']} failed: {md_text(f['why'])}" for f in doc.get("failed", [])]
    lines += _metric_tables(doc, plan, benches)
    lines += _reasoning_rows(doc, plan.services, benches)
    if any(not c["complete"] for c in doc["cells"]):
        lines += ["", "‡ not every (problem, repeat) pair has an ok record: the value covers the ones shown (ok/expected)."]
    if doc.get("not_compared"):
        lines += ["", NOT_COMPARED]
    if doc["vs_baseline"]:
        lines += _vs_baseline_table(doc["vs_baseline"], plan.baseline, confidence)
    if note := doc.get("vs_baseline_note"):
        lines += ["", f"- {note}"]
    if "gate" in doc:
        lines += gate_lines(doc["gate"], plan.baseline)
    lines += ["", "Each model's full report: `<model>/merged/report.md`."]
    return "\n".join(lines) + "\n"


def _metric_tables(doc: dict[str, Any], plan: SweepPlan, benches: list[str]) -> list[str]:
    """One models × benchmarks table per metric, the baseline marked, "—" where a model has no cell."""
    lines = []
    for metric in dict.fromkeys(c["metric"] for c in doc["cells"]):
        table = {(c["service"], c["benchmark"]): c for c in doc["cells"] if c["metric"] == metric}
        lines += ["", f"## {md_text(metric)}", "", f"| model | {' | '.join(map(md_text, benches))} |", "|---" * (len(benches) + 1) + "|"]
        for name in plan.services:
            label = f"{md_text(name)} (baseline)" if name == plan.baseline else md_text(name)
            lines.append(f"| {label} | " + " | ".join(_cell_text(table[name, b]) if (name, b) in table else "—" for b in benches) + " |")
    return lines


def _vs_baseline_table(vs_baseline: list[dict[str, Any]], baseline: str, confidence: float) -> list[str]:
    """The paired differences against the baseline, one row per model × benchmark (†: compared
    only on the cells both answered)."""
    lines = [
        "",
        f"## vs baseline: model − {md_text(baseline)}, paired on the same (problem, repeat) cells",
        "",
        f"| model | benchmark | metric | difference | {percent(confidence)} interval | method | p | p (Holm) | test | cells |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    quote = cache(md_text)  # the same few names on every row (a sweep of many checkpoints has thousands)
    for row in vs_baseline:
        mark = "" if row.get("complete") else " †"
        test = quote(row["test"]) if "test" in row else "—"
        lines.append(
            f"| {quote(row['service'])} | {quote(row['benchmark'])} | {quote(row['metric'])} | {_num(row['diff'])}{mark} | "
            f"[{_num(row['ci_low'])}, {_num(row['ci_high'])}] | {row.get('ci_method', '—')} | {_p(row['p_value'])} | "
            f"{_p(row['p_holm'])} | "
            f"{test} | {row.get('n', '—')} |"
        )
    if any(not row.get("complete") for row in vs_baseline):
        lines += [
            "",
            "† compared only on the cells both models answered; the rest (missing, errors, other problems) "
            "is left out of the pair and counted in sweep.json (n_only_baseline, n_only_other).",
        ]
    return lines


def gate_lines(gate: dict[str, Any], baseline: str) -> list[str]:
    """sweep.md's decisions: each model GO / NO-GO / INCONCLUSIVE against the baseline under the
    sweep's rule, with each benchmark's verdict and bounds (docs/decisions.md)."""
    rule = gate["rule"]
    alpha, margin = rule.get("alpha", 0.05), rule["margin"]
    lines = [
        "",
        f"## Gate: each model against {md_text(baseline)}, margin {margin:g}, α {alpha:g} (docs/decisions.md)",
        "",
        "| model | verdict | benchmark | verdict | difference | one-sided bounds | problems | would settle it |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for model in gate["models"]:
        rows = model.get("benchmarks") or [{}]
        for i, row in enumerate(rows):
            head = f"| {md_text(model['service'])} | **{model.get('verdict') or '—'}** |" if i == 0 else "| | |"
            if not row:
                lines.append(f"{head} — | — | — | — | — | {md_text(model.get('why', ''))} |")
                continue
            bounds = f"[{_num(row.get('lower'))}, {_num(row.get('upper'))}]"
            needed = (row.get("plan") or {}).get("problems")
            settle = f"about {needed} problems" if needed else "—"
            lines.append(
                f"{head} {md_text(row['benchmark'])} | {row['verdict']} | {_num(row.get('diff'))} | {bounds} | "
                f"{row.get('n_problems', '—')} | {settle} |"
            )
    lines += [
        f"- {md_text(model['service'])}: {md_text(x['benchmark'])} not compared: {md_text(x['why'])}"
        for model in gate["models"]
        for x in model.get("not_compared", [])
    ]
    lines += ["", "GO: shown not worse than the baseline by more than the margin on every benchmark; NO-GO: shown worse on one; "]
    lines[-1] += "INCONCLUSIVE: neither yet (the problems that would likely settle it at the rule's power)."
    return lines


def _reasoning_rows(doc: dict[str, Any], services: list[str], benches: list[str]) -> list[str]:
    """sweep.md's table of the answers' thinking per checkpoint (none when no model thinks)."""
    found = {(c["service"], c["benchmark"]): c["reasoning"] for c in doc["cells"] if c.get("reasoning") is not None}
    if not found:
        return []
    lines = [
        "",
        "## reasoning",
        "",
        "| model | benchmark | truncated while thinking | cut off after answering | with thinking | "
        "thinking tokens mean | p50 | p90 | max |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name in services:
        for bench in benches:
            if (r := found.get((name, bench))) is None:
                continue
            t = r.reasoning_tokens
            tokens = [f"{t.mean:.0f}", f"{t.p50:.0f}", f"{t.p90:.0f}", str(t.max)] if t is not None else ["—"] * 4
            lines.append(
                f"| {md_text(name)} | {md_text(bench)} | {r.truncated_reasoning} of {r.n_answered} "
                f"({percent(r.truncated_reasoning_rate, 1, ' ')}) | {r.truncated} | {r.with_reasoning} | {' | '.join(tokens)} |"
            )
    return lines


@dataclass
class Merged:
    """What `merge_any` wrote, and what to tell the user about it."""

    text: str  # the report (a sweep's: its table)
    out: str  # where the files went
    written: str  # which files, for the "written:" line
    page: str  # the HTML page to open
    page_shows: str  # what the page shows, for the "open …" line
    warnings: list[str]  # what could not be read in the shards' files, one line per file
    notices: list[str]  # what writing left out (no HTML without the plotting extra), one line per reason
    verdict: str = (
        "COMPLETE"  # the verdict line: COMPLETE (every cell has an ok record), else e.g. "ERRORS: 3 of 9 cells end in errors (3 client)"
    )
    # What was merged, for what runs after the merge (the config's `export:` targets): each model's
    # (sweep service or None, MergeResult or None), and a sweep's sweep.json document.
    models: Sequence[ModelMerge] = field(default_factory=list)
    sweep_document: dict[str, Any] | None = None
    root: str = ""  # the run's or the sweep's directory


def sweep_merged(sweep: SweepMerge, out: str, out_dir: str | None = None) -> Merged:
    """What `merge_any` says of a sweep written to `out` (`out_dir`: its -o, if any); a watched
    sweep's update says the same."""
    found = [f"{m.service}: {line}" for m in sweep.models if m.result is not None for line in warnings(m.result)]
    models = os.path.join(out_dir, "<model>") if out_dir else os.path.join(sweep.root, "<model>", "merged")
    written = f"{out}/ (sweep.json, sweep.md{'' if sweep.notices else ', sweep.html'}); each model's merge in {models}/"
    return Merged(
        sweep.markdown,
        out,
        written,
        os.path.join(out, SWEEP_HTML),
        "the grid, the differences, a link to each model's report",
        found,
        sweep.notices,
        sweep.verdict_line(),
        sweep.models,
        sweep.document,
        sweep.root,
    )


def merge_any(root: str, *, out_dir: str | None = None, confidence: float = 0.95, **options: Any) -> Merged:
    """Merge the run or the sweep at `root` and write its files. `options`: merge_run's
    (errors_as_wrong, options, allow_mixed_models). Every command that merges (`merge`, the end
    of a launch) goes through here, so they say the same things."""
    plan = read_plan(root)
    if plan is not None:
        sweep = merge_sweep(root, plan, **options)
        return sweep_merged(sweep, write_sweep(sweep, out_dir, confidence), out_dir)
    result = merge_run(root, **options)
    out = write_merged(result, out_dir, confidence=confidence)
    written = f"{out}/ (scores.json, timing.json, report.md, <benchmark>/results.jsonl, trajectories.jsonl)"
    return Merged(
        render_report(result, confidence),
        out,
        written,
        os.path.join(out, REPORT_HTML),
        "the charts and the items to read (it works offline)",
        warnings(result),
        result.notices,
        result.verdict_line(),
        [ModelMerge(None, result)],
        None,
        root,
    )
