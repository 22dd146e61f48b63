"""`shardeval status`: how far each shard is, from manifests and record files, safe mid-run.

Reads only. Counts cells, not lines, by the same rule as resume and merge (shardeval.standing):
a cell retried three times is one record, and an error that a rerun fixed is not an error. It
decodes only each line's cell key and status, so it stays cheap on a shared filesystem while
shards are still appending.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from shardeval.discover import Run, load_run
from shardeval.liveness import clock
from shardeval.records import RESULTS_FILE
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


def shard_progress(run: Run, now: float | None = None) -> list[ShardProgress]:
    now = time.time() if now is None else now
    out = []
    for shard in run.shards:
        m = shard.manifest
        records = errors = expected = 0
        warnings = []
        for b in m.benchmarks:
            own = Membership.of(m, b)
            n_ok, n_err, report = count_cells(os.path.join(shard.abspath, b.name, RESULTS_FILE), own)
            records, errors = records + n_ok + n_err, errors + n_err
            expected += own.n_cells
            if skipped := report.describe(os.path.join(shard.path, b.name, RESULTS_FILE)):
                warnings.append(f"warning: {skipped}")
        lost = shard.lost
        end = m.finished_at or (lost.since if lost else now)
        elapsed = end - m.started_at if m.started_at else 0.0
        rate = records / elapsed if elapsed > 0 and records else None
        eta = max(0, expected - records) / rate if rate and shard.state == "running" else None
        note = (f"shard {m.shard_idx} lost since {clock(lost.since)} ({max(0.0, now - lost.since):.0f} s ago): "
                f"{lost.why}; rerun it, it resumes") if lost is not None else None
        out.append(ShardProgress(shard.path, m.shard_idx, shard.state, records, errors, expected, rate, eta, warnings, note))
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


def status(root: str) -> str:
    """The shards' progress, then what plugins add (the SLURM plugin: each array task's state)."""
    from shardeval import plugins
    from shardeval.errors import UsageError

    extra = [text for text in plugins.hooks().run_status(run_dir=root) if text]
    try:
        run = load_run(root, allow_mixed_served=True)  # progress is worth showing; merge refuses the mixture
    except UsageError:
        if extra and os.path.isdir(root):  # e.g. every array task still pending: no shard has written yet
            return "\n".join(["no shard has started writing yet", *extra])
        raise
    mixed = [f"warning: shards served by different models: {text} (merge refuses them)" for text in run.mixed_served]
    return "\n".join([render_status(run, shard_progress(run)), *mixed, *extra])
