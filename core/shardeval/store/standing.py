"""Which record stands for a cell: the one rule that resume, merge and status all apply.

A *cell* is one (benchmark, problem, repeat). A results file may hold several lines for a cell:
errors that a rerun retried, or the same shard copied or run twice. The rule:

1. an `ok` record beats an error, whatever their order;
2. among `ok` records the first one read stands; later ones are duplicates. Resume never asks an
   `ok` cell again, so a later `ok` can only come from a second writer, and the first is the
   answer every earlier reader (a resume, an earlier merge) already relied on;
3. among errors only, the last one (the latest attempt) stands.

Readers keep one byte per cell (`MISSING`, `OK` or `ERROR`) and call `decide` for each record.

Before the rule, a record must be the shard's own (`Membership`): its benchmark, a problem and
repeat of the shard's share, the shard's index, and the run's identity (the `run` field, or for
records written before it existed, the per-request seed, which only this run's seed gives). A
results file copied in from another run or shard is refused line by line and counted, never
scored: `own_records` is the one way resume, merge and status read a shard's results.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from collections.abc import Iterator

from shardeval.store.records import RESULTS_FILE, BenchmarkManifest, Manifest, ReadReport, ResultRecord, run_id, scan_lines
from shardeval.store.seeds import request_seed
from shardeval.store.shards import shard_indices

__all__ = ["ERROR", "MISSING", "OK", "Membership", "count_cells", "decide", "own_records"]

MISSING, OK, ERROR = 0, 1, 2  # a cell's standing, one byte per cell (ScoreTable.status uses the same codes)

# What a record does to its cell.
TAKE = "take"  # it becomes the standing record (the cell was empty, or held only errors)
SUPERSEDE = "supersede"  # it is an ok record replacing a standing error
DUPLICATE = "duplicate"  # a second ok record: the first stands
IGNORE = "ignore"  # an error after an ok: the ok stands


def decide(current: int, ok: bool) -> str:
    """What a record with status ok/error does to a cell whose standing status is `current`."""
    if current == MISSING:
        return TAKE
    if current == OK:
        return DUPLICATE if ok else IGNORE
    return SUPERSEDE if ok else TAKE


# Why a record is not the shard's own (the keys of ReadReport.foreign).
OTHER_BENCHMARK = "another benchmark"
OTHER_RUN = "another run"
OTHER_SHARD = "another shard"
OUTSIDE = "problems or repeats outside this shard's share"


@dataclass
class Membership:
    """Which records of one benchmark's results file are this shard's own."""

    benchmark: str
    run: str  # run_id of the config hash
    shard: int
    n_problems: int
    repeats: int
    indices: range | list[int]  # the shard's problems, ascending
    run_seed: int | None = None  # to recognise this run's records that carry no `run` field

    def __post_init__(self) -> None:
        # a range answers `in` by arithmetic; a shuffled share is looked up in a set
        self._members = self.indices if isinstance(self.indices, range) else frozenset(self.indices)

    @classmethod
    def of(cls, manifest: Manifest, bm: BenchmarkManifest) -> Membership:
        seed = manifest.config.get("seed") if isinstance(manifest.config, dict) else None
        return cls(
            benchmark=bm.name,
            run=run_id(manifest.config_hash),
            shard=manifest.shard_idx,
            n_problems=bm.n_problems,
            repeats=bm.repeats,
            indices=shard_indices(bm.n_problems, manifest.shard_idx, manifest.total_shards, manifest.permutation_seed),
            run_seed=seed if isinstance(seed, int) and not isinstance(seed, bool) else None,
        )

    @property
    def n_cells(self) -> int:
        return len(self.indices) * self.repeats

    def refuse(self, record: ResultRecord) -> str | None:
        """Why `record` is not this shard's own (None: it is)."""
        in_share = 0 <= record.repeat < self.repeats and record.problem_idx in self._members
        if record.run == self.run and record.shard == self.shard and record.benchmark == self.benchmark and in_share:
            return None  # what nearly every record is (merge and resume call this per record): one test
        if record.benchmark != self.benchmark:
            return OTHER_BENCHMARK
        if record.run is not None and record.run != self.run:
            return OTHER_RUN
        if record.shard != self.shard:
            return OTHER_SHARD
        if not in_share:
            return OUTSIDE
        if (
            record.run is None
            and self.run_seed is not None
            and record.seed != request_seed(self.run_seed, record.benchmark, record.problem_id, record.repeat)
        ):
            return OTHER_RUN
        return None


def own_records(path: str, own: Membership, report: ReadReport) -> Iterator[tuple[int, int, ResultRecord]]:
    """(byte offset, length, record) for each readable line of a results file that is the shard's
    own; the rest are counted in `report` (undecodable lines, and foreign records by reason)."""
    for start, length, record in scan_lines(path, ResultRecord, report):
        why = own.refuse(record)
        if why is not None:
            report.foreign[why] = report.foreign.get(why, 0) + 1
            continue
        yield start, length, record


@dataclass(frozen=True)
class Cells:
    """One shard's results file as its reader sees it, by the rule above: the cells whose standing
    record is ok, those whose standing record is an error (by kind), and what the read skipped."""

    n_ok: int
    error_kinds: dict[str, int]
    report: ReadReport

    @property
    def n_error(self) -> int:
        return sum(self.error_kinds.values())


def read_cells(path: str, own: Membership) -> Cells:
    """The standing record of every cell of one shard's results file, counting only its own."""
    report = ReadReport(path)
    states = bytearray(own.n_problems * own.repeats)
    kind: dict[int, str] = {}
    for _, _, record in own_records(path, own, report):
        cell = record.problem_idx * own.repeats + record.repeat
        ok = record.status == "ok"
        if decide(states[cell], ok) in (TAKE, SUPERSEDE):
            states[cell] = OK if ok else ERROR
            if ok:
                kind.pop(cell, None)
            else:
                kind[cell] = record.error_kind or "unknown"
    counts: dict[str, int] = {}
    for k in kind.values():
        counts[k] = counts.get(k, 0) + 1
    return Cells(states.count(OK), dict(sorted(counts.items())), report)


def count_cells(path: str, own: Membership) -> tuple[int, int, ReadReport]:
    """(cells with an ok record, cells whose standing record is an error) of one shard's results
    file, counting only its own records, by the rule above."""
    cells = read_cells(path, own)
    return cells.n_ok, cells.n_error, cells.report


def standing_error_kinds(path: str, own: Membership) -> dict[str, int]:
    """The cells of one shard's results file whose standing record is an error, by kind (sorted)."""
    return read_cells(path, own).error_kinds


def nothing_to_ask(out_dir: str, manifest: Manifest) -> bool:
    """Whether every pair of the shard has an ok record on disk (by shardeval.store.standing's rule), so
    a rerun of a finished shard (a sweep relaunched for a new model) starts no server at all."""
    for bm in manifest.benchmarks:
        own = Membership.of(manifest, bm)
        n_ok, _, _ = count_cells(os.path.join(out_dir, bm.name, RESULTS_FILE), own)
        if n_ok < own.n_cells:
            return False
        bm.n_ok, bm.n_error = n_ok, 0
    return True
