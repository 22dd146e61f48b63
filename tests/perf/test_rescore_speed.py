"""Rescore speed: records per second of `shardeval rescore` against `shardeval merge` of the same
shard (one pass that decodes every record), both real processes pinned to one CPU.

Rescore does more per record than merge (decode, find the problem, score, encode, write), so it
is slower; the ratio shows by how much, and peak RSS shows that records stream (the shard is
never held in memory: RSS stays near merge's, whose per-cell arrays are small).
"""

from __future__ import annotations

import os
import sys

from peak_rss import run_measured
from shard_factory import make_shard
from shardeval import plugins
from shardeval.store.records import read_manifest, write_manifest

N_PROBLEMS, REPEATS = 100_000, 2  # 200,000 records
MIN_RATE_RATIO = 0.15  # rescore's records/s over merge's, at least
MAX_RSS_MIB = 300


def on_one_core(*args: str) -> tuple[float, float]:
    """(wall seconds, peak RSS MiB) of `shardeval ARGS` pinned to one CPU."""
    done = run_measured([sys.executable, "-m", "shardeval", *args], cpu=min(os.sched_getaffinity(0)))
    assert done.returncode == 0, done.stderr
    return done.wall_s, done.peak_mib


def test_rescore_rate_against_merge(tmp_path):
    run = str(tmp_path / "run")
    shard = make_shard(run, 0, 1, n_problems=N_PROBLEMS, repeats=REPEATS)
    manifest = read_manifest(shard)  # what a real run records: its config and the data's fingerprint
    manifest.config = {"seed": 0, "benchmarks": [{"name": "arith", "params": {"n": N_PROBLEMS}}]}
    arith = plugins.registry().get("benchmarks", "arith", "test").factory({"n": N_PROBLEMS})
    manifest.benchmarks[0].dataset_fingerprint = arith.fingerprint()
    write_manifest(shard, manifest)
    merge_s, merge_rss = on_one_core("merge", "--quiet", run, "-o", str(tmp_path / "merged"))
    rescore_s, rescore_rss = on_one_core("rescore", run, "-o", str(tmp_path / "new"))
    n = N_PROBLEMS * REPEATS
    with open(os.path.join(tmp_path, "new", "shard_0", "arith", "results.jsonl"), "rb") as f:
        assert sum(1 for _ in f) == n
    ratio = merge_s / rescore_s
    print(
        f"\nrescore of {n:,} records, one core: {rescore_s:.1f} s ({n / rescore_s:,.0f} records/s, peak RSS {rescore_rss:.0f} MiB); "
        f"merge of the same shard {merge_s:.1f} s ({n / merge_s:,.0f} records/s, {merge_rss:.0f} MiB); "
        f"rescore/merge rate ratio {ratio:.2f} (at least {MIN_RATE_RATIO})"
    )
    assert ratio >= MIN_RATE_RATIO
    assert rescore_rss < MAX_RSS_MIB
