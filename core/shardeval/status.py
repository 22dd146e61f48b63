"""`shardeval status`: how far each shard is, from manifests and record files, safe mid-run.

Reads only. Counts cells, not lines, by the same rule as resume and merge (shardeval.standing):
a cell retried three times is one record, and an error that a rerun fixed is not an error. It
decodes only each line's cell key and status, so it stays cheap on a shared filesystem while
shards are still appending.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass, field

from shardeval.discover import Run, load_run
from shardeval.liveness import clock
from shardeval.records import RESULTS_FILE, SweepPlan
from shardeval.standing import Membership, count_cells


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


def shard_progress(run: Run, now: float | None = None) -> list[ShardProgress]:
    now = time.time() if now is None else now
    out = []
    for shard in run.shards:
        m = shard.manifest
        records = errors = expected = 0
        warnings = []
        by_benchmark = {}
        for b in m.benchmarks:
            own = Membership.of(m, b)
            n_ok, n_err, report = count_cells(os.path.join(shard.abspath, b.name, RESULTS_FILE), own)
            records, errors = records + n_ok + n_err, errors + n_err
            expected += own.n_cells
            by_benchmark[b.name] = (n_ok + n_err, n_err, own.n_cells)
            if skipped := report.describe(os.path.join(shard.path, b.name, RESULTS_FILE)):
                warnings.append(f"warning: {skipped}")
        lost = shard.lost
        end = m.finished_at or (lost.since if lost else now)
        elapsed = end - m.started_at if m.started_at else 0.0
        rate = records / elapsed if elapsed > 0 and records else None
        eta = max(0, expected - records) / rate if rate and shard.state == "running" else None
        note = (f"shard {m.shard_idx} lost since {clock(lost.since)} ({max(0.0, now - lost.since):.0f} s ago): "
                f"{lost.why}; rerun it, it resumes") if lost is not None else None
        out.append(ShardProgress(shard.path, m.shard_idx, shard.state, records, errors, expected, rate, eta, warnings, note,
                                 by_benchmark))
    return sorted(out, key=lambda p: (p.idx, p.path))


def render_status(run: Run, progress: list[ShardProgress]) -> str:
    lines = [f"{'shard':<8} {'state':<12} {'records':>17} {'errors':>7} {'req/s':>8} {'eta':>8}  directory"]
    for p in progress:
        rate = f"{p.rate:.1f}" if p.rate else "—"
        eta = f"{p.eta_s:.0f}s" if p.eta_s is not None else "—"
        lines.append(f"{p.idx:<8} {p.state:<12} {p.records:>8}/{p.expected:<8} {p.errors:>7} {rate:>8} {eta:>8}  {p.path}")
    for idx in run.missing_shards():
        folder = f"shard_{idx}"  # an orchestrator may have made it already (SLURM: for the task's log)
        where = f"{folder} (no manifest yet)" if os.path.isdir(os.path.join(run.root, folder)) else "(no directory)"
        lines.append(f"{idx:<8} {'not started':<12} {'':>17} {'':>7} {'':>8} {'':>8}  {where}")
    lines += [p.note for p in progress if p.note]
    best: dict[int, int] = {}  # a shard copied twice counts once
    for p in progress:
        best[p.idx] = max(best.get(p.idx, 0), min(p.records, p.expected))
    done = sum(best.values())
    total = sum(b.n_problems * b.repeats for b in run.benchmarks)
    lines.append(f"total: {done}/{total} records ({done / total:.1%})" if total else "total: nothing to do")
    lines += [w for p in progress for w in p.warnings]
    return "\n".join(lines)


def render_sweep_status(root: str, plan: SweepPlan) -> str:
    """The grid of a sweep: per (model, benchmark) records, errors and ETA, each model's shard
    states, and what stands out (lost or missing shards), from each model's ordinary run."""
    from shardeval.errors import UsageError

    lines = [f"sweep: {len(plan.services)} models x {plan.shards} shard(s), baseline {plan.baseline}",
             f"{'model':<16} {'benchmark':<16} {'records':>17} {'errors':>7} {'req/s':>8} {'eta':>8}  shards"]
    done = total = 0
    notes: list[str] = []
    for name in plan.services:
        try:
            run = load_run(os.path.join(root, name), allow_mixed_served=True)
        except UsageError:
            lines.append(f"{name:<16} {'—':<16} {'':>17} {'':>7} {'':>8} {'':>8}  not started")
            continue
        progress = shard_progress(run)
        states = Counter(p.state for p in progress) + Counter({"not started": len(run.missing_shards())})
        summary = ", ".join(f"{n} {state}" for state, n in sorted(states.items()))
        rate = sum(p.rate or 0.0 for p in progress if p.state == "running")
        for b in run.benchmarks:
            best: dict[int, tuple[int, int, int]] = {}  # a shard copied twice counts once
            for p in progress:
                got = p.by_benchmark.get(b.name, (0, 0, 0))
                best[p.idx] = max(best.get(p.idx, got), got)
            records, errors = sum(min(r, e) for r, _, e in best.values()), sum(err for _, err, _ in best.values())
            expected = b.n_problems * b.repeats
            done, total = done + records, total + expected
            eta = f"{(expected - records) / rate:.0f}s" if rate and records < expected else "—"
            lines.append(f"{name:<16} {b.name:<16} {records:>8}/{expected:<8} {errors:>7} {f'{rate:.1f}' if rate else '—':>8} "
                         f"{eta:>8}  {summary}")
        notes += [f"{name}: {p.note}" for p in progress if p.note]
        notes += [f"{name}: shard {idx} not started" for idx in run.missing_shards()]
        notes += [f"{name}: {w}" for p in progress for w in p.warnings]
    lines.append(f"total: {done}/{total} records ({done / total:.1%}) of the models started" if total else "total: no model has started")
    return "\n".join(lines + notes)


def status(root: str) -> str:
    """The shards' progress (of a sweep: the models × benchmarks grid), then what plugins add
    (the SLURM plugin: each array task's state)."""
    from shardeval import plugins
    from shardeval.errors import UsageError
    from shardeval.sweep import read_plan

    extra = [text for text in plugins.hooks().run_status(run_dir=root) if text]
    if (plan := read_plan(root)) is not None:
        return "\n".join([render_sweep_status(root, plan), *extra])
    try:
        run = load_run(root, allow_mixed_served=True)  # progress is worth showing; merge refuses the mixture
    except UsageError:
        if extra and os.path.isdir(root):  # e.g. every array task still pending: no shard has written yet
            return "\n".join(["no shard has started writing yet", *extra])
        raise
    mixed = [f"warning: shards served by different models: {text} (merge refuses them)" for text in run.mixed_served]
    return "\n".join([render_status(run, shard_progress(run)), *mixed, *extra])
