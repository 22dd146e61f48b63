"""`shardeval status`: how far each shard is, from manifests and record files, safe mid-run.

Reads only. Counts cells, not lines, by the same rule as resume and merge (shardeval.store.standing):
a cell retried three times is one record, and an error that a rerun fixed is not an error. It
decodes only each line's cell key and status, so it stays cheap on a shared filesystem while
shards are still appending.

`collect` gathers the numbers once (`RunStatus`, `SweepStatus`); the text (`render`) and the
live page's JSON (the pages plugin's status server) are both made from them, so they cannot disagree.
Both read through a `Followed` (shardeval.results.follow): the page keeps one between refreshes, so
each refresh reads only what the shards appended since the last.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass, field

import msgspec

from shardeval import plugins
from shardeval.errors import UsageError
from shardeval.numbers import percent
from shardeval.results.follow import Followed
from shardeval.results.merge import Cells, build_table, compute_metrics, scan_results
from shardeval.results.metrics import MetricOptions, MetricValue, ScoreTable, headline_metric
from shardeval.results.quoting import plain_text as q
from shardeval.results.report import ReasoningCounts, fmt, reasoning_summary
from shardeval.results.watch_status import watch_status
from shardeval.store.discover import MERGED_DIR, Run, load_shards, model_dirs, read_plan
from shardeval.store.liveness import clock
from shardeval.store.records import RESULTS_FILE, BenchmarkManifest, SweepPlan

NOTHING_YET = "no shard has started writing yet"


@dataclass
class ShardProgress:
    path: str
    idx: int
    state: str
    records: int  # cells with a standing record (ok or error)
    errors: int  # cells whose standing record is an error
    expected: int
    rate: float | None  # records per second since the shard started (this attempt)
    eta_s: float | None
    warnings: list[str] = field(default_factory=list)  # lines skipped or refused in its files
    note: str | None = None  # why a `lost` shard is lost, and since when
    by_benchmark: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # name -> (records, errors, expected)


@dataclass
class MissingShard:
    idx: int
    where: str  # "shard_3 (no manifest yet)" or "(no directory)"


@dataclass
class BenchmarkProgress:
    """One benchmark of one run: its cells over every shard, and (for the live page) its running
    metric as the metrics plugin computes it from the records so far."""

    name: str
    records: int
    errors: int
    expected: int
    rate: float | None  # the run's running shards together (they share their requests between benchmarks)
    eta_s: float | None
    metric: str | None = None  # "accuracy" (or "mean"); None when not computed
    value: MetricValue | None = None
    problems: list[str] = field(default_factory=list)  # a metric not installed or failed
    # the answers' thinking so far (ok records cut off while thinking or after answering, thinking
    # tokens), as scores.json will say it; absent (not in the live page's JSON) where none thought
    reasoning: ReasoningCounts | msgspec.UnsetType = msgspec.UNSET


@dataclass
class RunStatus:
    root: str
    shards: list[ShardProgress]
    missing: list[MissingShard]
    benchmarks: list[BenchmarkProgress]
    states: dict[str, int]  # shard state -> count, `not started` included
    done: int  # records, a shard copied twice counted once
    total: int
    mixed: list[str] = field(default_factory=list)  # served identities that differ between shards


@dataclass
class ModelStatus:
    name: str
    run: RunStatus | None  # None: no shard of this model has written yet


@dataclass
class SweepStatus:
    root: str
    services: list[str]
    shards: int
    baseline: str
    models: list[ModelStatus]
    done: int  # records of every model
    total: int  # cells of the whole sweep: a model not started counts as many as a started one holds
    rate: float | None = None  # records per second of every running shard of the sweep
    eta_s: float | None = None  # the whole sweep's: what is left at that rate
    not_started: int = 0  # models with no shard yet, counted in `total` at a started model's size


def shard_progress(
    run: Run, now: float | None = None, followed: Followed | None = None, tables: frozenset[str] = frozenset()
) -> list[ShardProgress]:
    """Each shard's cells; the benchmarks named in `tables` also fill their running tables."""
    now = time.time() if now is None else now
    followed = Followed() if followed is None else followed
    out = []
    for shard in run.shards:
        m = shard.manifest
        records = errors = expected = 0
        warnings = []
        by_benchmark = {}
        for b in m.benchmarks:
            n_ok, n_err, report, n_cells = followed.counts(run, shard, b, b.name in tables)
            records, errors = records + n_ok + n_err, errors + n_err
            expected += n_cells
            by_benchmark[b.name] = (n_ok + n_err, n_err, n_cells)
            if skipped := report.describe(os.path.join(shard.path, b.name, RESULTS_FILE)):
                warnings.append(f"warning: {skipped}")
        lost = shard.lost
        elapsed = (m.finished_at or now) - m.started_at if m.started_at else 0.0
        # a lost shard has no rate: it writes nothing now, and its last heartbeat can be up to a
        # period older than its last record (a shard killed within 5 s showed thousands of req/s)
        rate = records / elapsed if elapsed > 0 and records and lost is None else None
        eta = max(0, expected - records) / rate if rate and shard.state == "running" else None
        note = (
            (
                f"shard {m.shard_idx} lost since {clock(lost.since)} ({max(0.0, now - lost.since):.0f} s ago): "
                f"{lost.why}; rerun it, it resumes"
            )
            if lost is not None
            else None
        )
        if shard.state == "finished_with_errors":  # not complete: its reason counts the errors by kind
            note = f"shard {m.shard_idx} finished with errors: {m.reason}"
        out.append(ShardProgress(shard.path, m.shard_idx, shard.state, records, errors, expected, rate, eta, warnings, note, by_benchmark))
    return sorted(out, key=lambda p: (p.idx, p.path))


def run_status(run: Run, metrics: bool = False, followed: Followed | None = None) -> RunStatus:
    """The numbers of one run; with `metrics`, each benchmark's running accuracy too (the records
    so far as a merge would count them, then the metrics plugin: the interval is never computed here)."""
    followed = Followed() if followed is None else followed
    tables = frozenset(b.name for b in run.benchmarks if metrics and headline(b) is not None)
    progress = shard_progress(run, followed=followed, tables=tables)
    missing = _missing_shards(run)
    states = Counter(p.state for p in progress) + Counter({"not started": len(missing)})
    rate = sum(p.rate or 0.0 for p in progress if p.state == "running")
    benchmarks = [_benchmark_progress(run, b, progress, rate, followed) for b in run.benchmarks]
    if metrics:
        running_metrics(run, benchmarks, followed)
    total = sum(b.expected for b in benchmarks)
    return RunStatus(
        run.root,
        progress,
        missing,
        benchmarks,
        dict(sorted(states.items())),
        sum(b.records for b in benchmarks),
        total,
        list(run.mixed_served),
    )


def _missing_shards(run: Run) -> list[MissingShard]:
    """The shards with no manifest, each with where it would be (its folder may exist already:
    an orchestrator may have made it, SLURM for the task's log)."""
    missing = []
    for idx in run.missing_shards():
        folder = f"shard_{idx}"
        missing.append(
            MissingShard(idx, f"{folder} (no manifest yet)" if os.path.isdir(os.path.join(run.root, folder)) else "(no directory)")
        )
    return missing


def _benchmark_progress(
    run: Run, b: BenchmarkManifest, progress: list[ShardProgress], rate: float, followed: Followed
) -> BenchmarkProgress:
    """One benchmark's records and errors over the shards (a shard copied twice counts once), its
    ETA at the run's rate, and what its answers thought so far."""
    best: dict[int, tuple[int, int, int]] = {}
    for p in progress:
        got = p.by_benchmark.get(b.name, (0, 0, 0))
        best[p.idx] = max(best.get(p.idx, got), got)
    records, errors = sum(min(r, e) for r, _, e in best.values()), sum(err for _, err, _ in best.values())
    expected = b.n_problems * b.repeats
    eta = (expected - records) / rate if rate and records < expected else None
    found = BenchmarkProgress(b.name, records, errors, expected, rate or None, eta)
    if (reasoning := reasoning_summary(*followed.reasoning_of(run, b.name))) is not None:
        found.reasoning = reasoning
    return found


def headline(bm: BenchmarkManifest) -> str | None:
    """The metric the live page shows for a benchmark (None: e.g. perplexity, no accuracy to speak of)."""
    return headline_metric(bm.metrics, accuracy_from_pass_at_k=True)


def running_metrics(run: Run, benchmarks: list[BenchmarkProgress], followed: Followed) -> None:
    """Fill each benchmark's accuracy (or mean) with its interval from the records written so far,
    with merge's own pieces (so it equals what `shardeval merge` would say now). A benchmark whose
    records did not change since the last refresh keeps the value computed then."""
    copied = bool(run.duplicated_shards())  # which copy's record stands depends on the order read: read whole
    for bp, bm in zip(benchmarks, run.benchmarks):
        if (name := headline(bm)) is None:
            continue
        bp.metric = name
        state = followed.table_of(run, bm.name)
        if copied or state is None or state.table is None:
            cells = Cells(bm.n_problems, bm.repeats)
            scan_results(cells, bm.name, run.shards)
            value, bp.problems = _metric(build_table(bm.name, cells, False), name)
        elif state.metric is not None and state.metric[0] == state.table.changes:
            value, bp.problems = state.metric[1]
        else:
            value, bp.problems = _metric(build_table(bm.name, state.table, False), name)
            state.metric = (state.table.changes, (value, bp.problems))
        if value is not None:
            bp.value = msgspec.structs.replace(value, details={})  # per-category lists stay in the merge's report


def _metric(table: ScoreTable, name: str) -> tuple[MetricValue | None, list[str]]:
    """One metric of a table (built from merge's Cells or a RunningTable) and what went wrong computing it."""
    values, problems = compute_metrics(table, [name], MetricOptions())
    return values.get(name), problems


def sweep_status(root: str, plan: SweepPlan, metrics: bool = False, followed: Followed | None = None) -> SweepStatus:
    """Each model's ordinary run, in the plan's order; a model with no shard yet is `run=None`."""
    followed = Followed() if followed is None else followed
    models = []
    for name, run_root in model_dirs(root, plan):
        try:
            run = load_shards(run_root, allow_mixed_served=True)
        except UsageError:
            run = None  # no shard yet, or one that cannot be read yet: shown as not started; merge names what is wrong
        models.append(ModelStatus(name, run_status(run, metrics, followed) if run else None))
    started = [m.run for m in models if m.run is not None]
    done = sum(b.records for r in started for b in r.benchmarks)
    # every model of a sweep runs the same benchmarks, so one not started yet holds as many cells as
    # one that has (the largest, should a manifest be older); the bar and the ETA count the whole sweep
    per_model = max((sum(b.expected for b in r.benchmarks) for r in started), default=0)
    not_started = len(models) - len(started)
    total = sum(b.expected for r in started for b in r.benchmarks) + not_started * per_model
    rate = sum(p.rate or 0.0 for r in started for p in r.shards if p.state == "running") or None
    eta = (total - done) / rate if rate and done < total else None
    return SweepStatus(root, list(plan.services), plan.shards, plan.baseline, models, done, total, rate, eta, not_started)


def collect(root: str, metrics: bool = False, followed: Followed | None = None) -> RunStatus | SweepStatus:
    """What `status` shows: a run's or a sweep's numbers. Raises UsageError when `root` holds no
    run (yet). Pass the same `followed` to each refresh: it reads only what was appended since."""
    followed = Followed() if followed is None else followed
    try:
        if (plan := read_plan(root)) is not None:
            return sweep_status(root, plan, metrics, followed)
        return run_status(
            load_shards(root, allow_mixed_served=True), metrics, followed
        )  # progress is worth showing; merge refuses the mixture
    finally:
        followed.forget_unseen()


def _rate(rate: float | None) -> str:
    return fmt(rate or None, 1)


def _eta(eta: float | None) -> str:
    return "—" if eta is None else f"{fmt(eta, 0)}s"


STATE_WIDTH = len("finished_with_errors")


def render_status(s: RunStatus) -> str:
    """The text table; every name and path in it through plain_text (a newline in a directory's
    name cannot fake a row)."""
    lines = [f"{'shard':<8} {'state':<{STATE_WIDTH}} {'records':>17} {'errors':>7} {'req/s':>8} {'eta':>8}  directory"]
    for p in s.shards:
        lines.append(
            f"{p.idx:<8} {p.state:<{STATE_WIDTH}} {p.records:>8}/{p.expected:<8} {p.errors:>7} {_rate(p.rate):>8} {_eta(p.eta_s):>8}  {q(p.path)}"
        )
    lines += [f"{m.idx:<8} {'not started':<{STATE_WIDTH}} {'':>17} {'':>7} {'':>8} {'':>8}  {q(m.where)}" for m in s.missing]
    lines += [q(p.note) for p in s.shards if p.note]
    lines.append(f"total: {s.done}/{s.total} records ({percent(s.done / s.total, 1)})" if s.total else "total: nothing to do")
    lines += [f"{q(b.name)}: {b.reasoning.describe()}" for b in s.benchmarks if b.reasoning is not msgspec.UNSET]
    lines += [q(w) for p in s.shards for w in p.warnings]
    lines += [f"warning: shards served by different models: {q(text)} (merge refuses them)" for text in s.mixed]
    return "\n".join(lines)


def render_sweep_status(s: SweepStatus) -> str:
    """The grid of a sweep: per (model, benchmark) records, errors and ETA, each model's shard
    states, and what stands out (lost or missing shards), from each model's ordinary run."""
    lines = [
        f"sweep: {len(s.services)} models x {s.shards} shard(s), baseline {q(s.baseline)}",
        f"{'model':<16} {'benchmark':<16} {'records':>17} {'errors':>7} {'req/s':>8} {'eta':>8}  shards",
    ]
    notes: list[str] = []
    for m in s.models:
        if (run := m.run) is None:
            lines.append(f"{q(m.name):<16} {'—':<16} {'':>17} {'':>7} {'':>8} {'':>8}  not started")
            continue
        summary = ", ".join(f"{n} {state}" for state, n in run.states.items())
        for b in run.benchmarks:
            lines.append(
                f"{q(m.name):<16} {q(b.name):<16} {b.records:>8}/{b.expected:<8} {b.errors:>7} {_rate(b.rate):>8} "
                f"{_eta(b.eta_s):>8}  {summary}"
            )
        notes += [f"{q(m.name)} {q(b.name)}: {b.reasoning.describe()}" for b in run.benchmarks if b.reasoning is not msgspec.UNSET]
        notes += [q(f"{m.name}: {p.note}") for p in run.shards if p.note]
        notes += [q(f"{m.name}: shard {x.idx} not started") for x in run.missing]
        notes += [q(f"{m.name}: {w}") for p in run.shards for w in p.warnings]
    if s.total:
        counted = f", {s.not_started} model(s) not started counted at a started one's size" if s.not_started else ""
        lines.append(
            f"total: {s.done}/{s.total} records ({percent(s.done / s.total, 1)}) of the whole sweep{counted}; "
            f"{_rate(s.rate)} req/s, eta {_eta(s.eta_s)}"
        )
    else:
        lines.append("total: no model has started")
    return "\n".join(lines + notes)


def gate_status(s: SweepStatus) -> list[str]:
    """Each model's verdict against the baseline (`sweep.gate`, docs/decisions.md), from the last
    merge's sweep.json: final, and so unable to change, only once every cell of the model has an
    answer and that merge saw them all; a verdict on part of the cells is no decision (peeking at
    it would raise its error rates), so a running model's is said to be open."""
    try:
        with open(os.path.join(s.root, MERGED_DIR, "sweep.json"), "rb") as f:
            doc = msgspec.json.decode(f.read())
    except (OSError, msgspec.DecodeError):
        return []
    gate = doc.get("gate") if isinstance(doc, dict) else None
    if not isinstance(gate, dict):
        return []
    verdicts = {m.get("service"): m.get("verdict") for m in gate.get("models", []) if isinstance(m, dict)}
    cells = [c for c in doc.get("cells", []) if isinstance(c, dict)]
    merged_whole = {c.get("service") for c in cells} - {c.get("service") for c in cells if c.get("n_missing") != 0}
    lines = []
    for m in s.models:
        if m.name == s.baseline:
            continue
        done = m.run is not None and m.run.total > 0 and m.run.done == m.run.total
        if done and m.name in merged_whole and verdicts.get(m.name):
            lines.append(f"gate {q(m.name)}: {verdicts[m.name]} (final: every cell answered; it cannot change any more)")
        else:
            lines.append(f"gate {q(m.name)}: open (decided once every cell of it is answered and merged; docs/decisions.md)")
    return lines


def render(s: RunStatus | SweepStatus) -> str:
    return "\n".join([render_sweep_status(s), *gate_status(s)]) if isinstance(s, SweepStatus) else render_status(s)


def plugin_status(root: str) -> list[str]:
    """What plugins add (the SLURM plugin: each array task's state), and a watched sweep's watcher."""
    return [text for text in plugins.hooks().run_status(run_dir=root) if text] + watch_status(root)


def collect_or_nothing(
    root: str, extra: list[str], metrics: bool = False, followed: Followed | None = None
) -> RunStatus | SweepStatus | None:
    """collect(root), or None where no shard has written yet but plugins report on the run (e.g.
    every array task still pending): the text and the live page then both say NOTHING_YET."""
    try:
        return collect(root, metrics, followed)
    except UsageError:
        if extra and os.path.isdir(root):
            return None
        raise


def status(root: str) -> str:
    """The shards' progress (of a sweep: the models × benchmarks grid), then what plugins add."""
    extra = plugin_status(root)
    s = collect_or_nothing(root, extra)
    return "\n".join([NOTHING_YET if s is None else render(s), *extra])
