"""Client overhead: shardeval's full shard path vs a minimal raw aiohttp streaming client.

Both run in this process, against the same simulator process, at concurrency 256 with 32-token
streamed answers, alternating so drift on a shared machine hits both. Reported as a ratio of
request rates (target >= 0.90, DESIGN.md §10) plus client CPU seconds per request. The shardeval
side is the real thing: config, runner, client, scoring, records and trajectories written to disk.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time

import aiohttp

from conftest import running_sim

CONCURRENCY = 256
N_REQUESTS = 3000
ROUNDS = 2
TARGET = 0.90


async def raw_client(base_url: str, n: int, concurrency: int, bodies: list[bytes] | None = None, thought: list[int] | None = None) -> int:
    """The baseline: what anyone would write in twenty lines (json per chunk, text accumulated).

    It keeps a reasoning model's thinking (`delta.reasoning`) as well as the content, as shardeval
    does. `bodies`: send these JSON bodies (e.g. read back from the simulator's `--log-requests`,
    so both sides send the same) instead of building arith's; `thought`: each reply's thinking
    characters are appended to it."""
    from shardeval_benchmarks.arith import ArithBenchmark

    bench = ArithBenchmark({"n": n})
    url = base_url + "/chat/completions"
    work = iter(range(n))
    done = 0
    headers = {"Content-Type": "application/json"}

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal done
        for i in work:
            if bodies is not None:
                post = session.post(url, data=bodies[i], headers=headers)
            else:
                post = session.post(
                    url,
                    json={
                        "model": "sim",
                        "messages": [{"role": "user", "content": bench.problem(i).prompt}],
                        "stream": True,
                        "seed": i,
                        "max_tokens": 64,
                    },
                )
            text, thinking = [], []
            async with post as resp:
                async for line in resp.content:
                    if not line.startswith(b"data: "):
                        continue
                    if line.startswith(b"data: [DONE]"):
                        break
                    chunk = json.loads(line[6:])
                    if chunk["choices"]:
                        delta = chunk["choices"][0]["delta"]
                        text.append(delta.get("content") or "")
                        if (piece := delta.get("reasoning")) is not None:
                            thinking.append(piece)
            "".join(text)
            if thought is not None:
                thought.append(len("".join(thinking)))
            done += 1

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    return done


def write_arith_config(path: str, base_url: str, n: int, concurrency: int, max_tokens: int = 64, extra: str = "") -> str:
    """The config of these benchmarks' shards: `n` arith problems against `base_url`; `extra` is
    more config text (a `cache:` section)."""
    with open(path, "w") as f:
        f.write(
            f"""
services:
  model: {{type: api, url: "{base_url}", model: sim}}
benchmarks:
  - name: arith
    params: {{n: {n}}}
    max_concurrent: {concurrency}
    solver: {{generation: {{max_tokens: {max_tokens}}}}}
output: {{progress_interval_s: 0}}
"""
            + extra
        )
    return path


async def shardeval_client(base_url: str, n: int, concurrency: int, out_dir: str, extra: str = "", max_tokens: int = 64) -> int:
    """One shard over the whole path (records, trajectories, scoring) against `base_url`; `extra`
    is more config text (a `cache:` section). Returns how many records it wrote (to
    OUT_DIR/shard_0/arith/results.jsonl)."""
    from shardeval.config.loading import load_config
    from shardeval.run.runner import ShardRun
    from shardeval.store.shards import ShardSpec

    os.makedirs(out_dir, exist_ok=True)
    cfg = write_arith_config(os.path.join(out_dir, "config.yaml"), base_url, n, concurrency, max_tokens, extra)
    config = load_config(cfg, [], {})
    code = await ShardRun(config, ShardSpec(0, 1, "perf"), os.path.join(out_dir, "shard_0")).run()
    assert code == 0
    with open(os.path.join(out_dir, "shard_0", "arith", "results.jsonl"), "rb") as f:
        return sum(1 for _ in f)


def measure(coro_factory) -> tuple[float, float]:
    """(requests per second, client CPU seconds per request) of one run."""
    cpu0, t0 = time.process_time(), time.perf_counter()
    n = asyncio.run(coro_factory())
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return n / wall, cpu / n


def test_shardeval_keeps_up_with_a_raw_aiohttp_client(tmp_path):
    logging.getLogger("shardeval").setLevel(logging.WARNING)
    raw, ours = [], []
    with running_sim("--bench", "arith", "--accuracy", "0.7", "--ttft-ms", "0", "--itl-ms", "0", "--output-tokens", "32") as url:
        asyncio.run(raw_client(url, 300, CONCURRENCY))  # warm up the server and the imports
        for r in range(ROUNDS):
            raw.append(measure(lambda: raw_client(url, N_REQUESTS, CONCURRENCY)))
            ours.append(measure(lambda: shardeval_client(url, N_REQUESTS, CONCURRENCY, str(tmp_path / f"r{r}"))))  # noqa: B023
    raw_rate = max(r for r, _ in raw)
    our_rate = max(r for r, _ in ours)
    ratio = our_rate / raw_rate
    raw_cpu = min(c for _, c in raw)
    our_cpu = min(c for _, c in ours)
    print(
        f"\nclient overhead @ concurrency {CONCURRENCY}, {N_REQUESTS} x 32-token streams, best of {ROUNDS}:\n"
        f"  raw aiohttp: {raw_rate:8.1f} req/s  {raw_cpu * 1e3:6.3f} ms CPU/request\n"
        f"  shardeval:   {our_rate:8.1f} req/s  {our_cpu * 1e3:6.3f} ms CPU/request "
        f"(records, trajectories and scoring included)\n"
        f"  ratio: {ratio:.3f} (target >= {TARGET})"
    )
    assert ratio >= TARGET
