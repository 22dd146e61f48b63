"""A watched sweep's update costs what it did at the 5th checkpoint at the 50th (issue 42: "adding
the 50th checkpoint to a watched sweep of 20 benchmarks costs no more than 1.2x adding the 5th
(merge and pages)").

One sweep of 50 checkpoints × 20 benchmarks, every checkpoint the same shape (PROBLEMS problems a
benchmark, 2 shards: the project's own writer, tests/shard_factory.py). Two IncrementalSweeps of
it, one holding 4 checkpoints and one 49, each add the next (drop it, add it again: the same
merge every time); the two are timed in turns, so a loaded machine slows both alike, and the
median of ROUNDS is compared. An update's work: the new checkpoint's merge and its merged/
(scores.json, report.md, report.html, the records), then Holm across the table and sweep.json,
sweep.md, sweep.html. What the one-shot merge of the 50 costs is printed beside it.
"""

from __future__ import annotations

import statistics
import time

import msgspec

from shard_factory import make_sweep
from shardeval.results.incremental import IncrementalSweep
from shardeval.results.sweep_merge import merge_any
from shardeval.store.discover import read_plan

CHECKPOINTS, BENCHMARKS, PROBLEMS, ROUNDS = 50, 20, 500, 7
MAX_RATIO = 1.2


def test_adding_the_50th_checkpoint_costs_what_adding_the_5th_does(tmp_path):
    root = str(tmp_path / "sweep")
    make_sweep(root, CHECKPOINTS, BENCHMARKS, n_problems=PROBLEMS, shards=2)
    plan = read_plan(root)
    assert plan is not None

    def first(k: int):
        return msgspec.structs.replace(plan, services=plan.services[:k])

    sweeps = {5: IncrementalSweep(root), CHECKPOINTS: IncrementalSweep(root)}
    times: dict[int, list[float]] = {k: [] for k in sweeps}
    cpu: dict[int, list[float]] = {k: [] for k in sweeps}
    for _ in range(ROUNDS):
        for k, sweep in sweeps.items():
            sweep.update(first(k - 1))  # the k-th dropped: the next update merges it again
            start, start_cpu = time.perf_counter(), time.process_time()
            merged = sweep.update(first(k))
            times[k].append(time.perf_counter() - start)
            cpu[k].append(time.process_time() - start_cpu)
            assert len(merged.sweep_document["vs_baseline"]) == (k - 1) * BENCHMARKS and merged.verdict == "COMPLETE"
    start = time.perf_counter()
    merge_any(root)
    one_shot = time.perf_counter() - start
    small, large = statistics.median(times[5]), statistics.median(times[CHECKPOINTS])
    small_cpu, large_cpu = statistics.median(cpu[5]), statistics.median(cpu[CHECKPOINTS])
    print(
        f"\nwatched sweep, {BENCHMARKS} benchmarks x {PROBLEMS} problems a checkpoint: adding the 5th {small * 1000:.0f} ms, "
        f"the {CHECKPOINTS}th {large * 1000:.0f} ms (median of {ROUNDS}), ratio {large / small:.2f} (bound {MAX_RATIO}); "
        f"the one-shot merge of all {CHECKPOINTS}: {one_shot * 1000:.0f} ms; CPU time of the updates: "
        f"{small_cpu * 1000:.0f} ms, {large_cpu * 1000:.0f} ms, ratio {large_cpu / small_cpu:.2f}"
    )
    assert large <= MAX_RATIO * small, (times, one_shot)
