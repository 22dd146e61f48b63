"""Merge at scale, on one core: its cost grows linearly with the records and with a sweep's models.

- One run: 1,000,000 and 10,000,000 records across 16 shards (DESIGN.md §10: 1M under 20 s). The
  time per record of the 10M merge is within 1.2x of the 1M merge's, and RSS grows by a bounded
  number of bytes per (problem, repeat) cell (~165 today: the per-cell arrays and one transient
  sorted timing column).
- A sweep (issue 30): 200 models x 20 benchmarks with 2 shards per model, against 20 models of the
  same shape: the 200-model sweep merges in under 60 s (every model's merged/ and report.html,
  then sweep.json, sweep.md, sweep.html) at a time per record within 1.2x of the 20-model one's.

The shards are written with the project's own writer (tests/shard_factory.py), trajectories
included. `shardeval merge` runs as a real process pinned to one CPU; wall time and peak RSS come
from the kernel for the merge alone (tests/peak_rss.py). Dirty pages are written back before each
merge (os.sync), so a merge does not pay for the writer's I/O: the 10M run is about 12 GB on disk
with its merge, and is removed at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import sys

import pytest

from peak_rss import run_measured
from shard_factory import make_shard, make_sweep

SHARDS = 16
REPEATS = 4
TARGET_S = 20.0  # the 1M merge
MAX_PER_RECORD_RATIO = 1.2
MAX_BYTES_PER_CELL = 185  # ~165 measured: the per-cell arrays and one transient sorted timing column, + slack
SWEEP_TARGET_S = 60.0


def build_run(root: str, n_problems: int) -> None:
    for i in range(SHARDS):
        make_shard(root, i, SHARDS, n_problems=n_problems, repeats=REPEATS)


def merge_on_one_core(root: str) -> tuple[float, float]:
    """(wall seconds, peak RSS MiB) of `shardeval merge ROOT` pinned to one CPU."""
    os.sync()
    done = run_measured([sys.executable, "-m", "shardeval", "merge", "--quiet", root], cpu=min(os.sched_getaffinity(0)))
    assert done.returncode == 0, done.stderr
    return done.wall_s, done.peak_mib


@pytest.mark.timeout(900)  # about 3 minutes here: 11M records written, then merged twice
def test_merge_ten_million_records_costs_what_one_million_does_per_record(tmp_path):
    small, large = str(tmp_path / "1M"), str(tmp_path / "10M")
    try:
        build_run(small, 250_000)  # 1,000,000 records
        build_run(large, 2_500_000)  # 10,000,000 records
        small_wall, small_rss = merge_on_one_core(small)
        large_wall, large_rss = merge_on_one_core(large)
        with open(os.path.join(large, "merged", "scores.json")) as f:
            scores = json.load(f)["arith"]
    finally:
        shutil.rmtree(large, ignore_errors=True)
    assert scores["n_records"] == 10_000_000 and scores["n_missing"] == 0 and scores["n_duplicates"] == 0
    ratio = (large_wall / 10_000_000) / (small_wall / 1_000_000)
    per_cell = (large_rss - small_rss) * 2**20 / (10_000_000 - 1_000_000)
    print(
        f"\nmerge, {SHARDS} shards, one core: 1,000,000 records {small_wall:.1f} s / {small_rss:.0f} MiB (target < "
        f"{TARGET_S:.0f} s); 10,000,000 records {large_wall:.1f} s / {large_rss:.0f} MiB; time per record 10M / 1M "
        f"{ratio:.2f} (bound {MAX_PER_RECORD_RATIO}); RSS growth {per_cell:.0f} bytes per (problem, repeat) cell "
        f"(bound {MAX_BYTES_PER_CELL})"
    )
    assert small_wall < TARGET_S
    assert ratio <= MAX_PER_RECORD_RATIO
    assert per_cell < MAX_BYTES_PER_CELL


def test_a_sweep_of_200_models_merges_at_the_cost_per_record_of_one_of_20(tmp_path):
    benchmarks, problems, shards = 20, 12, 2
    times = {}
    for models in (20, 200):
        root = str(tmp_path / f"sweep{models}")
        make_sweep(root, models, benchmarks, n_problems=problems, shards=shards)
        times[models] = merge_on_one_core(root)[0]
        with open(os.path.join(root, "merged", "sweep.json")) as f:
            doc = json.load(f)
        assert {c["service"] for c in doc["cells"]} == {f"step{1000 * (m + 1)}" for m in range(models)}
        assert len(doc["vs_baseline"]) == (models - 1) * benchmarks and not doc["missing"]
    per_record = {m: t / (m * benchmarks * problems) for m, t in times.items()}
    ratio = per_record[200] / per_record[20]
    print(
        f"\nsweep merge, {shards} shards per model, {benchmarks} benchmarks x {problems} problems, one core: "
        f"20 models {times[20]:.1f} s, 200 models {times[200]:.1f} s (target < {SWEEP_TARGET_S:.0f} s); time per record "
        f"200 / 20 models {ratio:.2f} (bound {MAX_PER_RECORD_RATIO})"
    )
    assert times[200] < SWEEP_TARGET_S
    assert ratio <= MAX_PER_RECORD_RATIO
