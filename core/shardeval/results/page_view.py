"""What a plugin that draws pages reads of a merge, read-only (published as shardeval.api.pages).

The merge's internals (its per-cell arrays and status codes, the record lines' offsets, the live
status' follow state) stay internal: a page asks these views for a benchmark's counts, timing and
problem scores, a run's notes, provenance and standing records, or the live status document, each
computed by the functions that write report.md, scores.json, timing.json and `shardeval status`,
so a page cannot disagree with them.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any
from collections.abc import Iterator

import msgspec

from shardeval.results.follow import Followed
from shardeval.results.images import read_thumbnails
from shardeval.results.merge import BenchmarkMerge, MergeResult, read_winners
from shardeval.results.metrics import ERROR, MISSING, OK, MetricOptions
from shardeval.results.report import DISTRIBUTION_QUANTILES, ReasoningCounts, counts, provenance_facts, reasoning_counts, run_notes, timing
from shardeval.results.status import NOTHING_YET, SweepStatus, collect_or_nothing, plugin_status
from shardeval.store.records import RESULTS_FILE, TRAJECTORIES_FILE, ImageThumbnail, ResultRecord, TrajectoryRecord

if TYPE_CHECKING:
    from shardeval.store.discover import Run

# (a standing record, its conversation when one could be read) of one repeat
StandingRecord = tuple[ResultRecord, "TrajectoryRecord | None"]


class BenchmarkView:
    """One merged benchmark as a page reads it: the same numbers as scores.json and timing.json."""

    def __init__(self, merge: BenchmarkMerge) -> None:
        self._merge = merge

    def counts(self) -> dict[str, Any]:
        """scores.json's counts: problems, repeats, records, ok, missing, errors by kind, ..."""
        return counts(self._merge)

    def timing(self) -> dict[str, Any]:
        """timing.json's entry (latency and TTFT percentiles, throughput) of the asked answers."""
        return timing(self._merge)

    def distribution(self, field: str) -> list[tuple[float, float | None]]:
        """(quantile, seconds) of `latency_s` or `ttft_s` over the asked answers, as report.html's
        ECDF draws it; empty when none was asked."""
        timing(self._merge)  # computes the distributions once, beside the percentiles
        points = (self._merge.distributions or {}).get(field) or []
        return list(zip(DISTRIBUTION_QUANTILES, points))

    def reasoning(self) -> ReasoningCounts | None:
        """scores.json's `reasoning` (answers cut off while thinking, after answering, thinking
        tokens), None when no answer thought."""
        return reasoning_counts(self._merge)

    def problem_scores(self) -> Iterator[tuple[int, list[float], int]]:
        """(problem, its valid scores, its error count) for every problem with a standing record,
        one at a time: a million-cell run never holds them all."""
        cells = self._merge.cells
        repeats, status, score = cells.repeats, cells.status, cells.score
        for p in range(cells.n_problems):
            span = range(p * repeats, (p + 1) * repeats)
            scores = [score[i] for i in span if status[i] == OK and score[i] == score[i]]
            errors = sum(1 for i in span if status[i] == ERROR)
            if scores or errors:
                yield p, scores, errors


class ReportView:
    """A merged run as report.html reads it, beside the MergeResult the hook hands over."""

    def __init__(self, result: MergeResult) -> None:
        self._result = result

    def notes(self) -> list[str]:
        """What a reader must know before the numbers (Markdown), as report.md lists them."""
        return run_notes(self._result)

    def gate(self) -> dict[str, Any] | None:
        """merged/gate.json (`shardeval gate` against a baseline) as report.md shows it: with
        `current` False when it was decided on other answers than this merge's; None without one."""
        return self._result.gate

    def provenance(self) -> list[tuple[str, dict[str, list[str]]]]:
        """(fact, {value: the shards that say it}) as report.md's provenance table."""
        return provenance_facts(self._run)

    def shard_outcomes(self, merge: BenchmarkMerge) -> tuple[Counter[tuple[int, str]], Counter[tuple[int, str]]]:
        """({(shard, "ok"/"error"/"missing"): pairs}, {(shard, error kind): pairs}) of a benchmark's
        (problem, repeat) pairs, by the shard whose record stands."""
        cells = merge.cells
        shard_of = [s.manifest.shard_idx for s in self._run.shards]
        kinds = {code + 1: kind for kind, code in cells.kinds.items()}
        states: Counter[tuple[int, str]] = Counter()
        errors: Counter[tuple[int, str]] = Counter()
        for status, src, kind in zip(cells.status, cells.src, cells.error_kind):
            if status != MISSING:
                states[(shard_of[src], "ok" if status == OK else "error")] += 1
                if status == ERROR:
                    errors[(shard_of[src], kinds.get(kind, "unknown"))] += 1
        for idx, n in merge.missing_by_shard.items():
            if n:
                states[(idx, "missing")] += n
        return states, errors

    def standing_records(self, merge: BenchmarkMerge, problems: list[int]) -> dict[int, list[StandingRecord]]:
        """{problem: its repeats' standing records with their conversations} of `problems`, read
        back from the shards; a conversation that cannot be decoded is None, not the item left out."""
        c, shards, name = merge.cells, self._run.shards, merge.manifest.name
        wanted = [cell for p in problems for cell in range(p * c.repeats, (p + 1) * c.repeats)]
        trajectories = {}
        for cell, _, line in read_winners(shards, name, TRAJECTORIES_FILE, c.src, c.traj_offset, c.traj_length, wanted):
            try:
                trajectories[cell] = msgspec.json.decode(line, type=TrajectoryRecord)
            except msgspec.DecodeError:
                pass
        out: dict[int, list[StandingRecord]] = {}
        for cell, _, line in read_winners(shards, name, RESULTS_FILE, c.src, c.offset, c.length, wanted):
            out.setdefault(cell // c.repeats, []).append((msgspec.json.decode(line, type=ResultRecord), trajectories.get(cell)))
        return out

    def thumbnails(self, benchmark: str, digests: set[str]) -> dict[str, ImageThumbnail]:
        """{digest: its images.jsonl line} of the asked image digests, from the shards' images.jsonl."""
        return read_thumbnails(self._result, benchmark, digests)

    @property
    def _run(self) -> Run:
        return self._result.run


class LiveStatus:
    """The live status page's data of a run or sweep directory, read again on each call: it follows
    the record files between calls, so each reads only what the shards appended since."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.confidence = MetricOptions().confidence  # the level the page's intervals are drawn at
        self._followed = Followed()

    def fill(self, doc: dict[str, Any]) -> None:
        """Set doc's `extra` (what plugins report, e.g. each SLURM array task's state), then its `run`
        or `sweep` (the progress and running metrics), or `waiting` where no shard has written yet
        but plugins report. Raises UsageError (with `extra` already set) where there is no run yet."""
        doc["extra"] = plugin_status(self.root)
        s = collect_or_nothing(self.root, doc["extra"], metrics=True, followed=self._followed)
        if s is None:
            doc["waiting"] = NOTHING_YET
        else:
            doc["sweep" if isinstance(s, SweepStatus) else "run"] = s
