"""`shardeval export RUN --to inspect -o DIR` (and `export: [{to: inspect, dir: DIR}]`): one Inspect
log per (model, benchmark), DIR/<benchmark>.eval for a run, DIR/<model>/<benchmark>.eval for a
sweep, that `inspect view --log-dir DIR` shows.

An Inspect task's benchmark gets the log its merge writes (merged/inspect/<task>.eval: Inspect's own
header, samples and metrics; shardeval_inspect.outputs); any other benchmark a log made from
shardeval's records (shardeval_inspect.records_log). Both carry ids made from the tracker key and
replace the file in one rename, so exporting again rewrites the same logs and never adds one.
"""

from __future__ import annotations

import os
from typing import Any

from shardeval.api.exporter import TrackerExport, TrackerRun
from shardeval.api.plugin import UsageError

from shardeval_inspect.export_config import InspectExportConfig
from shardeval_inspect.outputs import NotWritten, inspect_entries, model_base_url, served_model, task_log, write_log
from shardeval_inspect.records_log import records_log, stable_id


def log_path(config: InspectExportConfig, export: TrackerExport, run: TrackerRun) -> str:
    """DIR/<benchmark>.eval, or DIR/<model>/<benchmark>.eval in a sweep."""
    parts = [run.model.replace(os.sep, "_")] if export.sweep else []
    return os.path.join(config.dir, *parts, f"{run.benchmark}.eval")


def run_log(run: TrackerRun) -> tuple[Any, str]:
    """The log of one run and a note when an Inspect task's own log could not be made (then the
    records' log stands in for it)."""
    entry = inspect_entries(run.merge).get(run.benchmark)
    if entry is None:
        return records_log(run), ""
    bench = next(b for b in run.merge.benchmarks if b.manifest.name == run.benchmark)
    try:
        log = task_log(entry, bench, served_model(run.merge), run.merged_dir, model_base_url(run.merge, entry))
    except (NotWritten, UsageError) as exc:
        return records_log(run), f"inspect: {run.name}: the task's own log cannot be made here ({exc}); written from the records"
    log.eval.eval_id, log.eval.run_id = stable_id(run.key, "eval"), stable_id(run.key, "run")
    return log, ""


def export_inspect(config: InspectExportConfig, export: TrackerExport) -> list[str]:
    """Write every run's log; lines for the user: the notes, then where the logs are and how to view them."""
    lines = []
    for run in export.runs:
        log, note = run_log(run)
        write_log(log, log_path(config, export, run))
        if note:
            lines.append(note)
    n = len(export.runs)
    lines.append(f"inspect: {n} log{'s' if n != 1 else ''} in {config.dir} (view them: inspect view --log-dir {config.dir})")
    return lines
