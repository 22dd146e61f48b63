"""An export target loaded through SHARDEVAL_PLUGINS for tests/test_export_targets.py: it writes
what the core hands every exporter (the TrackerExport) to a JSON file, or fails as told, so the
core's side of the contract (what is exported, when, and what a failing target does) is tested
apart from any one tracker's library."""

from __future__ import annotations

import json
import os
from typing import Literal

from shardeval.api.exporter import ExportConfig, TrackerExport
from shardeval.api.plugin import ShardError, UsageError, hookimpl


class ProbeConfig(ExportConfig):
    file: str = ""  # where the description goes (appended: one JSON line per export); "": $PROBE_FILE
    fail: Literal["unreachable", "crash", "usage"] | None = None


def export_probe(config: ProbeConfig, export: TrackerExport) -> list[str]:
    if config.fail == "unreachable":
        raise ShardError("cannot reach the probe tracker at http://127.0.0.1:9; check --tracking-uri")
    if config.fail == "usage":
        raise UsageError("probe: bad value for file")
    if config.fail == "crash":
        raise RuntimeError("the probe library broke\nsecond line of its own traceback")
    runs = [
        {
            "key": r.key,
            "model": r.model,
            "benchmark": r.benchmark,
            "step": r.step,
            "status": r.status,
            "params": r.params,
            "tags": r.tags,
            "metrics": r.metrics,
            "vs_baseline": len(r.vs_baseline),
            "results_file": r.results_file(),
        }
        for r in export.runs
    ]
    with open(config.file or os.environ["PROBE_FILE"], "a", encoding="utf-8") as f:
        f.write(
            json.dumps(
                {
                    "root": export.root,
                    "sweep": export.sweep,
                    "baseline": export.baseline,
                    "verdict": export.verdict,
                    "notes": export.notes,
                    "runs": runs,
                }
            )
            + "\n"
        )
    return [f"probe: {len(runs)} runs"]


@hookimpl
def register_exporters(register):
    register("probe", export_probe, config=ProbeConfig)


@hookimpl
def export_flags(add):
    """A target's own command-line flag (issue 41, point 3): `export --to probe --probe-file F`."""
    add("probe", "--probe-file", "file", "where the description goes (default: $PROBE_FILE).", "FILE")
