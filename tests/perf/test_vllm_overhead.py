"""Real-server overhead: shardeval's full shard path vs a minimal raw aiohttp client against a CPU vLLM.

Both run in this process against the same vLLM (SmolLM2-135M-Instruct, --enforce-eager, see
scripts/setup/vllm.sh) at concurrency 32, with the same chat prompts, seeds and a fixed output
length (16 tokens, `ignore_eos` via generation.extra), alternating rounds so drift on a shared
machine hits both. Reported as a ratio of request rates plus req/s; target >= 0.95
(DESIGN.md §10). Here the server is the bottleneck: this catches a client that starves vLLM's
continuous batching (too few connections, a serialising lock, slow record writes). On 2 cores
vLLM computes on one (it reserves the other). In float32 a batch of 32 16-token streams takes ~5 s
(bfloat16 is emulated on AVX2 and 4x slower). 128 requests (four full batches) keep the shard's
fixed start-up (config, dataset, files) small against the run: with 64, one CI run measured 0.93.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time

import aiohttp
import pytest

from vllm_real import SERVED_NAME, require_vllm, running_vllm

CONCURRENCY = 32
N_REQUESTS = 128
MAX_TOKENS = 16
ROUNDS = 3  # best of 3: with 2, the best raw and shardeval rates of one tree read 0.936-1.195 of each other (the CPU server is the noise)
TARGET = 0.95

pytestmark = pytest.mark.timeout(900)  # ~3 min on an idle 2-core machine; more when it is shared


def prompts(n: int) -> list[str]:
    from shardeval_benchmarks.arith import ArithBenchmark

    bench = ArithBenchmark({"n": n})
    return [bench.problem(i).prompt for i in range(n)]


async def raw_client(base_url: str, texts: list[str]) -> tuple[int, int]:
    """The baseline anyone would write: (requests done, completion tokens from the usage chunk)."""
    url = base_url + "/chat/completions"
    work = iter(enumerate(texts))
    done = tokens = 0

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal done, tokens
        for i, text in work:
            body = {
                "model": SERVED_NAME,
                "messages": [{"role": "user", "content": text}],
                "stream": True,
                "stream_options": {"include_usage": True},
                "seed": i,
                "max_tokens": MAX_TOKENS,
                "temperature": 0.0,
                "ignore_eos": True,
            }
            parts = []
            async with session.post(url, json=body) as resp:
                assert resp.status == 200, await resp.text()
                async for line in resp.content:
                    if not line.startswith(b"data: "):
                        continue
                    if line.startswith(b"data: [DONE]"):
                        break
                    chunk = json.loads(line[6:])
                    if chunk["choices"]:
                        parts.append(chunk["choices"][0]["delta"].get("content") or "")
                    if chunk.get("usage"):
                        tokens += chunk["usage"]["completion_tokens"]
            done += 1

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=CONCURRENCY)) as session:
        await asyncio.gather(*(worker(session) for _ in range(CONCURRENCY)))
    return done, tokens


async def shardeval_client(base_url: str, n: int, out_dir: str) -> tuple[int, int]:
    """The real thing: config, runner, client, scoring, records and trajectories on disk."""
    from shardeval.config.loading import load_config
    from shardeval.run.runner import ShardRun
    from shardeval.store.shards import ShardSpec

    os.makedirs(out_dir, exist_ok=True)
    cfg = os.path.join(out_dir, "config.yaml")
    with open(cfg, "w") as f:
        json.dump(
            {
                "services": {"model": {"type": "api", "url": base_url, "model": SERVED_NAME}},
                "benchmarks": [
                    {
                        "name": "arith",
                        "params": {"n": n},
                        "max_concurrent": CONCURRENCY,
                        "solver": {"generation": {"max_tokens": MAX_TOKENS, "temperature": 0.0, "extra": {"ignore_eos": True}}},
                    }
                ],
                "output": {"progress_interval_s": 0},
            },
            f,
        )
    code = await ShardRun(load_config(cfg, [], {}), ShardSpec(0, 1, "perf"), os.path.join(out_dir, "shard_0")).run()
    assert code == 0
    done = tokens = 0
    with open(os.path.join(out_dir, "shard_0", "arith", "results.jsonl"), "rb") as f:
        for line in f:
            record = json.loads(line)
            assert record["status"] == "ok", record
            done += 1
            tokens += record["completion_tokens"]
    return done, tokens


def measure(coro_factory) -> tuple[float, float]:
    """(requests per second, completion tokens per second) of one run."""
    t0 = time.perf_counter()
    n, tokens = asyncio.run(coro_factory())
    wall = time.perf_counter() - t0
    return n / wall, tokens / wall


def test_shardeval_keeps_up_with_a_raw_client_on_real_vllm(tmp_path):
    require_vllm()
    logging.getLogger("shardeval").setLevel(logging.WARNING)
    texts = prompts(N_REQUESTS)
    raw, ours = [], []
    with running_vllm(str(tmp_path / "vllm.log")) as (url, _proc):
        asyncio.run(raw_client(url, texts[:8]))  # warm up the server and the imports
        for r in range(ROUNDS):
            # Alternate which goes first, so a trend in machine load does not favour one side.
            order = [
                ("raw", lambda: raw_client(url, texts)),
                ("ours", lambda r=r: shardeval_client(url, N_REQUESTS, str(tmp_path / f"r{r}"))),
            ]
            for name, factory in order if r % 2 == 0 else order[::-1]:
                (raw if name == "raw" else ours).append(measure(factory))
    raw_rate, raw_tok = max(raw)
    our_rate, our_tok = max(ours)
    ratio = our_rate / raw_rate
    print(
        f"\nreal vLLM (CPU, SmolLM2-135M) @ concurrency {CONCURRENCY}, {N_REQUESTS} x {MAX_TOKENS}-token streams, best of {ROUNDS}:\n"
        f"  raw aiohttp: {raw_rate:6.2f} req/s {raw_tok:7.1f} tok/s  (all: {', '.join(f'{x:.2f}' for x, _ in raw)})\n"
        f"  shardeval:   {our_rate:6.2f} req/s {our_tok:7.1f} tok/s  (all: {', '.join(f'{x:.2f}' for x, _ in ours)})\n"
        f"  ratio: {ratio:.3f} (target >= {TARGET})"
    )
    assert ratio >= TARGET
