"""The merged outputs of one run, written from its MergeResult: merged/<bench>/results.jsonl and
trajectories.jsonl in (problem, repeat) order, scores.json, timing.json, report.md, and report.html
drawn by the pages plugin. The merge computes (results.merge); this module writes."""

from __future__ import annotations

import os
from array import array

from shardeval import plugins
from shardeval.errors import os_error
from shardeval.results import pages
from shardeval.results.merge import BenchmarkMerge, MergeResult, read_winners, scan_trajectories
from shardeval.results.report import render_report, scores_document, timing_document
from shardeval.results.gate_report import merged_gate
from shardeval.store.atomic import atomic_write
from shardeval.store.discover import MERGED_DIR, Shard, refuse_inside_shard
from shardeval.store.records import RESULTS_FILE, TRAJECTORIES_FILE, pretty_json

REPORT_HTML = "report.html"


def write_merged(result: MergeResult, out_dir: str | None = None, confidence: float = 0.95) -> str:
    """Write merged/<bench>/{results,trajectories}.jsonl in (problem, repeat) order, scores.json,
    timing.json, report.md and report.html (drawn by the pages plugin; when it is not, a line in
    result.notices says why). Every file is replaced atomically; shard files are only read."""
    out_dir = out_dir or os.path.join(result.run.root, MERGED_DIR)
    refuse_inside_shard(out_dir, "-o")
    try:
        for b in result.benchmarks:
            bench_dir = os.path.join(out_dir, b.manifest.name)
            os.makedirs(bench_dir, exist_ok=True)
            scan_trajectories(b.cells, b.manifest.name, result.run.shards)
            _copy_winners(result.run.shards, b, RESULTS_FILE, b.cells.offset, b.cells.length, bench_dir)
            _copy_winners(result.run.shards, b, TRAJECTORIES_FILE, b.cells.traj_offset, b.cells.traj_length, bench_dir)
        atomic_write(os.path.join(out_dir, "scores.json"), pretty_json(scores_document(result)))
        atomic_write(os.path.join(out_dir, "timing.json"), pretty_json(timing_document(result)))
        result.gate = merged_gate(out_dir, [b.table for b in result.benchmarks], result.errors_as_wrong)
        atomic_write(os.path.join(out_dir, "report.md"), render_report(result, confidence).encode())
        page = os.path.join(out_dir, REPORT_HTML)
        if why := pages.report_page(result, page, confidence):
            result.notices.append(pages.not_written(page, why))
        for lines in plugins.hooks().write_merged_outputs(result=result, out_dir=out_dir):
            result.notices.extend(lines or [])
    except OSError as exc:  # a full disk, a read-only run directory: one line, no .tmp left behind
        raise os_error(exc, "write the merged results to", alternative="pass -o DIR to write them elsewhere") from None
    return out_dir


def _copy_winners(shards: list[Shard], b: BenchmarkMerge, name: str, offsets: array, lengths: array, bench_dir: str) -> None:
    lines = read_winners(shards, b.manifest.name, name, b.cells.src, offsets, lengths)
    atomic_write(os.path.join(bench_dir, name), (line for _, _, line in lines))
