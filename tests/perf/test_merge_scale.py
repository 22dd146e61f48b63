"""Merge at scale: 1,000,000 records across 16 shards, on one core (DESIGN.md §10: under 20 s).

The shards are written with the project's own writer (tests/shard_factory.py), trajectories
included. `shardeval merge` runs as a real process pinned to one CPU; wall time and peak RSS come
from the kernel, for the merge alone (tests/peak_rss.py). Memory is bounded by the per-cell arrays: a second merge over a
quarter of the cells shows how much RSS grows per cell, and that growth must stay within the
stated bound of MAX_BYTES_PER_CELL.
"""

from __future__ import annotations

import json
import os
import sys

from peak_rss import run_measured
from shard_factory import make_shard

SHARDS = 16
REPEATS = 4
TARGET_S = 20.0
MAX_BYTES_PER_CELL = 200  # ~70 B of per-cell arrays + one transient sorted timing column (~32 B) + slack


def build_run(root: str, n_problems: int) -> None:
    for i in range(SHARDS):
        make_shard(root, i, SHARDS, n_problems=n_problems, repeats=REPEATS)


def merge_on_one_core(root: str) -> tuple[float, float]:
    """(wall seconds, peak RSS MiB) of `shardeval merge ROOT` pinned to one CPU."""
    done = run_measured([sys.executable, "-m", "shardeval", "merge", "--quiet", root], cpu=min(os.sched_getaffinity(0)))
    assert done.returncode == 0, done.stderr
    return done.wall_s, done.peak_mib


def test_merge_a_million_records_on_one_core(tmp_path):
    small, large = str(tmp_path / "small"), str(tmp_path / "large")
    build_run(small, 62_500)  # 250,000 records
    build_run(large, 250_000)  # 1,000,000 records
    small_wall, small_rss = merge_on_one_core(small)
    large_wall, large_rss = merge_on_one_core(large)
    with open(os.path.join(large, "merged", "scores.json")) as f:
        scores = json.load(f)["arith"]
    assert scores["n_records"] == 1_000_000 and scores["n_missing"] == 0 and scores["n_duplicates"] == 0
    per_cell = (large_rss - small_rss) * 2**20 / (1_000_000 - 250_000)
    print(
        f"\nmerge, {SHARDS} shards, one core: 250,000 records {small_wall:.1f} s / {small_rss:.0f} MiB; "
        f"1,000,000 records {large_wall:.1f} s / {large_rss:.0f} MiB (target < {TARGET_S:.0f} s); "
        f"RSS growth {per_cell:.0f} bytes per (problem, repeat) cell (bound {MAX_BYTES_PER_CELL})"
    )
    assert large_wall < TARGET_S
    assert per_cell < MAX_BYTES_PER_CELL
