"""A reasoning model's run, built with tests/shard_factory.py: records whose thinking, token
counts and outcomes the page tests choose (the simulator does not think), and what its pages
must show, counted here from those records and not by the code under test."""

from __future__ import annotations

import math
import os

import msgspec

from shard_factory import make_shard, record
from shardeval.store.records import ResultRecord, run_id
from shardeval.store.shards import shard_range

BENCH = "think"
N, REPEATS, SHARDS = 12, 2, 2
BUDGET = 2048  # the reasoning tokens of a reply cut off while thinking
HOSTILE_THINKING = (
    '</details></div><script>window.pwned=1</script><img src=x onerror="window.pwned=2"> "dq" \'sq\' \x00nul \u202eevil\u202c'
)
LONG = 100_000  # characters of thinking of problem 9: cut on the page


def thinking_of(p: int, r: int) -> str:
    if p == 2:
        return f"{HOSTILE_THINKING} think {p}/{r}"
    if p == 9:
        return "long " + "x" * LONG + f" end {p}/{r}"
    return f"Let me think about problem {p}, repeat {r}: {p} + 0 = {p}."


def reasoning_records(
    bench: str = BENCH, config_hash: str = "sha256:reasoning", shard: int = 0, lo: int = 0, hi: int = N, shift: int = 0
) -> list[ResultRecord]:
    """Every (problem, repeat) of [lo, hi): thinking inline (even problems) or in a field (odd);
    repeat 0 of every 4th problem from 1 cut off while thinking, (6, 1) cut off after answering,
    (3, 1) an error that thought (counted nowhere), (0, 1) a reply without thinking; problems 2
    and 9 (hostile and long thinking) and the cut-off ones score 0. `shift` adds to every token
    count (a sweep's models think more or less)."""
    out = []
    for p in range(lo, hi):
        for r in range(REPEATS):
            base = record(bench, p, r, shard, run=run_id(config_hash))
            if (p, r) == (0, 1):
                out.append(msgspec.structs.replace(base, response=f"The answer is {p}", extracted=str(p)))
                continue
            thought = thinking_of(p, r)
            cut = p % 4 == 1 and r == 0
            answer = "" if cut else f"The answer is {p}"
            fields = dict(
                reasoning=thought,
                reasoning_tokens=BUDGET + shift if cut else 100 * p + r + shift,
                reasoning_tokens_from="usage" if p % 2 else "stream",
            )
            if p % 2 == 0:  # inline tags: the raw reply holds them, `answer` what was scored
                fields |= dict(response=f"<think>{thought}" + ("" if cut else f"</think>{answer}"), answer=answer)
            else:
                fields |= dict(response=answer) | ({"answer": ""} if cut else {})
            if cut:
                fields |= dict(outcome="truncated_reasoning", score=0.0, extracted=None, finish_reason="length")
            elif (p, r) == (6, 1):
                fields |= dict(outcome="truncated", finish_reason="length", extracted=str(p))
            else:
                fields |= dict(score=0.0 if p in (2, 9) else 1.0, extracted=str(p))
            if (p, r) == (3, 1):
                fields |= dict(status="error", score=None, error_kind="server_error", error="HTTP 500", extracted=None)
            out.append(msgspec.structs.replace(base, **fields))
    return out


def reasoning_run(root: str, bench: str = BENCH, config_hash: str = "sha256:reasoning") -> list[ResultRecord]:
    """SHARDS shards of the run at `root`; returns every record written."""
    written = []
    for idx in range(SHARDS):
        lo, hi = shard_range(N, idx, SHARDS)
        records = reasoning_records(bench, config_hash, idx, lo, hi)
        make_shard(root, idx, SHARDS, n_problems=N, repeats=REPEATS, bench=bench, config_hash=config_hash, records=records)
        written += records
    return written


def expected_reasoning(records: list[ResultRecord]) -> dict:
    """scores.json's `reasoning` object of these records (one per cell), counted from them."""
    ok = [r for r in records if r.status == "ok"]
    tokens = sorted(r.reasoning_tokens for r in ok if r.reasoning_tokens is not msgspec.UNSET)

    def pct(q: float) -> float:
        pos = (len(tokens) - 1) * q
        lo, hi = math.floor(pos), min(math.floor(pos) + 1, len(tokens) - 1)
        return tokens[lo] + (tokens[hi] - tokens[lo]) * (pos - lo)

    return {
        "n_answered": len(ok),
        "truncated_reasoning": sum(r.outcome == "truncated_reasoning" for r in ok),
        "truncated": sum(r.outcome == "truncated" for r in ok),
        "with_reasoning": sum(r.reasoning is not msgspec.UNSET for r in ok),
        "reasoning_tokens": {
            "n": len(tokens),
            "mean": sum(tokens) / len(tokens),
            "p50": pct(0.5),
            "p90": pct(0.9),
            "max": tokens[-1],
            "from": {
                "usage": sum(r.reasoning_tokens_from == "usage" for r in ok if r.reasoning_tokens is not msgspec.UNSET),
                "stream": sum(r.reasoning_tokens_from == "stream" for r in ok if r.reasoning_tokens is not msgspec.UNSET),
            },
        },
    }


def reasoning_sweep(root: str, models: list[str], shards: int = 1) -> dict[str, list[ResultRecord]]:
    """A sweep as `shardeval run` writes it (as shard_factory.make_sweep), of BENCH and "plain"
    (no thinking in any model): the first model never thinks, each later one thinks 300 tokens
    more per reply than the one before. Returns each model's records of BENCH."""
    from shardeval.store.discover import PLAN_FILE
    from shardeval.store.records import (
        BenchmarkManifest,
        Manifest,
        ServedModel,
        SweepPlan,
        TrajectoryRecord,
        encode_line,
        pretty_json,
        write_manifest,
    )

    plan = SweepPlan(services=models, baseline=models[0], shards=shards)
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, PLAN_FILE), "wb") as f:
        f.write(pretty_json(plan))
    written: dict[str, list[ResultRecord]] = {}
    for m, model in enumerate(models):
        config_hash = f"sha256:{m:016x}"
        for idx in range(shards):
            out = os.path.join(root, model, f"shard_{idx}")
            lo, hi = shard_range(N, idx, shards)
            manifests = []
            for bench in (BENCH, "plain"):
                os.makedirs(os.path.join(out, bench), exist_ok=True)
                manifests.append(
                    BenchmarkManifest(
                        name=bench, range=(lo, hi), repeats=REPEATS, n_problems=N, dataset_fingerprint=f"sha256:{bench}", service=model
                    )
                )
                if bench == BENCH and m:
                    records = reasoning_records(bench, config_hash, idx, lo, hi, shift=300 * m)
                    written.setdefault(model, []).extend(records)
                else:
                    records = [
                        record(bench, p, r, idx, float((p + r + m) % 3 != 0), run=run_id(config_hash))
                        for p in range(lo, hi)
                        for r in range(REPEATS)
                    ]
                with (
                    open(os.path.join(out, bench, "results.jsonl"), "wb") as res,
                    open(os.path.join(out, bench, "trajectories.jsonl"), "wb") as traj,
                ):
                    for rec in records:
                        res.write(encode_line(rec))
                        traj.write(
                            encode_line(
                                TrajectoryRecord(
                                    benchmark=bench,
                                    problem_idx=rec.problem_idx,
                                    problem_id=rec.problem_id,
                                    repeat=rec.repeat,
                                    status=rec.status,
                                    messages=[
                                        {"role": "user", "content": f"q{rec.problem_idx}"},
                                        {"role": "assistant", "content": rec.response},
                                    ],
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
                    sweep=SweepPlan(services=models, baseline=models[0], shards=shards, service=model),
                ),
            )
    return written
