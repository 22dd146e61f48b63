"""A reasoning model's long replies (issue 39): the client keeps up with a raw client, and a shard's
memory per reply in flight stays bounded.

Throughput. shardeval's whole shard path (tests/perf/test_client_overhead.py's `shardeval_client`:
config, runner, client, splitting, scoring, records and trajectories on disk) against that file's
raw aiohttp client (json per chunk, content and thinking kept), both in this process, alternating
round by round against one simulator process per case (ttft and itl 0):

  short  arith replies of 32 tokens without thinking, 1,500 requests at concurrency 256 (the case
         of test_client_overhead.py);
  long   replies that first think 20k tokens on average, heavy-tailed (`--reasoning-tokens 13333
         --reasoning-tokens-tail 3`: Pareto(3) x N has mean 1.5 N, capped at 100 N, so max_tokens
         2,000,000 never cuts one), in vLLM's `reasoning` field; 32 requests, all in flight.

The raw client sends the very bodies shardeval sent: the simulator's `--log-requests` is read back
after shardeval's first round, and the raw round's logged bodies are checked to be the same
multiset; both read the same thinking, character for character. Reported as the ratio of request
rates (best round of each); the long ratio must not fall more than 0.05 below the short one.

That raw client decodes every chunk with json.loads, which costs it far more per token than
shardeval's typed msgspec decoding, so its long ratio is large and could hide a client that got
several times slower per token. A third client in the same rounds is as lean as Python allows
(`lean_client`: the same bodies, readany split by hand, msgspec into the three fields it reads).
Its whole runs' CPU ratios to shardeval are printed, not asserted: on this shared 2-core VM they
moved 0.43-0.71 (short) and 0.60-0.90 (long) between rounds of one tree, because a CPU second
here is not a fixed amount of work (neighbours, the simulator on the other core). What is asserted
is where the per-token cost lives, measured so that noise hits both sides: the replies to the same
bodies are recorded, the simulator is stopped, and this process reads them with shardeval's reading
(the SSE parser and `_Reading`, as `Client._read_stream` does per chunk) and with the lean client's
(`LeanReader`), interleaved a few milliseconds at a time, five passes. The lean reading's CPU over
shardeval's must not fall more than 0.05 from short to long: measured 0.727 short and 0.718 long;
passes of one tree moved 0.70-0.71 (short) and 0.66-0.72 (long); adding three small operations
per event to `_Reading.event` took the long figure from 0.745 to 0.496.

Memory. The own peak RSS (tests/peak_rss.py) of one `shardeval run` of 128 requests, all in flight
at once, whose replies think 0, 2,000 or 20,000 tokens each (fixed lengths, so every run holds the
same thinking per reply). Above the run without thinking, the bytes per thinking token in flight at
20k must be below 3/4 of those at 2k (10x the thinking costs less than 7.5x the memory), and below
28 (the text is ~6 bytes a token; pieces never joined cost ~35). 128 rather than 32 replies
because at 32 the 2k run's ~2-3 MiB rise is within the run-to-run noise of RSS.

Measured on this machine (2 cores, another test suite running beside it), with
`PYTHONPATH=$PWD/core:$PWD/plugins:$PWD/shims python -m pytest -q -s tests/perf/test_reasoning_overhead.py`:
the thinking of the long replies is 20,440 tokens on average (min 13,497, max 43,172), none cut.
Two full runs, best of 3 rounds each:
              raw json.loads        shardeval            lean msgspec        ratio  CPU ratio to lean
  short  1,271 / 1,337 req/s  1,555 / 1,523 req/s  2,155 / 2,166 req/s  1.22 / 1.14  0.67 / 0.60
         0.52 / 0.53 ms CPU    0.39 / 0.42 ms CPU   0.26 / 0.25 ms CPU
  long   3.00 / 4.72 req/s     18.2 / 17.1 req/s    15.7 / 23.0 req/s    6.07 / 3.62  0.69 / 0.62
         182 / 188 ms CPU      37 / 40 ms CPU       25 / 25 ms CPU
(long: ~350k thinking tokens a second through shardeval, ~1.8 us of client CPU a token, against
~9 us for json.loads per chunk and ~1.2 us for the lean client.) Peak RSS 45.0 / 54.1 / 78.8 MiB
and 45.0 / 61.8 / 77.2 MiB at 0 / 2k / 20k thinking tokens x 128 replies in flight: 37 and 69
bytes per thinking token in flight at 2k (pieces not yet joined, allocator slack: the noisy
figure), 14 and 13 at 20k (the text is ~6 bytes a token, held joined, then as the record and the
trajectory are written). With COMPACT_PIECES set out of reach it was 33-37 at 20k, caught by the
bound of 28. The two tests take about 90 s.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import msgspec

from conftest import running_sim
from peak_rss import run_measured
from test_client_overhead import raw_client, shardeval_client, write_arith_config

FAST = ("--ttft-ms", "0", "--itl-ms", "0", "--output-tokens", "32")
THINK_MEAN, TAIL = 20_000, 3.0  # Pareto(3) x N has mean 1.5 N
LONG = ("--reasoning-form", "field", "--reasoning-tokens", str(round(THINK_MEAN / 1.5)), "--reasoning-tokens-tail", str(TAIL))
N_SHORT, C_SHORT = 1_500, 256
N_LONG, C_LONG = 32, 32
ROUNDS = 3
SLACK = 0.05  # the long ratio may fall this far below the short one
PARSE_PASSES = 5  # passes over the recorded replies of the in-process reading measure
PARSE_GROUP = {"short": 50, "long": 1}  # replies a group: a few ms of reading each
MAX_TOKENS = 2_000_000  # never cut: the tail is capped at 100 x 13,333
MEM_N = 128  # requests of the memory runs, every one in flight at once
PER_TOKEN_BOUND = 28  # bytes per thinking token in flight at 20k (measured 14-16; 33-37 with COMPACT_PIECES out of reach)
FALLS = 0.75  # ... and at most this fraction of those at 2k (measured 0.38-0.43; 0.6-1.0 without compaction)


class _Delta(msgspec.Struct):
    content: str | None = None
    reasoning: str | None = None


class _Choice(msgspec.Struct):
    delta: _Delta


class _Chunk(msgspec.Struct):
    choices: list[_Choice] = []


class LeanReader:
    """The lean client's reading of one reply: bytes as they come split into SSE lines by hand and
    decoded by msgspec into the three fields it reads, as shardeval's own client does."""

    decode = msgspec.json.Decoder(_Chunk).decode

    def __init__(self) -> None:
        self.text: list[str] = []
        self.thinking: list[str] = []
        self.rest = b""

    def feed(self, chunk: bytes) -> None:
        *lines, self.rest = (self.rest + chunk).split(b"\n")
        for line in lines:
            if line.startswith(b"data: ") and line != b"data: [DONE]":
                choices = self.decode(line[6:]).choices
                if choices:
                    delta = choices[0].delta
                    if delta.content:
                        self.text.append(delta.content)
                    if delta.reasoning:
                        self.thinking.append(delta.reasoning)

    def read(self) -> tuple[str, str]:
        """(answer, thinking)."""
        return "".join(self.text), "".join(self.thinking)


async def lean_client(base_url: str, n: int, concurrency: int, bodies: list[bytes], thought: list[int]) -> int:
    """A raw client as lean as Python allows, for scale: the same bodies and the same reading of
    content and thinking as `raw_client`, but read by `LeanReader`; no retries, records, scoring or
    trajectories."""
    url = base_url + "/chat/completions"
    headers = {"Content-Type": "application/json"}
    work = iter(range(n))
    done = 0

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal done
        for i in work:
            reader = LeanReader()
            async with session.post(url, data=bodies[i], headers=headers) as resp:
                while chunk := await resp.content.readany():
                    reader.feed(chunk)
            thought.append(len(reader.read()[1]))
            done += 1

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    return done


def read_like_shardeval(streams: list[list[bytes]]) -> int:
    """Each reply's chunks read as shardeval's client reads them (`Client._read_stream`: the SSE
    parser, then the reading's event per data line, then its outcome); the characters read."""
    from shardeval.run.client import _Reading
    from shardeval.run.sse import SSEParser

    read = 0
    for chunks in streams:
        parser, reading = SSEParser(), _Reading(0.0)
        for chunk in chunks:
            for data in parser.feed(chunk):
                reading.event(data, 0.0)
        for data in parser.finish():
            reading.event(data, 0.0)
        reading.stream_ended("text/event-stream", 0.0)
        outcome = reading.outcome(None, 0.0)
        read += len(outcome.text) + len(outcome.reasoning or "")  # type: ignore[union-attr]
    return read


def read_lean(streams: list[list[bytes]]) -> int:
    """The same replies read by `LeanReader`; the characters read."""
    read = 0
    for chunks in streams:
        reader = LeanReader()
        for chunk in chunks:
            reader.feed(chunk)
        read += sum(map(len, reader.read()))
    return read


async def recorded_streams(base_url: str, bodies: list[bytes]) -> list[list[bytes]]:
    """What the simulator streams for each body, in the chunks aiohttp hands out (readany)."""
    headers = {"Content-Type": "application/json"}

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=C_SHORT)) as session:

        async def one(body: bytes) -> list[bytes]:
            chunks = []
            async with session.post(base_url + "/chat/completions", data=body, headers=headers) as resp:
                while chunk := await resp.content.readany():
                    chunks.append(chunk)
            return chunks

        return await asyncio.gather(*(one(body) for body in bodies))


def reading_cpu_ratio(streams: list[list[bytes]], group: int) -> float:
    """The lean reading's CPU time over shardeval's for the same recorded replies, in this process
    with no server running, interleaved `group` replies at a time (each group read by both, which
    goes first alternating) and PARSE_PASSES times over: a slow spell of the shared machine then
    hits both sides, which whole runs seconds apart do not (those read 0.52-1.06 for one tree)."""
    ours = lean = 0.0
    groups = [streams[i : i + group] for i in range(0, len(streams), group)]
    for k, replies in enumerate(groups * PARSE_PASSES):
        for side in (k % 2, 1 - k % 2):
            start = time.process_time()
            read = (read_lean if side else read_like_shardeval)(replies)
            spent = time.process_time() - start
            if side:
                lean, lean_read = lean + spent, read
            else:
                ours, our_read = ours + spent, read
        assert lean_read == our_read  # the same characters, read by both
    return lean / ours


def timed(coro) -> tuple[float, float, Any]:
    """(seconds, client CPU seconds, result) of one run in this process."""
    cpu0, t0 = time.process_time(), time.perf_counter()
    result = asyncio.run(coro)
    return time.perf_counter() - t0, time.process_time() - cpu0, result


def ratio_of(tmp: Path, name: str, n: int, concurrency: int, max_tokens: int, *sim_flags: str) -> dict[str, Any]:
    """shardeval against the raw clients on one simulator, alternating: best rates, least CPU, ratios;
    then the replies to the same bodies recorded, and read in this process by both readers."""
    log = tmp / f"{name}.requests.jsonl"
    ours: list[tuple[float, float]] = []
    raw: list[tuple[float, float]] = []
    lean: list[tuple[float, float]] = []
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
            lean_thought: list[int] = []
            wall, cpu, done = timed(lean_client(url, n, concurrency, bodies, lean_thought))
            assert done == n and sum(lean_thought) == sum(thought)
            lean.append((n / wall, cpu / n))
            if r == 0:
                sent = log.read_bytes().splitlines()
                assert sorted(sent[n : 2 * n]) == sorted(bodies)  # the raw client sent what shardeval sent
                records = [json.loads(line) for line in (out / "shard_0" / "arith" / "results.jsonl").read_bytes().splitlines()]
                assert sum(len(rec.get("reasoning") or "") for rec in records) == sum(thought)  # and read the same thinking
        streams = asyncio.run(recorded_streams(url, bodies))
    reading = reading_cpu_ratio(streams, PARSE_GROUP[name])  # the server stopped: this process alone
    tokens = sum(rec.get("completion_tokens") or 0 for rec in records)
    return {
        "ours": max(r for r, _ in ours),
        "ours_cpu": min(c for _, c in ours),
        "raw": max(r for r, _ in raw),
        "raw_cpu": min(c for _, c in raw),
        "ratio": max(r for r, _ in ours) / max(r for r, _ in raw),
        "lean": max(r for r, _ in lean),
        "lean_cpu": min(c for _, c in lean),
        "cpu_ratio": min(c for _, c in lean) / min(c for _, c in ours),
        "reading": reading,
        "thinking": [rec.get("reasoning_tokens") or 0 for rec in records],
        "tokens": tokens,
        "outcomes": {rec.get("outcome") for rec in records},
    }


def measured_twice(measure: Any, holds: Any) -> Any:
    """`measure()`, and once more when what it gave does not hold: a 2k-token reply's RSS moves
    between runs of one machine by more than its bound's slack (8-39 bytes a token, seen in two
    full runs on 2026-12-05), so it is taken as the better of two runs, as the client tests take
    the best of their rounds."""
    first = measure()
    return first if holds(first) else measure()


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
        print(
            f"  {name:5} {n:5} requests @ {c:3}: raw aiohttp {got['raw']:8.2f} req/s {got['raw'] * per_req:9,.0f} tok/s "
            f"{got['raw_cpu'] * 1e3:7.2f} ms CPU/req; shardeval {got['ours']:8.2f} req/s {got['ours'] * per_req:9,.0f} tok/s "
            f"{got['ours_cpu'] * 1e3:7.2f} ms CPU/req; ratio {got['ratio']:.3f}"
        )
        print(
            f"  {'':5} {'':5}          {'':3}  lean msgspec {got['lean']:7.2f} req/s {got['lean'] * per_req:9,.0f} tok/s "
            f"{got['lean_cpu'] * 1e3:7.2f} ms CPU/req; shardeval's ratio to it {got['ours'] / got['lean']:.3f}, "
            f"of CPU {got['cpu_ratio']:.3f}; of the reading's CPU in this process {got['reading']:.3f}"
        )
    print(
        f"  long replies think {mean:,.0f} tokens on average (min {min(thinking):,}, max {max(thinking):,}); "
        f"long ratio {long['ratio']:.3f} against short {short['ratio']:.3f} (bound: short - {SLACK})"
    )
    print(
        f"  the reading's CPU ratio to the lean reader's (its CPU over shardeval's, {PARSE_PASSES} interleaved passes): "
        f"long {long['reading']:.3f} against short {short['reading']:.3f} (bound: short - {SLACK})"
    )
    assert long["ratio"] >= short["ratio"] - SLACK
    assert long["reading"] >= short["reading"] - SLACK


def peak_mib(tmp: Path, thinking: int) -> float:
    """Own peak RSS of `shardeval run` (the CLI) of MEM_N replies, all in flight, thinking `thinking` tokens each."""
    flags = ("--reasoning-form", "field", "--reasoning-tokens", str(thinking)) if thinking else ()
    out = tmp / f"m{thinking}"
    out.mkdir()
    with running_sim("--bench", "arith", *FAST, *flags) as url:
        config = write_arith_config(str(out / "config.yaml"), url, MEM_N, MEM_N, MAX_TOKENS)
        done = run_measured([sys.executable, "-m", "shardeval", "run", config, "--shard", "0/1", "-o", str(out / "run")], timeout=600)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in (out / "run" / "arith" / "results.jsonl").read_bytes().splitlines()]
    assert len(records) == MEM_N and all((r.get("reasoning_tokens") or 0) == thinking for r in records)
    return done.peak_mib


def test_memory_per_reply_in_flight_grows_less_than_linearly_with_its_thinking(tmp_path: Path) -> None:
    runs = iter(range(2))

    def measure() -> tuple[float, float, float]:
        k = next(runs)
        return tuple(peak_mib(tmp_path / str(k), t) for t in (0, 2_000, 20_000))  # type: ignore[return-value]

    def holds(got: tuple[float, float, float]) -> bool:
        base, small, large = got
        per_small, per_large = (small - base) / 2_000, (large - base) / 20_000
        return small - base > 2 and per_large < FALLS * per_small

    for k in range(2):
        (tmp_path / str(k)).mkdir()
    base, small, large = measured_twice(measure, holds)
    per_small = (small - base) * 2**20 / (MEM_N * 2_000)
    per_large = (large - base) * 2**20 / (MEM_N * 20_000)
    print(
        f"\npeak RSS of one shard, {MEM_N} replies in flight at once: no thinking {base:.1f} MiB, "
        f"2,000 thinking tokens each {small:.1f} MiB, 20,000 each {large:.1f} MiB; 10x the thinking costs "
        f"{(large - base) / max(small - base, 1e-9):.1f}x the memory above none; bytes per thinking token in flight "
        f"{per_small:.0f} at 2k, {per_large:.0f} at 20k (bounds: below {FALLS} x 2k's, below {PER_TOKEN_BOUND})"
    )
    assert small - base > 2  # MiB: the measurement sees the thinking at all, above RSS noise
    assert per_large < FALLS * per_small
    assert per_large < PER_TOKEN_BOUND
