"""`shardeval merge`: shard directories → one deduplicated table per benchmark → numbers.

One pass over each shard's results, in (shard path, line) order, decides for every (problem,
repeat) cell which record stands, by the one rule of shardeval.store.standing: an `ok` record beats an
error, the first `ok` stands (later ones are duplicates, conflicts when their score differs), and
among errors only the latest stands. Per cell the merge keeps a few numbers and
the winner's byte offset, so memory is bounded by the number of cells, never by record size or
count of duplicates; the merged files are then written in (problem, repeat) order by reading each
winner back. Shard files are only read. The same inputs always give byte-identical outputs.
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from contextlib import ExitStack
from array import array
from functools import cached_property
from dataclasses import dataclass, field
from typing import Any, Protocol
from collections.abc import Iterable, Iterator

import msgspec

from shardeval import plugins
from shardeval.store.discover import Run, Shard, load_shards
from shardeval.results.metrics import ERROR, MISSING, OK, MetricOptions, MetricValue, ScoreTable
from shardeval.store.regular import open_regular
from shardeval.store.records import (
    RESULTS_FILE,
    TRAJECTORIES_FILE,
    BenchmarkManifest,
    ReadReport,
    ResultRecord,
    scan_lines,
)
from shardeval.store.shards import shard_indices
from shardeval.store.standing import DUPLICATE, OTHER_BENCHMARK, SUPERSEDE, TAKE, Membership, decide

NAN = float("nan")
UNSET = msgspec.UNSET


class ReasoningTally:
    """What the standing ok records of one benchmark say of their thinking (docs/reasoning.md),
    added as a scan takes them. An ok record stands for good once taken (shardeval.store.standing),
    so the counts only grow; a record with no reasoning fact (no `reasoning`, `reasoning_tokens`
    nor `outcome`: every record of a model that does not think) is never added, so it costs the
    scan three attribute tests. shardeval.results.report.reasoning_summary makes the
    ReasoningCounts of scores.json from it."""

    __slots__ = (
        "n",
        "truncated_reasoning",
        "truncated",
        "with_reasoning",
        "from_usage",
        "from_stream",
        "tokens",
        "outcomes",
        "cut_cells",
        "_sorted",
    )

    ANSWERED, TRUNCATED, TRUNCATED_REASONING = 0, 1, 2  # `outcomes`: each counted reply's, for a histogram by outcome

    def __init__(self) -> None:
        self.n = 0  # ok records with any reasoning fact
        self.truncated_reasoning = self.truncated = self.with_reasoning = self.from_usage = self.from_stream = 0
        self.tokens = array("i")  # the thinking tokens of each ok record that counted them
        self.outcomes = bytearray()  # beside `tokens`: that record's outcome (ANSWERED, TRUNCATED, TRUNCATED_REASONING)
        self.cut_cells = array("q")  # the cells whose standing answer was cut off while thinking (a page lists them)
        self._sorted: list[int] | None = None

    def add(self, row: ResultRecord, cell: int = -1) -> None:
        self.n += 1
        outcome = row.outcome
        kind = self.ANSWERED
        if outcome == "truncated_reasoning":
            self.truncated_reasoning += 1
            self.cut_cells.append(cell)
            kind = self.TRUNCATED_REASONING
        elif outcome == "truncated":
            self.truncated += 1
            kind = self.TRUNCATED
        thought = row.reasoning
        if thought is not UNSET and thought.strip():  # Qwen3's empty <think></think> in its non-thinking mode is no thinking
            self.with_reasoning += 1
        tokens = row.reasoning_tokens
        if tokens is not UNSET:
            self.tokens.append(min(max(tokens, 0), 2**31 - 1))  # a wild value is clamped, not fatal
            self.outcomes.append(kind)
            self._sorted = None
            source = row.reasoning_tokens_from
            if source == "usage":
                self.from_usage += 1
            elif source == "stream":
                self.from_stream += 1

    def absorb(self, other: ReasoningTally) -> None:
        """Add another tally's records (status: one benchmark's files, each shard counted once)."""
        self.n += other.n
        self.truncated_reasoning += other.truncated_reasoning
        self.truncated += other.truncated
        self.with_reasoning += other.with_reasoning
        self.from_usage += other.from_usage
        self.from_stream += other.from_stream
        self.tokens.extend(other.tokens)
        self.outcomes.extend(other.outcomes)
        self.cut_cells.extend(other.cut_cells)
        self._sorted = None

    def sorted_tokens(self) -> list[int]:
        """The thinking tokens in ascending order (sorted once, until the next record is added)."""
        if self._sorted is None:
            self._sorted = sorted(self.tokens)
        return self._sorted


@dataclass
class Cells:
    """Per-cell state of one benchmark while scanning: the winner's location and its numbers
    (flat arrays over problem * repeats + repeat, made in __post_init__)."""

    n_problems: int
    repeats: int
    keep_labels: bool = False
    keep_ids: bool = False
    extra: dict[str, array] = field(default_factory=dict)
    predicted: array | None = None
    gold: array | None = None
    labels: dict[str, int] = field(default_factory=dict)
    kinds: dict[str, int] = field(default_factory=dict)
    clusters: dict[str, int] = field(default_factory=dict)
    problem_ids: list[str] | None = None
    n_duplicates: int = 0
    n_conflicts: int = 0
    n_superseded_errors: int = 0
    refused: Counter[str] = field(default_factory=Counter)  # records not their shard's own, by reason
    refused_files: list[str] = field(default_factory=list)  # "shard_1/arith/results.jsonl: 20 of another run"
    unreadable: list[str] = field(default_factory=list)
    reasoning: ReasoningTally = field(default_factory=ReasoningTally)  # the standing ok records' thinking

    @property
    def n_foreign(self) -> int:
        """Records of another benchmark (in this benchmark's files)."""
        return self.refused[OTHER_BENCHMARK]

    def __post_init__(self) -> None:
        n = self.n_problems * self.repeats
        self.status, self.error_kind = bytearray(n), bytearray(n)  # MISSING | OK | ERROR; 1 + code in kinds
        self.cached = bytearray(n)  # 1: the standing record came from the response cache (shardeval.run.response_cache)
        self.score, self.ttft, self.latency, self.start = (array("d", [NAN]) * n for _ in range(4))
        self.src = array("i", [-1]) * n  # shard number (index into the sorted shard list) of the winner
        self.offset, self.traj_offset = array("q", [0]) * n, array("q", [-1]) * n
        self.length, self.traj_length, self.tokens = (array("i", [0]) * n for _ in range(3))
        self.cluster = array("i", [-1]) * self.n_problems
        if self.keep_labels:
            self.predicted = array("i", [-1]) * n
            self.gold = array("i", [-1]) * n
        if self.keep_ids:
            self.problem_ids = [""] * self.n_problems

    def code(self, table: dict[str, int], value: str) -> int:
        return table.setdefault(value, len(table))

    def take(self, cell: int, row: ResultRecord, src: int, offset: int, length: int) -> None:
        """Make `row` the cell's standing record."""
        ok = row.status == "ok"
        if ok and (row.outcome is not UNSET or row.reasoning is not UNSET or row.reasoning_tokens is not UNSET):
            self.reasoning.add(row, cell)  # a record of a model that does not think: three tests, no call
        self.status[cell] = OK if ok else ERROR
        self.src[cell], self.offset[cell], self.length[cell] = src, offset, length
        self.score[cell] = row.score if ok and row.score is not None else NAN
        self.error_kind[cell] = 0 if ok else 1 + self.code(self.kinds, row.error_kind or "unknown")
        self.ttft[cell] = row.ttft_s if row.ttft_s is not None else NAN
        self.latency[cell] = row.latency_s if row.latency_s is not None else NAN
        self.start[cell] = row.started_at or NAN
        self.cached[cell] = row.cached is True
        self.tokens[cell] = min(max(row.completion_tokens or 0, 0), 2**31 - 1)  # a wild value is clamped, not fatal
        if row.scores:  # most records have none: no call in the scan's loop for them
            put_scores(self.extra, self.n_problems * self.repeats, cell, row, ok)
        if row.cluster is not None:
            self.cluster[row.problem_idx] = self.code(self.clusters, row.cluster)
        if self.predicted is not None and self.gold is not None:  # kept only for the metrics that compare labels
            self._take_labels(self.predicted, self.gold, cell, row, ok)
        if self.problem_ids is not None:
            self.problem_ids[row.problem_idx] = row.problem_id

    def _take_labels(self, predicted: array, gold: array, cell: int, row: ResultRecord, ok: bool) -> None:
        """The cell's extracted and reference labels, as codes (-1: none; an error predicts none)."""
        predicted[cell] = self.code(self.labels, row.extracted) if ok and row.extracted is not None else -1
        gold[cell] = self.code(self.labels, row.reference) if row.reference is not None else -1


def scan_results(cells: Cells, bench: str, shards: list[Shard]) -> None:
    """Decide every cell's standing record from every shard's results file (shardeval.store.standing's rule)."""
    repeats, status = cells.repeats, cells.status
    for src, shard in enumerate(shards):
        path = os.path.join(shard.abspath, bench, RESULTS_FILE)
        report = ReadReport(path)
        bm = next(b for b in shard.manifest.benchmarks if b.name == bench)
        refuse, foreign = Membership.of(shard.manifest, bm).refuse, report.foreign
        for start, length, row in scan_lines(path, ResultRecord, report):  # own_records, inlined: the hot loop
            why = refuse(row)
            if why is not None:
                foreign[why] = foreign.get(why, 0) + 1
                continue
            cell = row.problem_idx * repeats + row.repeat
            action = decide(status[cell], row.status == "ok")
            if action == SUPERSEDE:
                cells.n_superseded_errors += 1
            if action == TAKE or action == SUPERSEDE:
                cells.take(cell, row, src, start, length)
            elif action == DUPLICATE:
                cells.n_duplicates += 1
                kept = cells.score[cell]
                new = row.score if row.score is not None else NAN
                if not (kept == new or (math.isnan(kept) and math.isnan(new))):
                    cells.n_conflicts += 1
        where = f"{shard.path}/{bench}/{RESULTS_FILE}"
        cells.refused.update(report.foreign)
        if report.foreign:
            cells.refused_files.append(f"{where}: " + ", ".join(f"{n} of {why}" for why, n in sorted(report.foreign.items())))
        cells.unreadable.extend(f"{where}: byte {offset}" for offset in report.bad_offsets)
        if report.torn_tail:
            cells.unreadable.append(f"{where}: torn last line")


class TrajectoryKey(msgspec.Struct):
    """Which cell a trajectory line belongs to. The merge only locates trajectories and copies the
    standing one's line verbatim, so it decodes no more: msgspec still parses every line whole
    (a line that is not JSON is skipped), but building each conversation's messages as objects
    cost more than the rest of the merge on long conversations."""

    benchmark: str
    problem_idx: int
    repeat: int
    status: str = "ok"


def scan_trajectories(cells: Cells, bench: str, shards: list[Shard]) -> None:
    """Find each standing record's trajectory: same shard, same cell, same status, last such line."""
    repeats, n_problems = cells.repeats, cells.n_problems
    status, src_of = cells.status, cells.src
    for src, shard in enumerate(shards):
        path = os.path.join(shard.abspath, bench, TRAJECTORIES_FILE)
        for start, length, key in scan_lines(path, TrajectoryKey, ReadReport(path)):
            p, r = key.problem_idx, key.repeat
            if key.benchmark != bench or not (0 <= p < n_problems and 0 <= r < repeats):
                continue
            cell = p * repeats + r
            if src_of[cell] == src and (status[cell] == OK) == (key.status == "ok"):
                cells.traj_offset[cell], cells.traj_length[cell] = start, length


@dataclass
class BenchmarkMerge:
    manifest: BenchmarkManifest
    cells: Cells
    table: ScoreTable
    missing_by_shard: dict[int, int]
    metrics: dict[str, MetricValue]
    metric_problems: list[str]
    timing_cache: dict[str, Any] | None = None  # report.timing() fills it: three outputs, one pass
    distributions: dict[str, list[float | None]] | None = None  # and this: latency/TTFT at report.DISTRIBUTION_QUANTILES


COMPLETE, PARTIAL, ERRORS = "COMPLETE", "PARTIAL", "ERRORS"


def verdict_text(verdict: str, n_cells: int, kinds: Counter[str] | dict[str, int], n_missing: int = 0) -> str:
    """`COMPLETE`, or the verdict and its counts: missing cells, then error cells by kind."""
    n_errors = sum(kinds.values())
    parts = []
    if n_missing:
        parts.append(f"{n_missing} of {n_cells} cells missing")
    if n_errors:
        by_kind = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0])))
        what = "end in errors" if n_errors != 1 else "ends in an error"
        parts.append(f"{n_errors} {what} ({by_kind})" if n_missing else f"{n_errors} of {n_cells} cells {what} ({by_kind})")
    return f"{verdict}: {'; '.join(parts)}" if parts else verdict


@dataclass
class MergeResult:
    run: Run
    benchmarks: list[BenchmarkMerge]
    errors_as_wrong: bool
    notices: list[str] = field(default_factory=list)  # what writing it left out (for stderr): no report.html
    gate: dict[str, Any] | None = None  # merged/gate.json found when it was written (results.gate_report.merged_gate)

    # partial and verdict once per merge (a merge does not change once made): every page and text
    # asks, and a watched sweep's update asks them of every checkpoint kept from earlier updates.
    @cached_property
    def partial(self) -> bool:
        return bool(self.run.missing_shards() or self.run.running() or self.run.lost()) or any(
            sum(b.missing_by_shard.values()) for b in self.benchmarks
        )

    @cached_property
    def _cell_counts(self) -> tuple[int, Counter[str], int]:
        """(cells, errors by kind, missing cells) over every benchmark: a pass over every cell, so
        counted once per merge (a watched sweep's verdict line asks it of every checkpoint kept)."""
        kinds: Counter[str] = Counter()
        for b in self.benchmarks:
            for kind, code in b.cells.kinds.items():
                if n := b.cells.error_kind.count(code + 1):
                    kinds[kind] += n
        cells = sum(len(b.cells.status) for b in self.benchmarks)
        return cells, kinds, sum(b.cells.status.count(MISSING) for b in self.benchmarks)

    def error_cells(self) -> tuple[int, Counter[str]]:
        """(cells, errors by kind): the standing records that are errors, over every benchmark."""
        cells, kinds, _ = self._cell_counts
        return cells, Counter(kinds)  # the caller's own: the counts stay as counted

    def missing_cells(self) -> int:
        """The cells without a standing record, over every benchmark."""
        return self._cell_counts[2]

    @cached_property
    def read_warnings(self) -> tuple[str, ...]:
        """`warnings(self)`, made once per merge (a watched sweep's update asks every checkpoint)."""
        return tuple(line for b in self.benchmarks for line in cell_warnings(b.cells))

    @cached_property
    def verdict(self) -> str:
        """COMPLETE only when every cell has a standing ok record (issue 24); PARTIAL while cells
        are missing (shards running, lost, stopped or never started); ERRORS when every cell
        has a record but some end in errors (`--errors-as-wrong` scores them, it does not make
        them answers)."""
        if self.partial:
            return PARTIAL
        return ERRORS if sum(self.error_cells()[1].values()) else COMPLETE

    @property
    def complete(self) -> bool:
        return self.verdict == COMPLETE

    def verdict_line(self) -> str:
        """The verdict with what keeps the run from COMPLETE, e.g. `ERRORS: 230 of 230 cells
        end in errors (230 client)`."""
        return verdict_text(self.verdict, *self.error_cells(), self.missing_cells())

    def rerun_shards(self) -> list[int]:
        """Shards with missing cells (a shard that never started included, a lost one too), to run
        again; not those still running."""
        need = {*self.run.missing_shards(), *(i for b in self.benchmarks for i, n in b.missing_by_shard.items() if n)}
        return sorted(need - {s.manifest.shard_idx for s in self.run.running()})


def missing_per_shard(cells: Cells, bm: BenchmarkManifest, total: int, shuffle_seed: int | None) -> dict[int, int]:
    """How many cells each shard still owes (from the shard math, so a never-started shard counts)."""
    out: dict[int, int] = {}
    status, repeats = cells.status, cells.repeats
    for idx in range(total):
        indices = shard_indices(bm.n_problems, idx, total, shuffle_seed)
        if isinstance(indices, range):
            out[idx] = status[indices.start * repeats : indices.stop * repeats].count(MISSING)
        else:
            out[idx] = sum(status[p * repeats + r] == MISSING for p in indices for r in range(repeats))
    return out


class TableColumns(Protocol):
    """The columns build_table reads: merge's Cells, or the live status's RunningTable
    (shardeval.results.follow), which keeps only these."""

    @property
    def n_problems(self) -> int: ...
    @property
    def repeats(self) -> int: ...
    @property
    def score(self) -> array[float]: ...
    @property
    def status(self) -> bytearray: ...
    @property
    def cluster(self) -> array[int]: ...
    @property
    def clusters(self) -> dict[str, int]: ...
    @property
    def extra(self) -> dict[str, array[float]]: ...
    @property
    def predicted(self) -> array[int] | None: ...
    @property
    def gold(self) -> array[int] | None: ...
    @property
    def labels(self) -> dict[str, int]: ...
    @property
    def problem_ids(self) -> list[str] | None: ...


def build_table(bench: str, cells: TableColumns, errors_as_wrong: bool) -> ScoreTable:
    score = cells.score
    if errors_as_wrong:
        score = array("d", score)
        for error in re.finditer(bytes([ERROR]), cells.status):  # finds the error cells at C speed
            score[error.start()] = 0.0
    return ScoreTable(
        benchmark=bench,
        n_problems=cells.n_problems,
        repeats=cells.repeats,
        score=score,
        status=cells.status,
        cluster=cells.cluster if cells.clusters else None,
        cluster_names=sorted(cells.clusters, key=cells.clusters.__getitem__),
        extra=cells.extra,
        predicted=cells.predicted,
        gold=cells.gold,
        labels=sorted(cells.labels, key=cells.labels.__getitem__),
        problem_ids=cells.problem_ids,
    )


def compute_metrics(table: ScoreTable, names: list[str], options: MetricOptions) -> tuple[dict[str, MetricValue], list[str]]:
    """Every metric the benchmark asks for; a metric that is not installed or fails is named, not fatal."""
    registry = plugins.registry()
    values: dict[str, MetricValue] = {}
    problems: list[str] = []
    for name in names:
        if (entry := registry.entries["metrics"].get(name)) is None:
            problems.append(f"metric {name!r} is not installed (`shardeval plugins` lists what is)")
            continue
        try:
            values.update(entry.factory(table, options))
        except Exception as exc:  # one broken metric must not hide the others
            problems.append(f"metric {name!r} failed: {type(exc).__name__}: {exc}")
    return values, problems


def merge_run(
    root: str,
    *,
    errors_as_wrong: bool = False,
    options: MetricOptions | None = None,
    keep_ids: bool = False,
    allow_mixed_models: bool = False,
) -> MergeResult:
    """Read a run's shards into deduplicated tables and compute their metrics (writes nothing).

    Shards whose endpoints served different weights are refused unless `allow_mixed_models`; then
    the result (and the report, and scores.json) says the run is mixed."""
    run = load_shards(root, allow_mixed_served=allow_mixed_models)
    options = options or MetricOptions()
    shuffle_seed = run.shards[0].manifest.permutation_seed
    merged = []
    for bm in run.benchmarks:
        cells = Cells(bm.n_problems, bm.repeats, keep_labels="classification" in bm.metrics, keep_ids=keep_ids)
        scan_results(cells, bm.name, run.shards)
        table = build_table(bm.name, cells, errors_as_wrong)
        metrics, problems = compute_metrics(table, bm.metrics, options)
        missing = missing_per_shard(cells, bm, run.total_shards, shuffle_seed)
        merged.append(BenchmarkMerge(bm, cells, table, missing, metrics, problems))
    return MergeResult(run=run, benchmarks=merged, errors_as_wrong=errors_as_wrong)


def warnings(result: MergeResult) -> list[str]:
    """What merge skipped or refused in the shards' files, one line per file (for stderr)."""
    return list(result.read_warnings)


def cell_warnings(cells: Cells, label: str = "", never: str = "counted") -> list[str]:
    """What a scan skipped or refused, one line per file: a file with many bad lines says so once."""
    refused = [f"{label}{where}: refused (not that shard's own records, never {never})" for where in cells.refused_files]
    unreadable = Counter(entry.rsplit(": ", 1)[0] for entry in cells.unreadable)
    return refused + [f"{label}{where}: {n} unreadable line(s) skipped" for where, n in unreadable.items()]


def read_winners(
    shards: list[Shard], bench: str, name: str, src_of: array, offsets: array, lengths: array, cells: Iterable[int] | None = None
) -> Iterator[tuple[int, int, bytes]]:
    """(cell, shard number, line) of each standing record's line in the shards' `bench`/`name`
    file (results or trajectories), for every cell or the given ones, in that order; each shard
    file is opened once and closed when the generator ends."""
    with ExitStack() as opened:
        files: dict[int, Any] = {}
        for cell in range(len(src_of)) if cells is None else cells:
            src, offset = src_of[cell], offsets[cell]
            if src < 0 or offset < 0:
                continue
            f = files.get(src)
            if f is None:
                f = files[src] = opened.enter_context(open_regular(os.path.join(shards[src].abspath, bench, name)))
            f.seek(offset)
            yield cell, src, f.read(lengths[cell])


def put_scores(extra: dict[str, array], cells: int, cell: int, row: ResultRecord, ok: bool) -> None:
    """A record's named scores (row.scores) into their columns of `cells` values each; a name
    seen first gets a column of NaN, and an error's scores are NaN (not a score of the model)."""
    for name, value in row.scores.items():
        column = extra.get(name)
        if column is None:
            column = extra[name] = array("d", [NAN]) * cells
        column[cell] = value if ok else NAN
