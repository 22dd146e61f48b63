"""One refresh of `status --serve` on an MMLU-sized run, as a ratio against a plain merge_run.

A refresh is what the live page costs the machine every `--interval` seconds while it is open:
each shard's progress (shardeval.results.status) and each benchmark's running accuracy with its interval
(merge's scan, then the metrics plugin). 14,042 problems x 5 repeats over 8 shards, written with
the project's own writer; both are timed in this process, best of 3.
"""

from __future__ import annotations

import json
import time

from shard_factory import make_shard

SHARDS, PROBLEMS, REPEATS = 8, 14_042, 5
MAX_RATIO = 3.0  # the page reads the records twice (progress per shard, the merge's table): about 2


def best_of(n: int, f) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return min(times)


def test_one_refresh_costs_about_two_merge_scans(tmp_path):
    from shardeval.results.merge import merge_run
    from shardeval_pages.status_server import Snapshots

    root = str(tmp_path / "run")
    for i in range(SHARDS):
        make_shard(root, i, SHARDS, n_problems=PROBLEMS, repeats=REPEATS, bench="mmlu", metrics=["accuracy"])
    snapshots = Snapshots(root, interval=2.0)
    doc = json.loads(snapshots.compute())
    assert doc["error"] is None and doc["run"]["done"] == PROBLEMS * REPEATS
    merge_s = best_of(3, lambda: merge_run(root))
    refresh_s = best_of(3, snapshots.compute)
    snapshots.close()
    ratio = refresh_s / merge_s
    print(f"\nstatus --serve, one refresh of {PROBLEMS:,} x {REPEATS} records in {SHARDS} shards: {refresh_s:.2f} s; "
          f"merge_run {merge_s:.2f} s; ratio {ratio:.2f} (bound {MAX_RATIO:g})")
    assert ratio < MAX_RATIO
