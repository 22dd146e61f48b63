"""A reasoning model's long replies (issue 39): the client keeps up, and memory per reply in flight
stays bounded.

- Throughput: shardeval's whole shard path (client, splitting, scoring, records and trajectories)
  against a raw aiohttp client that sends the very same request bodies (read back from the
  simulator's `--log-requests`) and keeps the content and the thinking, alternating, in this
  process: once for short replies without thinking (the ratio of tests/perf/test_client_overhead.py)
  and once for replies that think 20k tokens on average (heavy-tailed, vLLM's `reasoning` field).
  The long ratio must be within 5 % of the short one.
- Memory: a shard's own peak RSS (tests/peak_rss.py) with every reply in flight at once, thinking
  0, 2,000 and 20,000 tokens each: the thinking held grows less than linearly with its length
  (10x the tokens, less than 10x the memory above the run without thinking), and the bytes per
  thinking token in flight are reported.

Measured on this machine (2 cores, the rest of the suite running beside it): short replies 1.11
(1,131 against 1,020 req/s), 20k-token thinking (mean 20,440, max 43,172) 3.84: the raw client's
json.loads per chunk costs 274 ms of CPU a reply, shardeval's 51 ms. Peak RSS 44.7 / 54.1 /
86.9 MiB at 0 / 2k / 20k thinking tokens x 128 replies at once: 10 times the thinking, 4.5 times the
memory above none, 17 bytes per thinking token in flight (the text is ~6 bytes a token, held as
joined blocks, then in the record and the trajectory being written).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

from conftest import running_sim
from peak_rss import run_measured

FAST = ("--ttft-ms", "0", "--itl-ms", "0", "--output-tokens", "32")
THINK_MEAN, TAIL = 20_000, 3.0  # Pareto(3) x N has mean 1.5 N
LONG = ("--reasoning-form", "field", "--reasoning-tokens", str(round(THINK_MEAN / 1.5)), "--reasoning-tokens-tail", str(TAIL))
N_SHORT, C_SHORT = 1_500, 256
N_LONG, C_LONG = 32, 32
ROUNDS = 2
SLACK = 0.05  # the long ratio may fall this far below the short one
MAX_TOKENS = 2_000_000  # never cut: Pareto's cap is 100 x N


def write_config(path: Path, url: str, n: int, concurrency: int, max_tokens: int, trajectories: bool = True) -> Path:
    path.write_text(f"""
services:
  model: {{type: api, url: "{url}", model: sim}}
benchmarks:
  - name: arith
    params: {{n: {n}}}
    max_concurrent: {concurrency}
    solver: {{generation: {{max_tokens: {max_tokens}}}}}
output: {{progress_interval_s: 0, trajectories: {str(trajectories).lower()}}}
""")
    return path


async def shardeval_shard(config: Path, out: Path) -> int:
    """One shard of `config` in this process; the records it wrote."""
    from shardeval.config.loading import load_config
    from shardeval.run.runner import ShardRun
    from shardeval.store.shards import ShardSpec

    code = await ShardRun(load_config(str(config), [], {}), ShardSpec(0, 1, "perf"), str(out)).run()
    assert code == 0
    with open(out / "arith" / "results.jsonl", "rb") as f:
        return sum(1 for _ in f)


async def raw_client(url: str, bodies: list[dict[str, Any]], concurrency: int) -> tuple[int, int]:
    """The baseline anyone would write: json per chunk, content and thinking kept as pieces and
    joined at the end. (requests done, thinking characters read)."""
    work = iter(bodies)
    done = thought = 0

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal done, thought
        for body in work:
            text: list[str] = []
            thinking: list[str] = []
            async with session.post(url + "/chat/completions", json=body) as resp:
                async for line in resp.content:
                    if not line.startswith(b"data: "):
                        continue
                    if line.startswith(b"data: [DONE]"):
                        break
                    chunk = json.loads(line[6:])
                    if chunk["choices"]:
                        delta = chunk["choices"][0]["delta"]
                        if (piece := delta.get("reasoning")) is not None:
                            thinking.append(piece)
                        text.append(delta.get("content") or "")
            "".join(text)
            thought += len("".join(thinking))
            done += 1

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    return done, thought


def timed(coro) -> tuple[float, float, Any]:
    """(seconds, client CPU seconds, result) of one run in this process."""
    cpu0, t0 = time.process_time(), time.perf_counter()
    result = asyncio.run(coro)
    return time.perf_counter() - t0, time.process_time() - cpu0, result


def ratio_of(tmp: Path, name: str, n: int, concurrency: int, max_tokens: int, *sim_flags: str) -> dict[str, Any]:
    """shardeval's request rate over the raw client's (best round of each), against one simulator."""
    log = tmp / f"{name}.requests.jsonl"
    ours, raw = [], []
    with running_sim("--bench", "arith", "--accuracy", "0.7", "--log-requests", str(log), *FAST, *sim_flags) as url:
        config = write_config(tmp / f"{name}.yaml", url, n, concurrency, max_tokens)
        for r in range(ROUNDS):
            wall, cpu, done = timed(shardeval_shard(config, tmp / f"{name}{r}"))
            assert done == n
            ours.append((n / wall, cpu / n))
            bodies = [json.loads(line) for line in log.read_text().splitlines()[:n]]  # what shardeval sent, byte for byte the same
            wall, cpu, (done, thought) = timed(raw_client(url, bodies, concurrency))
            assert done == n
            raw.append((n / wall, cpu / n))
    records = [json.loads(line) for line in (tmp / f"{name}0" / "arith" / "results.jsonl").read_text().splitlines()]
    thinking = [r.get("reasoning_tokens", 0) for r in records]
    assert sum(len(r.get("reasoning", "")) for r in records) == thought  # both read the same thinking
    return {"ours": max(ours), "raw": max(raw), "ratio": max(ours)[0] / max(raw)[0], "thinking": thinking,
            "outcomes": {r.get("outcome") for r in records}}


def test_long_thinking_keeps_the_clients_ratio_to_a_raw_client(tmp_path: Path) -> None:
    logging.getLogger("shardeval").setLevel(logging.WARNING)
    short = ratio_of(tmp_path, "short", N_SHORT, C_SHORT, 64)
    long = ratio_of(tmp_path, "long", N_LONG, C_LONG, MAX_TOKENS, *LONG)
    mean = sum(long["thinking"]) / len(long["thinking"])
    assert long["outcomes"] == {None} and min(long["thinking"]) > 0  # every reply thought, and none was cut off
    assert 0.5 * THINK_MEAN < mean < 2 * THINK_MEAN
    for name, got in (("short", short), ("long", long)):
        print(f"\n{name}: raw aiohttp {got['raw'][0]:8.2f} req/s {got['raw'][1] * 1e3:8.2f} ms CPU/req; "
              f"shardeval {got['ours'][0]:8.2f} req/s {got['ours'][1] * 1e3:8.2f} ms CPU/req; ratio {got['ratio']:.3f}")
    print(f"long replies: {len(long['thinking'])} at once, thinking tokens mean {mean:,.0f}, max {max(long['thinking']):,}; "
          f"long ratio {long['ratio']:.3f} against short {short['ratio']:.3f} (bound: short - {SLACK})")
    assert long["ratio"] >= short["ratio"] - SLACK


MEM_N = 128  # every reply in flight at once


def peak_mib(tmp: Path, thinking: int) -> float:
    flags = ("--reasoning-form", "field", "--reasoning-tokens", str(thinking)) if thinking else ()
    with running_sim("--bench", "arith", *FAST, *flags) as url:
        config = write_config(tmp / f"m{thinking}.yaml", url, MEM_N, MEM_N, MAX_TOKENS)
        done = run_measured([sys.executable, "-m", "shardeval", "run", str(config), "--shard", "0/1", "-o", str(tmp / f"m{thinking}")],
                            timeout=600)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in (tmp / f"m{thinking}" / "arith" / "results.jsonl").read_text().splitlines()]
    assert len(records) == MEM_N and all(r.get("reasoning_tokens", 0) == thinking for r in records)
    return done.peak_mib


def test_memory_per_reply_in_flight_grows_less_than_linearly_with_its_thinking(tmp_path: Path) -> None:
    base, small, large = (peak_mib(tmp_path, t) for t in (0, 2_000, 20_000))
    grows = (large - base) / max(small - base, 1e-9)
    per_token = (large - base) * 2**20 / (MEM_N * 20_000)
    print(f"\npeak RSS of a shard, {MEM_N} replies in flight: no thinking {base:.1f} MiB, 2,000 thinking tokens each {small:.1f} MiB, "
          f"20,000 each {large:.1f} MiB; 10x the thinking costs {grows:.1f}x the memory above none (bound < 10); "
          f"{per_token:.0f} bytes per thinking token in flight")
    assert small > base  # the measurement sees the thinking at all
    assert grows < 10
