"""A live status refresh reads only what shards appended since the last one (issue 30), and its
numbers still equal a fresh read's: counts, errors, warnings and the running accuracy, through
retries, a torn line finished later, foreign records, a file replaced by a rerun, and a shard
copied twice."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import msgspec

from shard_factory import make_shard, make_sweep, record
from shardeval.results.follow import Followed
from shardeval.results.status import collect
from shardeval.store.records import encode_line, run_id

BENCH, PROBLEMS, REPEATS = "arith", 20, 2
RUN = run_id("sha256:test")


def numbers(s) -> object:
    """What a refresh shows, less the rates and ETAs (they move with the clock)."""

    def strip(x):
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if k not in ("rate", "eta_s")}
        if isinstance(x, list):
            return [strip(v) for v in x]
        return x

    return strip(msgspec.to_builtins(s))


def results(root: Path, shard: int) -> Path:
    return root / f"shard_{shard}" / BENCH / "results.jsonl"


def append(root: Path, shard: int, *lines: bytes) -> None:
    with open(results(root, shard), "ab") as f:
        f.write(b"".join(lines))


def ok(p: int, r: int, shard: int, score: float = 1.0) -> bytes:
    return encode_line(record(BENCH, p, r, shard, score, run=RUN))


def error(p: int, r: int, shard: int) -> bytes:
    return encode_line(record(BENCH, p, r, shard, status="error", run=RUN))


def make_run(root: Path) -> None:
    """Two running shards, each with its first three problems written."""
    for idx in range(2):
        lo = idx * PROBLEMS // 2
        make_shard(
            str(root),
            idx,
            2,
            n_problems=PROBLEMS,
            repeats=REPEATS,
            bench=BENCH,
            state="running",
            records=[record(BENCH, p, r, idx, float(p % 2), run=RUN) for p in range(lo, lo + 3) for r in range(REPEATS)],
        )


def test_refreshes_read_what_was_appended_and_equal_a_fresh_read(tmp_path: Path) -> None:
    root = tmp_path / "run"
    make_run(root)
    followed = Followed()
    first = collect(str(root), metrics=True, followed=followed)
    assert numbers(first) == numbers(collect(str(root), metrics=True))
    assert first.done == 12 and first.benchmarks[0].value is not None

    steps = [
        (0, error(3, 0, 0), error(3, 1, 0), ok(4, 0, 0, 0.0)),  # errors count as records, not as right
        (0, ok(3, 0, 0), error(4, 0, 0)),  # a retry fixes an error; an error after an ok changes nothing
        (1, ok(13, 0, 1), ok(13, 0, 1, 0.0)),  # a second ok of a cell: the first stands
        (1, encode_line(record(BENCH, 14, 0, 1, run="other")), b"not json\n"),  # refused and skipped, and said so
        (1, ok(14, 1, 1)[:25]),  # a torn line: not counted yet...
        (1, ok(14, 1, 1)[25:]),  # ...and counted once its writer ends it
    ]
    for shard, *lines in steps:
        before = followed.table_of(followed_run(root), BENCH).files[str(root / f"shard_{shard}")].report.n_read
        append(root, shard, *lines)
        live, fresh = collect(str(root), metrics=True, followed=followed), collect(str(root), metrics=True)
        assert numbers(live) == numbers(fresh)
        after = followed.table_of(followed_run(root), BENCH).files[str(root / f"shard_{shard}")].report.n_read
        assert after - before <= len(lines)  # only the new lines were read, not the file again
    assert live.done == 12 + 3 + 1 + 1 and live.shards[1].warnings  # the refused record and the bad line are named
    assert live.benchmarks[0].errors == 1  # (3, 1): its retry never came


def followed_run(root: Path):
    from shardeval.store.discover import load_shards

    return load_shards(str(root), allow_mixed_served=True)


def test_a_replaced_file_or_a_copied_shard_is_read_again(tmp_path: Path) -> None:
    root = tmp_path / "run"
    make_run(root)
    followed = Followed()
    collect(str(root), metrics=True, followed=followed)
    append(root, 0, ok(3, 0, 0), ok(3, 1, 0))
    collect(str(root), metrics=True, followed=followed)

    # rerun --fresh: the file is moved aside and a new, shorter one written
    os.replace(results(root, 0), tmp_path / "aside.jsonl")
    results(root, 0).write_bytes(ok(0, 0, 0, 0.0))
    live = collect(str(root), metrics=True, followed=followed)
    assert numbers(live) == numbers(collect(str(root), metrics=True)) and live.shards[0].records == 1

    # the same shard copied in twice, answering a cell differently: the copy's answer comes first
    # in time but second in merge's order, so read in the order written it would stand
    shutil.copytree(root / "shard_1", root / "shard_1_copy")
    collect(str(root), metrics=True, followed=followed)
    (root / "shard_1_copy" / BENCH / "results.jsonl").open("ab").write(ok(15, 0, 1, 1.0) + ok(15, 1, 1, 1.0) + ok(16, 0, 1) + ok(16, 1, 1))
    collect(str(root), metrics=True, followed=followed)
    append(root, 1, ok(15, 0, 1, 0.0), ok(15, 1, 1, 0.0))
    live = collect(str(root), metrics=True, followed=followed)
    assert numbers(live) == numbers(collect(str(root), metrics=True))

    shutil.rmtree(root / "shard_1_copy")  # the copy leaves: its records (problem 16) leave with it
    live = collect(str(root), metrics=True, followed=followed)
    assert numbers(live) == numbers(collect(str(root), metrics=True))
    assert live.benchmarks[0].value.n == 5  # problems 0 (shard 0 rewritten), 10-12 and 15; 16 left with the copy


def test_a_sweep_refresh_reads_only_the_models_that_grew(tmp_path: Path) -> None:
    root = tmp_path / "sweep"
    names = make_sweep(str(root), 3, 2, n_problems=12, shards=1)
    path = root / names[1] / "shard_0" / "bench01" / "results.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:5]))
    followed = Followed()
    collect(str(root), metrics=True, followed=followed)
    path.open("ab").write(b"".join(lines[5:]))
    live = collect(str(root), metrics=True, followed=followed)
    assert numbers(live) == numbers(collect(str(root), metrics=True))
    assert live.done == live.total == 3 * 2 * 12
