"""Build shard directories directly with the project's own writer, for merge tests and benchmarks.

The files are exactly what `shardeval run` writes (same Structs, same encoder), made without a
server so a test can shape them: overlapping, missing, torn, mixed or huge.
"""

from __future__ import annotations

import os
from typing import Callable, Iterable

from shardeval.store.records import (
    BenchmarkManifest,
    Manifest,
    ResultRecord,
    TrajectoryRecord,
    encode_line,
    run_id,
    write_manifest,
)
from shardeval.store.shards import shard_range

Score = Callable[[int, int], float | None]


def record(bench: str, p: int, r: int, shard: int, score: float | None = 1.0, status: str = "ok", **kw) -> ResultRecord:
    return ResultRecord(
        benchmark=bench, problem_idx=p, problem_id=f"{bench}-{p}", repeat=r, seed=p * 1000 + r,
        status=status, score=score if status == "ok" else None, error_kind=None if status == "ok" else "server_error",
        response=f"#### {p}", reference=str(p), latency_s=0.5 + (p % 7) / 10, ttft_s=0.1, started_at=1_700_000_000.0 + p,
        completion_tokens=32, shard=shard, **kw,
    )


def make_shard(
    root: str,
    idx: int,
    total: int,
    *,
    n_problems: int,
    repeats: int = 1,
    bench: str = "arith",
    score: Score = lambda p, r: float((p + r) % 3 != 0),
    config_hash: str = "sha256:test",
    fingerprint: str = "sha256:data",
    state: str = "complete",
    name: str | None = None,
    records: Iterable[ResultRecord] | None = None,
    metrics: list[str] | None = None,
    prompt: Callable[[int], str] = lambda p: f"q{p}",
) -> str:
    """Write shard idx/total of a run; records default to every (problem, repeat) of its range."""
    out = os.path.join(root, name or f"shard_{idx}")
    lo, hi = shard_range(n_problems, idx, total)
    os.makedirs(os.path.join(out, bench), exist_ok=True)
    write_manifest(
        out,
        Manifest(
            version="test", shard_idx=idx, total_shards=total, shard_source="test", config_hash=config_hash,
            benchmarks=[
                BenchmarkManifest(
                    name=bench, range=(lo, hi), repeats=repeats, n_problems=n_problems,
                    dataset_fingerprint=fingerprint, metrics=metrics or ["accuracy", "pass@k"],
                )
            ],
            state=state, started_at=1_700_000_000.0,
        ),
    )
    if records is None:
        run = run_id(config_hash)  # as a shard of this shardeval writes them
        records = (record(bench, p, r, idx, score(p, r), run=run) for p in range(lo, hi) for r in range(repeats))
    with open(os.path.join(out, bench, "results.jsonl"), "wb") as res, open(os.path.join(out, bench, "trajectories.jsonl"), "wb") as traj:
        for rec in records:
            res.write(encode_line(rec))
            traj.write(
                encode_line(
                    TrajectoryRecord(
                        benchmark=rec.benchmark, problem_idx=rec.problem_idx, problem_id=rec.problem_id,
                        repeat=rec.repeat, messages=[{"role": "user", "content": prompt(rec.problem_idx)},
                                                     {"role": "assistant", "content": rec.response}],
                        status=rec.status,
                    )
                )
            )
    return out
