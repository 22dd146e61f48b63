"""What merge says: scores.json (decisions), timing.json (speed), report.md (people).

scores.json is a pure function of the answers, so a sharded and an unsharded run of the same
evaluation give identical files; timings live apart in timing.json because they never repeat.
A benchmark whose answers thought (docs/reasoning.md) has a `reasoning` entry there
(ReasoningCounts, the one definition: sweep.json, the live status and the exports carry it too).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from shardeval import plugins
from shardeval.store.liveness import clock
from shardeval.results.metrics import ERROR, MISSING, OK, MetricValue
from shardeval.numbers import fmt, percent
from shardeval.results.quoting import md_text
from shardeval.results.gate_report import gate_report_lines

if TYPE_CHECKING:
    from shardeval.store.discover import Run
    from shardeval.results.merge import BenchmarkMerge, Cells, MergeResult, ReasoningTally


def counts(b: BenchmarkMerge) -> dict[str, Any]:
    status, error_kind = b.cells.status, b.cells.error_kind
    n_missing, n_errors = status.count(MISSING), status.count(ERROR)
    n_records = len(status) - n_missing
    return {
        "n_problems": b.cells.n_problems,
        "repeats": b.cells.repeats,
        "n_expected": len(status),
        "n_records": n_records,
        "n_ok": status.count(OK),
        "n_missing": n_missing,
        "n_errors": n_errors,
        "error_rate": n_errors / n_records if n_records else 0.0,
        "error_kinds": {kind: n for kind, code in sorted(b.cells.kinds.items()) if (n := error_kind.count(code + 1))},
        "n_duplicates": b.cells.n_duplicates,
        "n_conflicts": b.cells.n_conflicts,
        "n_superseded_errors": b.cells.n_superseded_errors,
        "n_refused": b.cells.refused.total(),  # records in a shard's file that are not its own (another run, shard, benchmark)
    }


class ReasoningTokens(msgspec.Struct, kw_only=True):
    """How many tokens the answers thought: over the ok answers that counted them (`n`), with who
    counted (`from`: "usage", the server's own count, or "stream", the client's one per chunk)."""

    n: int
    mean: float
    p50: float
    p90: float
    max: int
    from_: dict[str, int] = msgspec.field(name="from")  # {"usage": …, "stream": …}


class ReasoningCounts(msgspec.Struct, kw_only=True):
    """A benchmark's answers as a reasoning model gave them (docs/reasoning.md): scores.json's
    `reasoning` entry of each benchmark, sweep.json's of each (model, benchmark) cell, the live
    status's of each benchmark. Absent where no standing ok answer has thinking, thinking
    tokens or an outcome, so the files of other runs are what they were.

    Every count is of the ok answers (`n_answered`, the denominator): `truncated_reasoning` were
    cut off while thinking (scored 0), `truncated` cut off after the answer began (scored as they
    stand), `with_reasoning` carry thinking that is not blank. `reasoning_tokens` is None when no
    answer counted its thinking tokens."""

    n_answered: int
    truncated_reasoning: int
    truncated: int
    with_reasoning: int
    reasoning_tokens: ReasoningTokens | None = None

    @property
    def truncated_reasoning_rate(self) -> float:
        return self.truncated_reasoning / self.n_answered if self.n_answered else 0.0

    @property
    def truncated_rate(self) -> float:
        return self.truncated / self.n_answered if self.n_answered else 0.0

    def describe(self) -> str:
        """One line, as report.md, sweep.md and `shardeval status` say it: `truncated while
        thinking: 37 of 200 (18.5 %); cut off after answering: 4; 190 of 200 with thinking;
        thinking tokens mean 812, p50 640, p90 1900, max 8192 (usage 150, stream 40)`."""
        n = self.n_answered
        parts = [
            f"truncated while thinking: {self.truncated_reasoning} of {n} ({percent(self.truncated_reasoning_rate, 1, ' ')})",
            f"cut off after answering: {self.truncated}",
            f"{self.with_reasoning} of {n} with thinking",
        ]
        t = self.reasoning_tokens
        if t is None:
            parts.append("thinking tokens not counted")
        else:
            sources = ", ".join(f"{k} {v}" for k, v in t.from_.items() if v)
            parts.append(
                f"thinking tokens mean {t.mean:.0f}, p50 {t.p50:.0f}, p90 {t.p90:.0f}, max {t.max}" + (f" ({sources})" if sources else "")
            )
        return "; ".join(parts)


def reasoning_summary(tally: ReasoningTally, n_answered: int) -> ReasoningCounts | None:
    """The ReasoningCounts of a scan's tally over `n_answered` ok answers (None: nothing to count)."""
    if not tally.n:
        return None
    tokens = tally.sorted_tokens()
    stats = None
    if tokens:
        stats = ReasoningTokens(
            n=len(tokens),
            mean=sum(tokens) / len(tokens),
            p50=float(percentile(tokens, 0.5) or 0.0),
            p90=float(percentile(tokens, 0.9) or 0.0),
            max=tokens[-1],
            from_={"usage": tally.from_usage, "stream": tally.from_stream},
        )
    return ReasoningCounts(
        n_answered=n_answered,
        truncated_reasoning=tally.truncated_reasoning,
        truncated=tally.truncated,
        with_reasoning=tally.with_reasoning,
        reasoning_tokens=stats,
    )


def reasoning_counts(b: BenchmarkMerge) -> ReasoningCounts | None:
    """A merged benchmark's ReasoningCounts (None: no answer of it thought or was cut off)."""
    return reasoning_summary(b.cells.reasoning, b.cells.status.count(OK))


def scores_document(result: MergeResult) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    for b in result.benchmarks:
        entry = {
            **counts(b),
            "partial": result.partial,
            "complete": result.complete,
            "errors_as_wrong": result.errors_as_wrong,
            "metrics": b.metrics,
        }
        if b.metric_problems:
            entry["metric_problems"] = b.metric_problems
        if (reasoning := reasoning_counts(b)) is not None:  # absent for a model that does not think
            entry["reasoning"] = reasoning
        if result.run.mixed_served:
            entry["mixed_models"] = result.run.mixed_served  # merged with --allow-mixed-models
        doc[b.manifest.name] = entry
    return doc


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default), on pre-sorted values."""
    if not sorted_values:
        return None
    pos = (len(sorted_values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


DISTRIBUTION_QUANTILES = [i / 100 for i in range(100)] + [0.995, 0.999, 1.0]


def timing(b: BenchmarkMerge) -> dict[str, Any]:
    """Pooled over every standing ok record: percentiles of all of them, never averaged ones.

    Answers from the response cache (`n_cached`) are left out of the latency and TTFT
    percentiles (their latency is a cache lookup's) but count in `requests_per_s`. They live
    here, not in scores.json: a cached rerun's scores.json stays byte-identical to the original's.
    """
    if b.timing_cache is not None:
        return b.timing_cache
    cells = b.cells
    ttft, latency = _asked_timings(cells)
    # report.html's distributions come from the same sorted columns: sorted once, never kept
    b.distributions = {
        name: [percentile(values, q) for q in DISTRIBUTION_QUANTILES] if values else []
        for name, values in (("latency_s", latency), ("ttft_s", ttft))
    }
    n_cached = sum(1 for s, c in zip(cells.status, cells.cached) if s == OK and c)
    span = _wall_span(cells)
    tokens = sum(t for t, s in zip(cells.tokens, cells.status) if s == OK)
    qs = {"p50": 0.5, "p90": 0.9, "p99": 0.99}
    b.timing_cache = {
        "n": len(latency),
        "n_cached": n_cached,
        "ttft_s": {k: percentile(ttft, q) for k, q in qs.items()},
        "latency_s": {k: percentile(latency, q) for k, q in qs.items()},
        "completion_tokens": tokens,
        "wall_span_s": span,
        "completion_tokens_per_s": tokens / span if span else None,
        "requests_per_s": (len(latency) + n_cached) / span if span else None,
    }
    return b.timing_cache


def _asked_timings(cells: Cells) -> tuple[list[float], list[float]]:
    """The TTFTs and latencies of the ok answers a model gave (not the cache), each sorted, the
    ones not measured (NaN) left out."""
    asked = [s == OK and not c for s, c in zip(cells.status, cells.cached)]
    ttft, latency = (sorted(v for v, a in zip(col, asked) if a and v == v) for col in (cells.ttft, cells.latency))
    return ttft, latency


def _wall_span(cells: Cells) -> float | None:
    """Seconds from the first request's start to the last one's end (None: no timings)."""
    first = min((v for v in cells.start if v == v), default=None)
    last = max((s + l for s, l in zip(cells.start, cells.latency) if s == s and l == l), default=None)
    return last - first if first is not None and last is not None else None


def timing_document(result: MergeResult) -> dict[str, Any]:
    return {b.manifest.name: timing(b) for b in result.benchmarks}


P_FLOOR = 0.0001


def fmt_p(p: float | None) -> str:
    """A p-value as people read it, in every output (text, Markdown, HTML): 4 decimals, or
    `<0.0001` below that (p exactly 0 included), never a bare 0.0000."""
    return f"<{P_FLOOR}" if p is not None and p == p and p < P_FLOOR else fmt(p)


def _interval(entry: dict[str, Any]) -> str:
    return f"[{fmt(entry['ci_low'])}, {fmt(entry['ci_high'])}]" if entry.get("ci_low") is not None else "—"


def _metric_rows(metrics: dict[str, MetricValue], confidence: float) -> list[str]:
    rows = [f"| metric | value | {percent(confidence)} interval | stderr | method | n |", "|---|---|---|---|---|---|"]
    for name, m in metrics.items():
        rows.append(
            f"| {md_text(name)} | {fmt(m.value)} | {_interval({'ci_low': m.ci_low, 'ci_high': m.ci_high})} | {fmt(m.stderr)} | {md_text(m.ci_method)} | {m.n} |"
        )
    return rows


def rerun_how(run: Run, shards: list[int]) -> str:
    """The launching orchestrator's way (asked through the rerun_hint hook), then the general one."""
    hints = [hint for hint in plugins.hooks().rerun_hint(run_dir=run.root, shards=shards) if hint]
    sweep = run.shards[0].manifest.sweep if run.shards else None
    select = f"--sweep-services {sweep.service} " if sweep is not None and sweep.service else ""
    where = f" -o {os.path.dirname(os.path.normpath(run.root))}" if select else ""
    return ", or ".join([*hints, f"`shardeval run CONFIG {select}--shard I/{run.total_shards}{where}` for each (they resume)"])


def run_notes(result: MergeResult) -> list[str]:
    """What a reader must know about the run before its numbers (Markdown; report.md and
    report.html both list them)."""
    run = result.run
    q = md_text  # paths and names are quoted as text: a `<` or a line break in one is not markup
    lines = []
    if run.running():
        lines.append(f"still running: {', '.join(q(s.path) for s in run.running())} (merge again when they finish)")
    for shard in run.lost():
        assert shard.lost is not None
        lines.append(
            f"**LOST**: {q(shard.path)} (shard {shard.manifest.shard_idx}) says running, but {shard.lost.why} "
            f"(last sign of life {clock(shard.lost.since)}): rerun it, it resumes"
        )
    if run.missing_shards():
        lines.append(f"never started or not found: shard(s) {','.join(map(str, run.missing_shards()))}")
    if rerun := result.rerun_shards():
        lines.append(f"to complete the run, rerun shard(s) {','.join(map(str, rerun))}: {rerun_how(run, rerun)}")
    for idx, paths in run.duplicated_shards().items():
        lines.append(f"shard {idx} appears in {len(paths)} directories ({', '.join(map(q, paths))}): deduplicated")
    lines += [f"ignored {q(orphan)}: results without a manifest.json beside them" for orphan in run.orphans]
    if result.errors_as_wrong:
        lines.append("errors are scored as wrong answers (--errors-as-wrong)")
    lines += [f"**MIXED MODELS** (merged with --allow-mixed-models): {q(text)}" for text in run.mixed_served]
    return lines


def render_report(result: MergeResult, confidence: float = 0.95) -> str:
    run = result.run
    lines = [
        f"# shardeval merge: {md_text(run.root)}",
        "",
        f"Run {run.config_hash}: {len(run.present())}/{run.total_shards} shards present, {len(run.shards)} shard "
        f"director{'y' if len(run.shards) == 1 else 'ies'} read. **{result.verdict}**{result.verdict_line().removeprefix(result.verdict)}",
        *(f"- {note}" for note in run_notes(result)),
    ]
    if result.gate is not None:
        lines += gate_report_lines(result.gate)
    for b in result.benchmarks:
        lines += _benchmark_section(b, result.errors_as_wrong, confidence)
    lines += ["", *render_provenance(run)]
    return "\n".join(lines) + "\n"


def _benchmark_section(b: BenchmarkMerge, errors_as_wrong: bool, confidence: float) -> list[str]:
    """One benchmark's part of report.md: its metrics, then what its numbers stand on (coverage,
    errors, duplicates), how they spread, how fast they came, and what was left out."""
    c = counts(b)
    lines = [
        "",
        f"## {md_text(b.manifest.name)}",
        "",
        *_metric_rows(b.metrics, confidence),
        "",
        f"- coverage: {c['n_records']}/{c['n_expected']} (problem, repeat) pairs recorded "
        f"({c['n_problems']} problems x {c['repeats']} repeats); {c['n_missing']} missing",
    ]
    kinds = ", ".join(f"{k} {v}" for k, v in c["error_kinds"].items())
    treated = "scored as wrong" if errors_as_wrong else "excluded from scores"
    lines.append(f"- errors: {c['n_errors']} ({percent(c['error_rate'], 2)} of records), {treated}" + (f": {kinds}" if kinds else ""))
    if c["n_duplicates"] or c["n_superseded_errors"]:
        lines.append(
            f"- duplicates: {c['n_duplicates']} extra ok record(s) ignored ({c['n_conflicts']} with a "
            f"different score); {c['n_superseded_errors']} error(s) superseded by a later ok answer"
        )
    lines += _accuracy_spread(b.metrics["accuracy"].details if "accuracy" in b.metrics else {}, confidence)
    lines += _speed_lines(b, c["n_ok"])
    lines += _left_out_lines(b.cells)
    lines += [f"- {problem}" for problem in b.metric_problems]
    return lines


def _accuracy_spread(acc: dict[str, Any], confidence: float) -> list[str]:
    """Accuracy per category (a table) and its variance between and within problems."""
    lines: list[str] = []
    if per_cluster := acc.get("per_cluster"):
        rows = [
            f"| {md_text(name)} | {fmt(e.get('value'))} | {_interval(e)} | {e.get('ci_method', '—')} | {e.get('n', '')} |"
            for name, e in per_cluster.items()
        ]
        lines += ["", f"| category | accuracy | {percent(confidence)} interval | method | n |", "|---|---|---|---|---|", *rows, ""]
    if (split := acc.get("variance_split")) and split.get("se_if_repeats"):
        se = ", ".join(f"K={k}: {fmt(v)}" for k, v in split["se_if_repeats"].items())
        lines.append(
            f"- variance: between problems {fmt(split.get('sigma2_between'))}, within a problem "
            f"{fmt(split.get('sigma2_within'))}; accuracy's standard error with K repeats per problem: {se}"
        )
    return lines


def _speed_lines(b: BenchmarkMerge, n_ok: int) -> list[str]:
    """Latency and throughput, how much the answers thought, and how many came from the cache."""
    lines = []
    if (t := timing(b))["n"]:
        latency, ttft = ("/".join(fmt(v, 3) for v in t[key].values()) for key in ("latency_s", "ttft_s"))
        lines.append(
            f"- latency p50/p90/p99: {latency} s; TTFT p50/p90/p99: {ttft} s; "
            f"{fmt(t['completion_tokens_per_s'], 1)} completion tokens/s over {fmt(t['wall_span_s'], 1)} s"
        )
    if (reasoning := reasoning_counts(b)) is not None:
        lines.append(f"- reasoning: {reasoning.describe()}")
    if t["n_cached"]:
        lines.append(
            f"- response cache: {t['n_cached']} of {n_ok} ok record(s) answered from the cache, "
            "no model asked (left out of the latency figures)"
        )
    return lines


def _left_out_lines(cells: Cells) -> list[str]:
    """What the merge could not or would not read: unreadable lines, records not their shard's own."""
    lines = []
    if cells.unreadable:
        lines.append(f"- skipped {len(cells.unreadable)} unreadable line(s): {'; '.join(map(md_text, cells.unreadable[:3]))}")
    if cells.refused_files:
        more = " …" if len(cells.refused_files) > 5 else ""
        lines.append(
            f"- **refused {cells.refused.total()} record(s) that are not their shard's own** (copied in, or "
            f"written by another run): {'; '.join(map(md_text, cells.refused_files[:5]))}{more}"
        )
    return lines


# Facts expected to differ between shards (one per node): listed, never flagged.
PER_NODE = ("host",)


def provenance_facts(run: Run) -> list[tuple[str, dict[str, list[str]]]]:
    """(fact, {value: shard paths}) for every provenance fact of the run's manifests, in a fixed order."""
    facts: dict[str, dict[str, list[str]]] = {}

    def add(name: str, value: Any, shard: str) -> None:
        facts.setdefault(name, {}).setdefault("—" if value in (None, "") else str(value), []).append(shard)

    for shard in run.shards:
        m, p, path = shard.manifest, shard.manifest.provenance, shard.path
        add("shardeval", p.shardeval if p else m.version, path)
        add("build", p.build_id[:12] if p and p.build_id else None, path)
        for fact in ("python", "platform", "host"):
            add(fact, getattr(p, fact, None), path)
        by_version: dict[str, list[str]] = {}
        for name, version in sorted((p.plugins if p else {}).items()):
            by_version.setdefault(version, []).append(name)
        add("plugins", "; ".join(f"{v}: {', '.join(names)}" for v, names in sorted(by_version.items())), path)
        for name, served in sorted(m.served.items()):
            add(f"service {name}: weights", served.root if served.identity() is not None else f"unknown ({served.error})", path)
            add(f"service {name}: max_model_len", served.max_model_len, path)
            add(f"service {name}: server version", served.server_version, path)
        for b in m.benchmarks:
            add(f"{b.name}: data", b.dataset_fingerprint, path)
            add(f"{b.name}: prompts", b.prompt_fingerprint, path)
            add(f"{b.name}: scorer", b.scorer_fingerprint, path)
        for s in getattr(m.rescored, "scorers", ()):  # a shard written by `shardeval rescore`: its scores' scorer
            add(f"{s.benchmark}: rescored with", f"{s.scorer} from {s.plugin_version or s.plugin} (the run's scorer: {s.replaces})", path)
    return list(facts.items())


def render_provenance(run: Run) -> list[str]:
    """Each fact once for the run; one that varies between shards is flagged with who has what."""
    lines = ["## Provenance", "", "| | |", "|---|---|"]
    for name, values in provenance_facts(run):
        if len(values) == 1:
            shown = md_text(next(iter(values)))
        elif name in PER_NODE:
            shown = ", ".join(md_text(v) for v in sorted(values))
        else:
            shown = "**varies**: " + "; ".join(
                f"{md_text(v)} ({', '.join(md_text(p) for p in paths[:3])}{' …' if len(paths) > 3 else ''})" for v, paths in values.items()
            )
        lines.append(f"| {md_text(name)} | {shown} |")
    return lines
