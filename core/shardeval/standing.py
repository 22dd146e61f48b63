"""Which record stands for a cell: the one rule that resume, merge and status all apply.

A *cell* is one (benchmark, problem, repeat). A results file may hold several lines for a cell:
errors that a rerun retried, or the same shard copied or run twice. The rule:

1. an `ok` record beats an error, whatever their order;
2. among `ok` records the first one read stands; later ones are duplicates. Resume never asks an
   `ok` cell again, so a later `ok` can only come from a second writer, and the first is the
   answer every earlier reader (a resume, an earlier merge) already relied on;
3. among errors only, the last one (the latest attempt) stands.

Readers keep one byte per cell (`MISSING`, `OK` or `ERROR`) and call `decide` for each record.
"""

from __future__ import annotations

from shardeval.metrics import ERROR, MISSING, OK  # the cell codes ScoreTable uses too
from shardeval.msgspec_compat import msgspec
from shardeval.records import ReadReport, scan_lines

__all__ = ["ERROR", "MISSING", "OK", "decide", "count_cells"]

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


def cell_state(ok: bool) -> int:
    return OK if ok else ERROR


class CellKey(msgspec.Struct):
    """The least a reader needs to apply the rule: which cell, and whether the record is ok."""

    benchmark: str
    problem_idx: int
    repeat: int
    status: str


def count_cells(path: str, bench: str, lo: int, hi: int, repeats: int) -> tuple[int, int, ReadReport]:
    """(cells with an ok record, cells whose standing record is an error) among problems [lo, hi)
    of one results file, by the rule above."""
    report = ReadReport(path)
    states = bytearray(max(0, hi - lo) * repeats)
    for _, _, key in scan_lines(path, CellKey, report):
        p, r = key.problem_idx - lo, key.repeat
        if key.benchmark != bench or not (0 <= p < hi - lo and 0 <= r < repeats):
            continue
        cell = p * repeats + r
        ok = key.status == "ok"
        if decide(states[cell], ok) in (TAKE, SUPERSEDE):
            states[cell] = cell_state(ok)
    return states.count(OK), states.count(ERROR), report
