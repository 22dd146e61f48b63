"""The results files a live status follows, each read from where its last refresh stopped.

`status --serve` refreshes every few seconds while shards append. Reading every record file again
each time costs a 200-model × 20-benchmark sweep seconds; kept between refreshes, a `Followed`
reads only the lines appended since (scan_lines' `follow`) and keeps, per file, each cell's
standing by shardeval.store.standing's rule, and per benchmark what its running metric reads.
A file that was replaced or shrank (a shard rerun `--fresh`), a shard that left the run, or a
shard whose share changed starts its benchmark over from the start of every file, so the numbers
always equal a fresh read's. So does a run holding one shard twice: which copy's record stands
depends on the order the files are read in, so its metric is read whole each time (as merge does).
"""

from __future__ import annotations

import os
from array import array
from dataclasses import dataclass, field

from shardeval.results.merge import UNSET, ReasoningTally, put_scores
from shardeval.results.metrics import MetricValue
from shardeval.store.discover import Run, Shard
from shardeval.store.records import RESULTS_FILE, BenchmarkManifest, ReadReport, ResultRecord, scan_lines
from shardeval.store.standing import ERROR, OK, SUPERSEDE, TAKE, Membership, decide

NAN = float("nan")


class RunningTable:
    """What a benchmark's running metric reads (the columns merge.build_table takes from its Cells),
    kept between refreshes: 9 bytes a cell, not the merge's 67 (it keeps no record's location)."""

    def __init__(self, n_problems: int, repeats: int) -> None:
        self.n_problems, self.repeats = n_problems, repeats
        n = n_problems * repeats
        self.status, self.score = bytearray(n), array("d", [NAN]) * n
        self.cluster = array("i", [-1]) * n_problems
        self.clusters: dict[str, int] = {}
        self.extra: dict[str, array] = {}
        # the headline metric needs no labels nor ids
        self.predicted: array | None = None
        self.gold: array | None = None
        self.problem_ids: list[str] | None = None
        self.labels: dict[str, int] = {}
        self.changes = 0  # records taken so far: a metric computed at the same count still holds

    def take(self, cell: int, row: ResultRecord) -> None:
        """Make `row` the cell's standing record (merge.Cells.take, for these columns)."""
        ok = row.status == "ok"
        self.status[cell] = OK if ok else ERROR
        self.score[cell] = row.score if ok and row.score is not None else NAN
        if row.scores:  # most records have none: no call in the scan's loop for them
            put_scores(self.extra, self.n_problems * self.repeats, cell, row, ok)
        if row.cluster is not None:
            self.cluster[row.problem_idx] = self.clusters.setdefault(row.cluster, len(self.clusters))
        self.changes += 1


@dataclass
class FollowedFile:
    """One shard's results file of one benchmark: where its last read stopped and its cells' standing."""

    own: Membership
    report: ReadReport
    standing: bytearray  # MISSING | OK | ERROR per cell of the benchmark (only the shard's share is ever set)
    ok: int = 0
    errors: int = 0
    reasoning: ReasoningTally = field(default_factory=ReasoningTally)  # its standing ok records' thinking


@dataclass
class FollowedBenchmark:
    """Every shard's file of one benchmark of one run, and (when its metric is shown) their table."""

    files: dict[str, FollowedFile] = field(default_factory=dict)  # by shard directory
    table: RunningTable | None = None
    metric: tuple[int, tuple[MetricValue | None, list[str]]] | None = None  # (table.changes, what the metric said then)


class Followed:
    """Every results file a status has read, by run and benchmark; hold one between refreshes."""

    def __init__(self) -> None:
        self._benchmarks: dict[tuple[str, str], FollowedBenchmark] = {}
        self._seen: set[tuple[str, str]] = set()

    def counts(self, run: Run, shard: Shard, bm: BenchmarkManifest, table: bool) -> tuple[int, int, ReadReport, int]:
        """(cells with an ok record, cells whose standing record is an error, what the reads
        skipped, the shard's cells) of one shard's file, as standing.count_cells says, reading
        only what is new.
        With `table`, the benchmark's RunningTable (`table_of`) follows the file too."""
        key = (run.root, bm.name)
        self._seen.add(key)
        followed = self._benchmarks.get(key)
        if followed is None or not self._still_valid(followed, run):
            followed = self._benchmarks[key] = FollowedBenchmark()
        if table and followed.table is None:
            if followed.files:  # asked for the first time: what was read so far is read again into it
                followed = self._benchmarks[key] = FollowedBenchmark()
            followed.table = RunningTable(bm.n_problems, bm.repeats)
        own = Membership.of(shard.manifest, bm)
        f = followed.files.get(shard.abspath)
        if f is not None and f.own != own:  # the shard was rerun with another share: start the benchmark over
            return self._restart(key, run, shard, bm, table)
        if f is None:
            f = followed.files[shard.abspath] = FollowedFile(own, ReadReport(""), bytearray(bm.n_problems * bm.repeats))
        if not self._read(f, os.path.join(shard.abspath, bm.name, RESULTS_FILE), followed.table):
            return self._restart(key, run, shard, bm, table)
        return f.ok, f.errors, f.report, own.n_cells

    def reasoning_of(self, run: Run, name: str) -> tuple[ReasoningTally, int]:
        """The thinking of benchmark `name`'s standing ok records as `counts` read them, and how
        many ok records that is: over every shard of `run`, a shard held in two directories counted
        once (the copy with the most ok records, as the progress counts it)."""
        tally = ReasoningTally()
        best: dict[int, FollowedFile] = {}
        followed = self._benchmarks.get((run.root, name))
        files = followed.files if followed is not None else {}
        for shard in run.shards if files else ():
            f = files.get(shard.abspath)
            idx = shard.manifest.shard_idx
            if f is not None and (idx not in best or f.ok > best[idx].ok):
                best[idx] = f
        for f in best.values():
            tally.absorb(f.reasoning)
        return tally, sum(f.ok for f in best.values())

    def table_of(self, run: Run, name: str) -> FollowedBenchmark | None:
        """The benchmark `name` of `run` as `counts` left it (None when nothing was read for it)."""
        return self._benchmarks.get((run.root, name))

    def forget_unseen(self) -> None:
        """Drop what no `counts` asked for since the last call (a model or benchmark gone): call
        once per refresh, after it."""
        for key in set(self._benchmarks) - self._seen:
            del self._benchmarks[key]
        self._seen = set()

    @staticmethod
    def _still_valid(followed: FollowedBenchmark, run: Run) -> bool:
        """A shard that left the run took its records with it: the table must lose them too."""
        present = {s.abspath for s in run.shards}
        return all(path in present for path in followed.files)

    def _restart(
        self, key: tuple[str, str], run: Run, shard: Shard, bm: BenchmarkManifest, table: bool
    ) -> tuple[int, int, ReadReport, int]:
        """Read the benchmark again from the start of every file (the shards before this one in the
        refresh are read again when the next refresh asks; this one now)."""
        self._benchmarks[key] = FollowedBenchmark()
        for earlier in run.shards:
            if earlier is shard:
                break
            if any(b.name == bm.name for b in earlier.manifest.benchmarks):
                self.counts(run, earlier, bm, table)
        return self.counts(run, shard, bm, table)

    @staticmethod
    def _read(f: FollowedFile, path: str, table: RunningTable | None) -> bool:
        """Read what was appended to `path` into `f` (and `table`); False when the file was
        replaced or shrank, so everything read from it so far is void."""
        standing, repeats, refuse, foreign = f.standing, f.own.repeats, f.own.refuse, f.report.foreign
        changed = False
        tally = f.reasoning
        for _, _, row in scan_lines(path, ResultRecord, f.report, follow=True):
            why = refuse(row)
            if why is not None:
                foreign[why] = foreign.get(why, 0) + 1
                continue
            cell = row.problem_idx * repeats + row.repeat
            ok = row.status == "ok"
            action = decide(standing[cell], ok)
            if action == TAKE or action == SUPERSEDE:
                standing[cell] = OK if ok else ERROR
                changed = True
                if ok and (row.outcome is not UNSET or row.reasoning is not UNSET or row.reasoning_tokens is not UNSET):
                    tally.add(row, cell)  # an ok record stands for good: counted once
                if table is not None:
                    table.take(cell, row)
        if f.report.replaced:
            return False
        if changed:
            f.ok, f.errors = standing.count(OK), standing.count(ERROR)
        return True
