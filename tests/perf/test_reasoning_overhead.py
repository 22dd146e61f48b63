"""A reasoning model's long replies (issue 39): the client keeps up with a raw client, and a shard's
memory per reply in flight stays bounded.

Throughput. shardeval's whole shard path (tests/perf/test_client_overhead.py's `shardeval_client`:
config, runner, client, splitting, scoring, records and trajectories on disk) against that file's
raw aiohttp client (json per chunk, content and thinking kept), both in this process, alternating
round by round against one simulator process per case (itl 0, so the client is the bottleneck):

  short  arith replies of 32 tokens without thinking, 1,500 requests at concurrency 256 (the case
         of test_client_overhead.py);
  long   replies that first think 20k tokens on average, heavy-tailed (`--reasoning-tokens 13333
         --reasoning-tokens-tail 3`: Pareto(3) x N has mean 1.5 N, capped at 100 N, so max_tokens
         2,000,000 never cuts one), in vLLM's `reasoning` field; 32 requests, all in flight.

The raw client sends the very bodies shardeval sent: the simulator's `--log-requests` is read back
after shardeval's first round, and the raw round's logged bodies are checked to be the same
multiset; both read the same thinking, character for character. Reported as the ratio of request
rates (best round of each); the long ratio must not fall more than 0.05 below the short one.

Memory. The own peak RSS (tests/peak_rss.py) of one `shardeval run` of 128 requests, all in flight
at once, whose replies think 0, 2,000 or 20,000 tokens each (fixed lengths, so every run holds the
same thinking per reply). Above the run without thinking, the bytes per thinking token in flight at
20k must be below those at 2k (the same as: 10x the thinking costs less than 10x the memory), and
below 48 (the text is ~6 bytes a token; a str object per token would cost ~60 more). 128 rather
than 32 replies because at 32 the 2k run's ~2 MiB rise is within the run-to-run noise of RSS.

Measured on this machine (2 cores, another test suite running beside it), with
`PYTHONPATH=$PWD/core:$PWD/plugins:$PWD/shims python -m pytest -q -s tests/perf/test_reasoning_overhead.py`:
short replies 1.28 (shardeval 1,748 against 1,364 req/s; 0.37 against 0.51 ms CPU a request);
20k-token thinking (mean 20,440, min 13,497, max 43,172) 5.89 (16.1 against 2.73 req/s; 34 against
191 ms CPU a request: the raw client's json.loads of every one of ~20k chunks costs ~9 us each,
shardeval's typed msgspec decoding and compacted pieces ~1.7 us). Peak RSS 44.9 / 54.8 / 82.9 MiB
at 0 / 2k / 20k thinking tokens x 128 replies in flight: 10x the thinking, 3.8x the memory above
none; 41 bytes per thinking token in flight at 2k, 16 at 20k. The test takes ~80 s.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from conftest import running_sim
from peak_rss import run_measured
from test_client_overhead import raw_client, shardeval_client

FAST = ("--ttft-ms", "0", "--itl-ms", "0", "--output-tokens", "32")
THINK_MEAN, TAIL = 20_000, 3.0  # Pareto(3) x N has mean 1.5 N
LONG = ("--reasoning-form", "field", "--reasoning-tokens", str(round(THINK_MEAN / 1.5)), "--reasoning-tokens-tail", str(TAIL))
N_SHORT, C_SHORT = 1_500, 256
N_LONG, C_LONG = 32, 32
ROUNDS = 2
SLACK = 0.05  # the long ratio may fall this far below the short one
MAX_TOKENS = 2_000_000  # never cut: the tail is capped at 100 x 13,333
MEM_N = 128  # requests of the memory runs, every one in flight at once
PER_TOKEN_BOUND = 48  # bytes per thinking token in flight at 20k


def timed(coro) -> tuple[float, float, Any]:
    """(seconds, client CPU seconds, result) of one run in this process."""
    cpu0, t0 = time.process_time(), time.perf_counter()
    result = asyncio.run(coro)
    return time.perf_counter() - t0, time.process_time() - cpu0, result


def ratio_of(tmp: Path, name: str, n: int, concurrency: int, max_tokens: int, *sim_flags: str) -> dict[str, Any]:
    """shardeval against the raw client on one simulator, alternating: best rates, least CPU, ratio."""
    log = tmp / f"{name}.requests.jsonl"
    ours: list[tuple[float, float]] = []
    raw: list[tuple[float, float]] = []
    bodies: list[bytes] = []
    with running_sim("--bench", "arith", "--accuracy", "0.7", "--log-requests", str(log), *sim_flags, *FAST) as url:
        for r in range(ROUNDS):
            out = tmp / f"{name}{r}"
            wall, cpu, done = timed(shardeval_client(url, n, concurrency, str(out), max_tokens=max_tokens))
            assert done == n
            ours.append((n / wall, cpu / n))
            if not bodies:
                bodies = log.read_bytes().splitlines()
                assert len(bodies) == n
            thought: list[int] = []
            wall, cpu, done = timed(raw_client(url, n, concurrency, bodies, thought))
            assert done == n
            raw.append((n / wall, cpu / n))
            if r == 0:
                sent = log.read_bytes().splitlines()
                assert sorted(sent[n:]) == sorted(bodies)  # the raw client sent what shardeval sent
                records = [json.loads(line) for line in (out / "shard_0" / "arith" / "results.jsonl").read_bytes().splitlines()]
                assert sum(len(rec.get("reasoning") or "") for rec in records) == sum(thought)  # and read the same thinking
    tokens = sum(rec.get("completion_tokens") or 0 for rec in records)
    return {
        "ours": max(r for r, _ in ours), "ours_cpu": min(c for _, c in ours),
        "raw": max(r for r, _ in raw), "raw_cpu": min(c for _, c in raw),
        "ratio": max(r for r, _ in ours) / max(r for r, _ in raw),
        "thinking": [rec.get("reasoning_tokens") or 0 for rec in records], "tokens": tokens,
        "outcomes": {rec.get("outcome") for rec in records},
    }


def test_long_thinking_keeps_the_clients_ratio_to_a_raw_client(tmp_path: Path) -> None:
    logging.getLogger("shardeval").setLevel(logging.WARNING)
    short = ratio_of(tmp_path, "short", N_SHORT, C_SHORT, 64)
    long = ratio_of(tmp_path, "long", N_LONG, C_LONG, MAX_TOKENS, *LONG)
    thinking = long["thinking"]
    mean = sum(thinking) / len(thinking)
    assert long["outcomes"] == {None} and min(thinking) > 0  # every reply thought, and none was cut off
    assert 0.5 * THINK_MEAN < mean < 2 * THINK_MEAN
    print(f"\nclient overhead, best of {ROUNDS} alternating rounds, the same request bodies on both sides:")
    for name, n, c, got in (("short", N_SHORT, C_SHORT, short), ("long", N_LONG, C_LONG, long)):
        per_req = got["tokens"] / n  # completion tokens (thinking and answer) a request
        print(f"  {name:5} {n:5} requests @ {c:3}: raw aiohttp {got['raw']:8.2f} req/s {got['raw'] * per_req:9,.0f} tok/s "
              f"{got['raw_cpu'] * 1e3:7.2f} ms CPU/req; shardeval {got['ours']:8.2f} req/s {got['ours'] * per_req:9,.0f} tok/s "
              f"{got['ours_cpu'] * 1e3:7.2f} ms CPU/req; ratio {got['ratio']:.3f}")
    print(f"  long replies think {mean:,.0f} tokens on average (min {min(thinking):,}, max {max(thinking):,}); "
          f"long ratio {long['ratio']:.3f} against short {short['ratio']:.3f} (bound: short - {SLACK})")
    assert long["ratio"] >= short["ratio"] - SLACK


def peak_mib(tmp: Path, thinking: int) -> float:
    """Own peak RSS of `shardeval run` (the CLI) of MEM_N replies, all in flight, thinking `thinking` tokens each."""
    flags = ("--reasoning-form", "field", "--reasoning-tokens", str(thinking)) if thinking else ()
    out = tmp / f"m{thinking}"
    out.mkdir()
    config = out / "config.yaml"
    with running_sim("--bench", "arith", *FAST, *flags) as url:
        config.write_text(f"""
services:
  model: {{type: api, url: "{url}", model: sim}}
benchmarks:
  - name: arith
    params: {{n: {MEM_N}}}
    max_concurrent: {MEM_N}
    solver: {{generation: {{max_tokens: {MAX_TOKENS}}}}}
output: {{progress_interval_s: 0}}
""")
        done = run_measured([sys.executable, "-m", "shardeval", "run", str(config), "--shard", "0/1", "-o", str(out / "run")], timeout=600)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in (out / "run" / "arith" / "results.jsonl").read_bytes().splitlines()]
    assert len(records) == MEM_N and all((r.get("reasoning_tokens") or 0) == thinking for r in records)
    return done.peak_mib


def test_memory_per_reply_in_flight_grows_less_than_linearly_with_its_thinking(tmp_path: Path) -> None:
    base, small, large = (peak_mib(tmp_path, t) for t in (0, 2_000, 20_000))
    per_small = (small - base) * 2**20 / (MEM_N * 2_000)
    per_large = (large - base) * 2**20 / (MEM_N * 20_000)
    print(f"\npeak RSS of one shard, {MEM_N} replies in flight at once: no thinking {base:.1f} MiB, "
          f"2,000 thinking tokens each {small:.1f} MiB, 20,000 each {large:.1f} MiB; 10x the thinking costs "
          f"{(large - base) / max(small - base, 1e-9):.1f}x the memory above none; bytes per thinking token in flight "
          f"{per_small:.0f} at 2k, {per_large:.0f} at 20k (bounds: below 2k's, below {PER_TOKEN_BOUND})")
    assert small - base > 2  # MiB: the measurement sees the thinking at all, above RSS noise
    assert per_large < per_small
    assert per_large < PER_TOKEN_BOUND
