"""Response cache cost and gain (docs/cache.md): the full shard path in this process, against one
simulator process, at concurrency 256 with 32-token streamed answers.

- Miss-heavy: a run whose every request misses an empty cache (looked up, asked, then stored)
  against the same run without a cache; rounds alternate so drift hits both. What is asserted
  (target >= 0.90) is 1 - (the cache's CPU time per request) / (the uncached path's CPU time per
  request). The cache's part is timed where it is spent: the CPU time of the calls it adds (the
  key and its sorted encoding beyond the plain encoding, the lookup, the store, opening and
  closing the cache), by the thread that makes them (they are synchronous). Whole-run ratios of
  the two runs swing more than the cache costs, wall (0.82-1.00 seen for one tree) and CPU per
  request alike (0.88-1.27 for one tree: how many chunks one read brings depends on the timing
  of both processes), so they are printed, not asserted.
- Fully cached: the same run again over a filled cache (no request sent): its rate, and its ratio
  to the uncached run.
- Index memory: bytes the index holds per entry for a cache of large responses (it keeps where an
  entry is, never the entry).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import statistics
import time
import tracemalloc

import msgspec

from conftest import running_sim
from test_client_overhead import shardeval_client

CONCURRENCY = 256
N_REQUESTS = 6000
ROUNDS = 3
TARGET = 0.90


async def shard(base_url: str, out_dir: str, cache_dir: str | None) -> int:
    """One shard of N_REQUESTS through the whole path (test_client_overhead's); how many were cache hits."""
    await shardeval_client(base_url, N_REQUESTS, CONCURRENCY, out_dir, f'cache: {{dir: "{cache_dir}"}}\n' if cache_dir else "")
    with open(os.path.join(out_dir, "shard_0", "arith", "results.jsonl"), "rb") as f:
        lines = f.readlines()
    assert len(lines) == N_REQUESTS
    return sum(b'"cached":true' in line for line in lines)


def rate(base_url: str, out_dir: str, cache_dir: str | None) -> tuple[float, int, float]:
    """(requests per second, how many were cache hits, requests per CPU second of this process) of one shard run."""
    t0, c0 = time.perf_counter(), time.process_time()
    hits = asyncio.run(shard(base_url, out_dir, cache_dir))
    return N_REQUESTS / (time.perf_counter() - t0), hits, N_REQUESTS / (time.process_time() - c0)


class CallTally:
    """CPU seconds spent in chosen synchronous functions, each call timed by the thread that makes it."""

    def __init__(self, monkeypatch) -> None:
        self.spent: dict[str, float] = {}
        self._monkeypatch = monkeypatch

    def time(self, owner: type, name: str) -> None:
        original, label = getattr(owner, name), f"{owner.__name__}.{name}"
        self.spent[label] = 0.0

        def timed(*args, **kwargs):
            start = time.thread_time()
            try:
                return original(*args, **kwargs)
            finally:
                self.spent[label] += time.thread_time() - start

        self._monkeypatch.setattr(owner, name, timed)

    def take(self) -> dict[str, float]:
        """What was spent since the last take, and start again from zero."""
        spent, self.spent = self.spent, dict.fromkeys(self.spent, 0.0)
        return spent


def test_cache_lookup_overhead_and_a_fully_cached_run(tmp_path, monkeypatch):
    from shardeval.run.client import Client
    from shardeval.run.response_cache import ClientCache, ResponseCache

    logging.getLogger("shardeval").setLevel(logging.WARNING)
    tally = CallTally(monkeypatch)
    tally.time(Client, "_encode")  # with a cache it also sorts the keys and makes the key
    for name in ("lookup", "store_answer"):
        tally.time(ClientCache, name)
    for name in ("open", "close"):
        tally.time(ResponseCache, name)
    plain, missing, cached = [], [], []
    plain_spent, miss_spent = [], []
    with running_sim("--bench", "arith", "--accuracy", "0.7", "--ttft-ms", "0", "--itl-ms", "0", "--output-tokens", "32") as url:
        rate(url, str(tmp_path / "warm"), None)  # warm up the server and the imports
        for r in range(ROUNDS):  # which goes first alternates, so a slow spell of a shared machine hits both
            for first in (r % 2, 1 - r % 2):
                tally.take()
                if first:
                    plain.append(rate(url, str(tmp_path / f"plain{r}"), None))
                    plain_spent.append(tally.take())
                else:
                    missing.append(rate(url, str(tmp_path / f"miss{r}"), str(tmp_path / f"cache{r}")))  # a new, empty cache
                    miss_spent.append(tally.take())
            cached.append(rate(url, str(tmp_path / f"hit{r}"), str(tmp_path / f"cache{r}")))  # the one just filled
    assert all(hits == 0 for _, hits, _ in plain + missing) and all(hits == N_REQUESTS for _, hits, _ in cached)
    assert all(spent["ClientCache.lookup"] > 0 and spent["ClientCache.store_answer"] > 0 for spent in miss_spent)
    assert all(spent["ClientCache.lookup"] == 0 and spent["ResponseCache.open"] == 0 for spent in plain_spent)
    # the cache's CPU per request: all it adds, the plain encoding (timed in the plain runs) taken off
    plain_encode = statistics.median(spent["Client._encode"] for spent in plain_spent)
    cache_cpu = statistics.median(sum(spent.values()) - plain_encode for spent in miss_spent) / N_REQUESTS
    path_cpu = statistics.median(1 / c for _, _, c in plain)  # the uncached path's CPU seconds per request
    kept = 1 - cache_cpu / path_cpu
    base, miss, hit = (max(r for r, _, _ in runs) for runs in (plain, missing, cached))
    base_cpu, miss_cpu = (max(c for _, _, c in runs) for runs in (plain, missing))
    parts = ", ".join(f"{label} {1e6 * statistics.median(s[label] for s in miss_spent) / N_REQUESTS:.1f}" for label in miss_spent[0])
    print(
        f"\nresponse cache @ concurrency {CONCURRENCY}, {N_REQUESTS} x 32-token streams, {ROUNDS} rounds:\n"
        f"  no cache:          {base:8.1f} req/s (best), {1e3 * path_cpu:.3f} ms CPU/request (median)\n"
        f"  the cache's CPU per request when every request misses (looked up, asked, stored): {1e6 * cache_cpu:.1f} us "
        f"(us a request in the miss runs: {parts}; plain encoding {1e6 * plain_encode / N_REQUESTS:.1f})\n"
        f"  1 - cache / path = {kept:.3f} (target >= {TARGET}); whole runs, best of {ROUNDS}: {miss:8.1f} req/s, "
        f"{1e3 / miss_cpu:.3f} ms CPU/request, ratio {miss_cpu / base_cpu:.3f} per CPU second, {miss / base:.3f} wall\n"
        f"  fully cached (no request sent): {hit:8.1f} req/s, {hit / base:.1f}x the uncached run"
    )
    assert kept >= TARGET
    assert hit > base


def test_the_index_holds_locations_not_responses(tmp_path):
    """The index of a cache of 50,000 entries of ~2 KB each, measured with tracemalloc."""
    from shardeval.run.response_cache import SEGMENTS_DIR, CacheEntry, ResponseCache

    n, text = 50_000, "word " * 400
    seg = tmp_path / "cache" / SEGMENTS_DIR
    seg.mkdir(parents=True)
    encode = msgspec.json.Encoder().encode
    with open(seg / "writer.jsonl", "wb") as f:
        for i in range(n):
            f.write(encode(CacheEntry(key=hashlib.sha256(str(i).encode()).hexdigest(), text=text, completion_tokens=400)) + b"\n")
    size = (seg / "writer.jsonl").stat().st_size
    t0 = time.perf_counter()
    ResponseCache(str(tmp_path / "cache")).open().close()
    elapsed = time.perf_counter() - t0  # timed apart: tracemalloc slows every allocation
    tracemalloc.start()
    store = ResponseCache(str(tmp_path / "cache")).open()
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    try:
        assert len(store.index) == n
        assert store.get(hashlib.sha256(b"123").hexdigest()).text == text
    finally:
        store.close()
    per_entry = held / n
    print(
        f"\ncache index: {n} entries, {size / 1e6:.0f} MB on disk; index {per_entry:.0f} bytes/entry "
        f"({held / 1e6:.1f} MB), built in {elapsed:.2f} s ({size / 1e6 / elapsed:.0f} MB/s)"
    )
    assert per_entry < 300  # where each entry is, never its ~2 KB response
