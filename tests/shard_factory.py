"""Build shard directories directly with the project's own writer, for merge tests and benchmarks.

The files are exactly what `shardeval run` writes (same Structs, same encoder), made without a
server so a test can shape them: overlapping, missing, torn, mixed or huge.
"""

from __future__ import annotations

import os
from typing import Any
from collections.abc import Callable, Iterable

import msgspec

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
    """A record of problem p, repeat r; `kw` sets any other field (or replaces these defaults)."""
    fields = dict(
        benchmark=bench,
        problem_idx=p,
        problem_id=f"{bench}-{p}",
        repeat=r,
        seed=p * 1000 + r,
        status=status,
        score=score if status == "ok" else None,
        error_kind=None if status == "ok" else "server_error",
        response=f"#### {p}",
        reference=str(p),
        latency_s=0.5 + (p % 7) / 10,
        ttft_s=0.1,
        started_at=1_700_000_000.0 + p,
        completion_tokens=32,
        shard=shard,
    )
    return ResultRecord(**{**fields, **kw})


def assistant_turn(rec: ResultRecord) -> dict:
    """The trajectory's last message, as the runner writes it: the raw reply, with the record's
    thinking beside it when it has one (docs/reasoning.md)."""
    turn = {"role": "assistant", "content": rec.response}
    if rec.reasoning is not msgspec.UNSET:
        turn["reasoning"] = rec.reasoning
    return turn


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
            version="test",
            shard_idx=idx,
            total_shards=total,
            shard_source="test",
            config_hash=config_hash,
            benchmarks=[
                BenchmarkManifest(
                    name=bench,
                    range=(lo, hi),
                    repeats=repeats,
                    n_problems=n_problems,
                    dataset_fingerprint=fingerprint,
                    metrics=metrics or ["accuracy", "pass@k"],
                )
            ],
            state=state,
            started_at=1_700_000_000.0,
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
                        benchmark=rec.benchmark,
                        problem_idx=rec.problem_idx,
                        problem_id=rec.problem_id,
                        repeat=rec.repeat,
                        messages=[{"role": "user", "content": prompt(rec.problem_idx)}, assistant_turn(rec)],
                        status=rec.status,
                    )
                )
            )
    return out


def make_sweep(
    root: str,
    models: int,
    benchmarks: int,
    *,
    n_problems: int = 12,
    shards: int = 1,
    repeats: int = 1,
    score: Callable[[int, int, int, int], float] | None = None,
    fields: Callable[[int, int, int, int], dict[str, Any]] | None = None,
) -> list[str]:
    """A sweep as `shardeval run` of a sweep config writes it: <root>/sweep_plan.json and, for each
    model, <root>/<model>/shard_<i>/ holding every benchmark. `score(m, b, p, r)` is model m's
    score on problem p, repeat r of benchmark b; by default right when (p + m + b + r) % 3 != 0, so
    models differ and pairs have discordant cells. `fields(m, b, p, r)`: more fields of that record
    (a reasoning model's `reasoning`, `outcome`...)."""
    score = score or (lambda m, b, p, r: float((p + m + b + r) % 3 != 0))
    from shardeval.store.discover import PLAN_FILE
    from shardeval.store.records import ServedModel, SweepPlan, pretty_json

    names = [f"step{1000 * (m + 1)}" for m in range(models)]
    benches = [f"bench{b:02d}" for b in range(benchmarks)]
    plan = SweepPlan(services=names, baseline=names[0], shards=shards)
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, PLAN_FILE), "wb") as f:
        f.write(pretty_json(plan))
    for m, model in enumerate(names):
        config_hash = f"sha256:{m:016x}"
        run = run_id(config_hash)
        for idx in range(shards):
            out = os.path.join(root, model, f"shard_{idx}")
            lo, hi = shard_range(n_problems, idx, shards)
            manifests = []
            for b, bench in enumerate(benches):
                os.makedirs(os.path.join(out, bench), exist_ok=True)
                manifests.append(
                    BenchmarkManifest(
                        name=bench,
                        range=(lo, hi),
                        repeats=repeats,
                        n_problems=n_problems,
                        dataset_fingerprint=f"sha256:{bench}",
                        service=model,
                    )
                )
                with (
                    open(os.path.join(out, bench, "results.jsonl"), "wb") as res,
                    open(os.path.join(out, bench, "trajectories.jsonl"), "wb") as traj,
                ):
                    for p in range(lo, hi):
                        for r in range(repeats):
                            rec = record(bench, p, r, idx, score(m, b, p, r), run=run, **(fields(m, b, p, r) if fields else {}))
                            res.write(encode_line(rec))
                            traj.write(
                                encode_line(
                                    TrajectoryRecord(
                                        benchmark=bench,
                                        problem_idx=p,
                                        problem_id=rec.problem_id,
                                        repeat=r,
                                        messages=[{"role": "user", "content": f"q{p}"}, assistant_turn(rec)],
                                    )
                                )
                            )
            write_manifest(
                out,
                Manifest(
                    version="test",
                    shard_idx=idx,
                    total_shards=shards,
                    shard_source="test",
                    config_hash=config_hash,
                    benchmarks=manifests,
                    state="complete",
                    started_at=1_700_000_000.0,
                    served={model: ServedModel(model=model, root=f"/ckpt/{model}")},
                    sweep=SweepPlan(services=names, baseline=names[0], shards=shards, service=model),
                ),
            )
    return names
