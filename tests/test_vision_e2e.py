"""The built-in image benchmark end to end: 4 local shards, each starting a simulator that decodes
the images it is sent and knows the answers by their digests; the merged accuracy is the configured
one within its interval; a shard SIGKILLed mid-run and rerun loses and repeats nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import shardeval_cmd
from served import kill_shard_mid_run

pytest.importorskip("PIL")

N, REPEATS, ACCURACY = 120, 2, 0.7


def write_config(tmp: Path, *, shards: int, ttft_ms: int = 0, concurrency: int = 16) -> Path:
    cfg = tmp / f"vision{shards}.yaml"
    cfg.write_text(
        "services:\n"
        f"  model: {{type: sim, bench: vision_count, bench_params: {{n: {N}}}, accuracy: {ACCURACY}, ttft_ms: {ttft_ms}, itl_ms: 0}}\n"
        f"benchmarks:\n  - name: vision_count\n    params: {{n: {N}}}\n    repeats: {REPEATS}\n    max_concurrent: {concurrency}\n"
        f"cluster: {{type: local, shards: {shards}}}\n"
        f"output: {{dir: {tmp / 'run'}, progress_interval_s: 0}}\n"
    )
    return cfg


def records(shard: Path) -> list[dict]:
    path = shard / "vision_count" / "results.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def test_four_shards_give_the_configured_accuracy_within_its_interval(tmp_path):
    done = shardeval_cmd("run", str(write_config(tmp_path, shards=4)), timeout=300)
    assert done.returncode == 0, done.stderr
    scores = json.loads((tmp_path / "run" / "merged" / "scores.json").read_text())
    acc = scores["vision_count"]["metrics"]["accuracy"]
    low, high = acc["ci_low"], acc["ci_high"]
    assert low <= ACCURACY <= high, acc
    assert 0.5 < acc["value"] < 0.9
    rows = [r for i in range(4) for r in records(tmp_path / "run" / f"shard_{i}")]
    assert len(rows) == N * REPEATS and all(r["status"] == "ok" for r in rows)
    assert all(r["images"] and all(len(i["sha256"]) == 64 for i in r["images"]) for r in rows)
    assert {r["cluster"] for r in rows} >= {"count", "digits", "choice"}
    for i in range(4):  # each shard kept a thumbnail of every image it sent, once
        thumbs = [json.loads(x) for x in (tmp_path / "run" / f"shard_{i}" / "vision_count" / "images.jsonl").read_text().splitlines()]
        sent = {img["sha256"] for r in records(tmp_path / "run" / f"shard_{i}") for img in r["images"]}
        assert sorted(t["sha256"] for t in thumbs) == sorted(sent)


def test_a_shard_killed_mid_run_and_rerun_loses_nothing(tmp_path):
    cfg = write_config(tmp_path, shards=4, ttft_ms=40, concurrency=2)
    shard = tmp_path / "run" / "shard_1"
    kill_shard_mid_run(["run", str(cfg), "--shard", "1/4", "-o", str(shard)], shard / "vision_count" / "results.jsonl", 8)
    before = records(shard)
    share = N // 4 * REPEATS
    assert 8 <= len(before) < share, "the kill must land mid-run"
    rerun = shardeval_cmd("run", str(cfg), "--shard", "1/4", "-o", str(shard), timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    after = records(shard)
    assert after[: len(before)] == before  # what was on disk stays as it was
    cells = sorted((r["problem_idx"], r["repeat"]) for r in after)
    assert len(cells) == len(set(cells)) == share  # every pair once: none lost, none asked twice
    assert all(r["status"] == "ok" for r in after)
