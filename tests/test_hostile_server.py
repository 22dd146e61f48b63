"""What a hostile or broken server can send, and what shardeval makes of it (issue 13, part A).

Every server here is real: a raw asyncio server on 127.0.0.1 (in a thread of the test process)
that writes exactly the bytes under test — invalid UTF-8 inside JSON strings, streams with no
choice, keep-alive pings forever, bodies without end — or a port nobody listens on. Each case is
checked at the client (`Client.request` returns a typed Completion and never raises) and through a
real `shardeval run` process (one record per pair, the manifest state, the exit code).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Awaitable, Callable

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardeval.run.client import Completion
from shardeval.config import Retries, ServiceConfig, Timeouts

from conftest import api_eval_config, shardeval_cmd
from peak_rss import run_measured
from test_client import DONE, closed_port, run
from test_client import ask as client_ask


# --- a raw HTTP/1.1 server that sends exactly what a test tells it to ------------------------------


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    n: int  # 1-based count of POSTs so far (GETs do not count)


Reply = Callable[[Request, asyncio.StreamWriter], Awaitable[None]]


class RawServer:
    """One asyncio server on 127.0.0.1:<free port> in a daemon thread; every POST is answered by
    `reply`, which writes raw bytes (status line, headers, body) and returns; the connection is then
    closed. GETs (/v1/models, /version) get a 404. `sent` counts the bytes `reply` wrote."""

    def __init__(self, reply: Reply, get: Reply | None = None) -> None:
        self.reply = reply
        self.get = get
        self.posts = 0
        self.sent = 0
        self.finished = threading.Event()  # set when a reply coroutine ended (the client went away)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(asyncio.start_server(self._conn, "127.0.0.1", 0), self._loop).result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"

    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
            body = await reader.readexactly(int(headers.get("content-length") or 0))
            if method == "POST":
                self.posts += 1
                await self.reply(Request(method, path, headers, body, self.posts), CountingWriter(writer, self))
            elif self.get is not None:
                await self.get(Request(method, path, headers, body, 0), CountingWriter(writer, self))
            else:
                writer.write(response(404, b'{"error": "not found"}'))
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.CancelledError):
            pass  # the client went away, or the test is over
        finally:
            self.finished.set()
            self._tasks.discard(task)
            writer.close()

    def close_listener(self) -> None:
        """Stop accepting connections: from now on a connect is refused."""
        self._loop.call_soon_threadsafe(self._server.close)

    def __enter__(self) -> RawServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def stop(self) -> None:
        async def shutdown() -> None:
            self._server.close()
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


class CountingWriter:
    """The connection's writer, counting the bytes a reply sends."""

    def __init__(self, writer: asyncio.StreamWriter, server: RawServer) -> None:
        self._writer = writer
        self._server = server

    def write(self, data: bytes) -> None:
        self._server.sent += len(data)
        self._writer.write(data)

    async def drain(self) -> None:
        await self._writer.drain()

    @property
    def transport(self) -> asyncio.BaseTransport:
        return self._writer.transport


def response(status: int, body: bytes, ctype: bytes = b"application/json", reason: bytes = b"X", extra: bytes = b"") -> bytes:
    """A whole HTTP/1.1 response with a Content-Length."""
    return (
        b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n%s\r\n"
        % (status, reason, ctype, len(body), extra)
    ) + body


def stream_head(ctype: bytes = b"text/event-stream") -> bytes:
    """Headers of a body that runs until the server closes the connection."""
    return b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nConnection: close\r\n\r\n" % ctype


def sse(*parts: bytes, gap: float = 0.0) -> Reply:
    async def reply(request: Request, writer: Any) -> None:
        writer.write(stream_head())
        for part in parts:
            writer.write(part)
            await writer.drain()
            if gap:
                await asyncio.sleep(gap)

    return reply


def whole(raw: bytes) -> Reply:
    async def reply(request: Request, writer: Any) -> None:
        writer.write(raw)

    return reply


def event(obj: dict[str, Any]) -> bytes:
    return b"data: " + msgspec.json.encode(obj) + b"\n\n"


def delta(content: str | None, finish: str | None = None) -> bytes:
    return event({"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": finish}]})


GOOD = (delta("Hello"), delta(" world", "stop"), DONE)


def config(*, attempts: int = 2, stream: bool = True, max_response_bytes: int | None = None, **timeouts: Any) -> ServiceConfig:
    extra = {} if max_response_bytes is None else {"max_response_bytes": max_response_bytes}
    return ServiceConfig(
        type="api",
        stream=stream,
        timeouts=Timeouts(**timeouts),
        retries=Retries(attempts=attempts, backoff_base=0.01, backoff_max=0.05),
        **extra,
    )


def ask(url: str, cfg: ServiceConfig, timeout: float = 15.0) -> Completion:
    """One request through the real client, in one bounded event loop."""
    return run(client_ask(url, cfg), timeout)


# --- shardeval run against such a server ---------------------------------------------------------


def write_config(
    tmp: Path,
    url: str,
    *,
    n: int = 3,
    repeats: int = 2,
    attempts: int = 2,
    stream: bool = True,
    concurrency: int = 4,
    service: dict | None = None,
    idle: float = 2,
) -> Path:
    """A shard config against a test server: fast retries, short timeouts."""
    return api_eval_config(
        tmp / f"config-{time.monotonic_ns()}.yaml",
        url,
        n=n,
        repeats=repeats,
        concurrency=concurrency,
        service={
            "stream": stream,
            "timeouts": {"connect": 2, "first_token": 5, "idle": idle},
            "retries": {"attempts": attempts, "backoff_base": 0.01, "backoff_max": 0.05},
            **(service or {}),
        },
        output={"progress_interval_s": 5, "drain_timeout_s": 2},
    )


def records(out: Path, bench: str = "arith", name: str = "results.jsonl") -> list[dict]:
    path = out / bench / name
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def run_shard(
    cfg: Path, out: Path, timeout: float = 120, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], float]:
    t0 = time.monotonic()
    result = shardeval_cmd("run", str(cfg), "--shard", "0/1", "-o", str(out), timeout=timeout, env=env)
    return result, time.monotonic() - t0


def one_record_per_pair(recs: list[dict], n: int, repeats: int) -> None:
    keys = sorted((r["problem_idx"], r["repeat"]) for r in recs)
    assert keys == [(p, r) for p in range(n) for r in range(repeats)], keys


# =================================================================================================
# 1. Invalid UTF-8 (and other undecodable JSON) anywhere in a response
# =================================================================================================

FF_CONTENT = b'data: {"choices":[{"index":0,"delta":{"content":"caf\xff"},"finish_reason":null}]}\n\n'
DEEP = b'{"x":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
FF_BODY = b'{"choices":[{"index":0,"message":{"role":"assistant","content":"a\xffb"},"finish_reason":"stop"}]}'

# case: (reply, stream, error_kind, retried, text the error message must hold)
UNDECODABLE: dict[str, tuple[Reply, bool, str, bool, str]] = {
    "stream_chunk_content": (sse(delta("par"), FF_CONTENT, DONE), True, "protocol", True, "invalid UTF-8"),
    "stream_chunk_finish_reason": (
        sse(b'data: {"choices":[{"delta":{"content":"x"},"finish_reason":"st\xffop"}]}\n\n', DONE),
        True,
        "protocol",
        True,
        "invalid UTF-8",
    ),
    "stream_chunk_reasoning": (
        sse(b'data: {"choices":[{"delta":{"reasoning_content":"\xfe\xff"}}]}\n\n', *GOOD),
        True,
        "protocol",
        True,
        "invalid UTF-8",
    ),
    "stream_chunk_nested_100k_deep": (sse(b"data: " + DEEP + b"\n\n", *GOOD), True, "protocol", True, "undecodable stream chunk"),
    "body_content": (whole(response(200, FF_BODY)), False, "protocol", True, "invalid UTF-8"),
    "body_nested_100k_deep": (whole(response(200, DEEP)), False, "protocol", True, "not a completion"),
    "error_event_500": (
        sse(b'data: {"error":{"message":"engine \xff died","code":500}}\n\n'),
        True,
        "server_error",
        True,
        "engine \ufffd died",
    ),
    "error_event_400": (
        sse(b'data: {"error":{"message":"prompt \xff too long","code":400}}\n\n'),
        True,
        "client",
        False,
        "prompt \ufffd too long",
    ),
    "http_500_body": (
        whole(response(500, b'{"error":{"message":"out of \xff memory"}}')),
        True,
        "server_error",
        True,
        "out of \ufffd memory",
    ),
    "http_400_body": (whole(response(400, b'{"message":"bad \xff request"}')), True, "client", False, "bad \ufffd request"),
    "http_500_body_nested_100k_deep": (whole(response(500, DEEP)), True, "server_error", True, "HTTP 500"),
    "http_429_retry_after_bytes": (whole(response(429, b"{}", extra=b"Retry-After: \xff\xfe\r\n")), True, "rate_limited", True, "HTTP 429"),
    "http_503_reason_phrase": (whole(response(503, b"{}", reason=b"Un\xffavailable")), True, "server_error", True, "HTTP 503"),
}


@pytest.mark.parametrize("case", list(UNDECODABLE))
def test_undecodable_bytes_anywhere_are_a_typed_error_never_an_exception(case: str) -> None:
    """Invalid UTF-8 in a chunk, a body, an error body or an error event (and JSON nested too deep
    to decode) ends as a Completion with the right kind; where the text is only shown (errors)
    it is decoded with replacement characters, so the server's message survives."""
    reply, stream, kind, retried, shown = UNDECODABLE[case]
    with RawServer(reply) as server:
        c = ask(server.url, config(attempts=2, stream=stream))
    assert (c.status, c.error_kind) == ("error", kind), c
    assert c.attempts == (2 if retried else 1) == server.posts, c
    assert shown in (c.error or ""), c.error
    assert "\xff" not in (c.error or "") and c.text == ""


@settings(max_examples=150, deadline=None)
@given(st.binary(min_size=1, max_size=12), st.sampled_from(["content", "finish", "error", "body", "error_body"]))
def test_random_bytes_inside_json_strings_give_a_completion_or_a_typed_error(junk: bytes, where: str) -> None:
    """Any bytes (most of them not UTF-8) inside a JSON string of a chunk, an error event, a body
    or an error body: the client returns, with an answer or a typed error. Never an exception."""
    junk = junk.replace(b'"', b"'").replace(b"\\", b"/")
    parts = {
        "content": sse(b'data: {"choices":[{"delta":{"content":"' + junk + b'"},"finish_reason":"stop"}]}\n\n', DONE),
        "finish": sse(b'data: {"choices":[{"delta":{"content":"x"},"finish_reason":"' + junk + b'"}]}\n\n', DONE),
        "error": sse(b'data: {"error":{"message":"' + junk + b'","code":500}}\n\n'),
        "body": whole(response(200, b'{"choices":[{"message":{"content":"' + junk + b'"},"finish_reason":"stop"}]}')),
        "error_body": whole(response(500, b'{"error":{"message":"' + junk + b'"}}')),
    }
    with RawServer(parts[where]) as server:
        c = ask(server.url, config(attempts=1, stream=where != "body"))
    assert isinstance(c, Completion)
    assert c.status == "ok" or c.error_kind in ("protocol", "server_error", "client", "connection"), c


# =================================================================================================
# 4. A stream that carries no choice is an error, not an empty answer
# =================================================================================================

EMPTY = event({"id": "c", "object": "chat.completion.chunk", "choices": []})
USAGE = event({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 0}})


async def empty_then_stall(request: Request, writer: Any) -> None:
    writer.write(stream_head() + EMPTY + DONE)
    await writer.drain()
    await asyncio.sleep(30)


async def empty_then_cut(request: Request, writer: Any) -> None:
    writer.write(stream_head() + EMPTY + EMPTY + DONE)
    await writer.drain()
    writer.transport.abort()


NO_CHOICE: dict[str, Reply] = {
    "empty_choices_then_done": sse(EMPTY, EMPTY, EMPTY, DONE),
    "bare_done": sse(DONE),
    "usage_only_then_done": sse(USAGE, DONE),
    "empty_choices_then_end": sse(EMPTY, EMPTY),
    "empty_choices_done_then_stall": empty_then_stall,
    "empty_choices_done_then_reset": empty_then_cut,
}


@pytest.mark.parametrize("case", list(NO_CHOICE))
def test_a_stream_without_any_choice_is_a_protocol_error(case: str) -> None:
    with RawServer(NO_CHOICE[case]) as server:
        t0 = time.monotonic()
        c = ask(server.url, config(attempts=2, idle=0.5))
    assert (c.status, c.error_kind, c.attempts) == ("error", "protocol", 2), c
    assert "no choice" in (c.error or ""), c.error
    assert time.monotonic() - t0 < 5


ROLE = event({"choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]})
ROLE_NULL = delta(None)  # llama.cpp's first chunk: `content: null` beside the role
USAGE_IN_CHOICE = event({"choices": [{"index": 0, "delta": {}}], "usage": {"prompt_tokens": 7, "completion_tokens": 0}})

# A choice that never carried an answer field (content or text, even "", reasoning, tool calls) nor a
# finish_reason is no answer either (issue 24 item 18): before, each of these was an `ok` record
# with the answer "", scored as wrong.
NO_ANSWER: dict[str, Reply] = {
    "role_delta_then_done": sse(ROLE, DONE),
    "role_with_null_content_then_done": sse(ROLE_NULL, DONE),
    "role_then_usage_then_done": sse(ROLE, USAGE, DONE),
    "usage_in_an_empty_choice_then_done": sse(USAGE_IN_CHOICE, DONE),
    "completions_choice_without_text_then_done": sse(event({"choices": [{"index": 0, "logprobs": None}]}), DONE),
}


@pytest.mark.parametrize("case", list(NO_ANSWER))
def test_a_stream_whose_choices_never_carried_an_answer_is_a_protocol_error(case: str) -> None:
    with RawServer(NO_ANSWER[case]) as server:
        t0 = time.monotonic()
        c = ask(server.url, config(attempts=2, idle=0.5))
    assert (c.status, c.error_kind, c.attempts) == ("error", "protocol", 2), c
    assert "carried no answer" in (c.error or ""), c.error
    assert time.monotonic() - t0 < 5


@pytest.mark.parametrize(
    "parts",
    [
        (ROLE, delta("", "stop"), DONE),
        (delta("", "stop"), DONE),
        (EMPTY, delta("", "length")),
        (ROLE_NULL, delta(""), DONE),
        (ROLE, event({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}), DONE),
        (ROLE, event({"choices": [{"index": 0, "delta": {"reasoning_content": ""}}]}), DONE),
        (ROLE, event({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"name": "f"}}]}}]}), DONE),
    ],
    ids=[
        "role_then_empty_content_with_finish",
        "empty_content_with_finish",
        "finish_without_done",
        "empty_content_then_done",
        "role_then_finish_with_empty_delta",
        "empty_reasoning_then_done",
        "tool_call_then_done",
    ],
)
def test_an_empty_answer_the_server_gave_is_still_an_answer(parts: tuple[bytes, ...]) -> None:
    """A model may legitimately answer nothing: a `content: ""` (vLLM, OpenAI), reasoning, a tool
    call or a finish_reason (llama.cpp's last chunk) says the server did generate, and answered ""."""
    with RawServer(sse(*parts)) as server:
        c = ask(server.url, config(attempts=1))
    assert (c.status, c.text) == ("ok", ""), c


# =================================================================================================
# 9. A response that never ends is cut at max_response_bytes
# =================================================================================================

BLOB = "x" * (64 * 1024 - 100)
CHUNK_64K = delta(BLOB)


async def endless_stream(request: Request, writer: Any) -> None:
    writer.write(stream_head() + delta(None))
    while True:
        writer.write(CHUNK_64K)
        await writer.drain()


async def endless_line(request: Request, writer: Any) -> None:
    writer.write(stream_head() + b'data: {"choices":[{"delta":{"content":"')
    while True:
        writer.write(b"x" * 65536)
        await writer.drain()


async def endless_body(request: Request, writer: Any) -> None:
    writer.write(stream_head(b"application/json") + b'{"choices":[{"message":{"content":"')
    while True:
        writer.write(b"x" * 65536)
        await writer.drain()


CAP = 1 << 20


@pytest.mark.parametrize(
    "reply,stream",
    [(endless_stream, True), (endless_line, True), (endless_body, False)],
    ids=["endless_sse_stream", "endless_sse_line", "endless_json_body"],
)
def test_a_response_without_end_is_cut_at_the_cap_as_too_large(reply: Reply, stream: bool) -> None:
    """64 KiB chunks forever: the request ends as `too_large` once the cap is passed, is not retried,
    holds about the cap in memory, and the server sees the connection closed soon after."""
    with RawServer(reply) as server:
        tracemalloc.start()
        try:
            t0 = time.monotonic()
            c = ask(server.url, config(attempts=3, stream=stream, max_response_bytes=CAP), timeout=10)
            elapsed = time.monotonic() - t0
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert server.finished.wait(5), "the server still writes: the connection was not closed"
        sent = server.sent
    assert (c.status, c.error_kind, c.attempts) == ("error", "too_large", 1), c
    assert "max_response_bytes" in (c.error or "") and str(CAP) in (c.error or ""), c.error
    assert elapsed < 10, elapsed
    assert peak < 4 * CAP, f"held {peak} bytes for a cap of {CAP}"
    assert sent < CAP + (32 << 20), f"the server wrote {sent} bytes before the client hung up"


def test_a_large_answer_under_the_cap_is_kept_whole() -> None:
    words = [f"w{i} " * 1000 for i in range(100)]  # ~ 600 KB of text in 100 chunks
    with RawServer(sse(delta(None), *(delta(w) for w in words), delta("!", "stop"), DONE)) as server:
        c = ask(server.url, config(attempts=1, max_response_bytes=CAP))
    assert (c.status, c.text) == ("ok", "".join(words) + "!")


# =================================================================================================
# Keep-alive pings after the first token do not keep a request alive
# =================================================================================================


def pinging(ping: bytes, first: bytes | None = delta("a")) -> Reply:
    async def reply(request: Request, writer: Any) -> None:
        writer.write(stream_head() + (first or b""))
        await writer.drain()
        for _ in range(300):
            writer.write(ping)
            await writer.drain()
            await asyncio.sleep(0.1)

    return reply


PINGS = {
    "comment": b": ping\n\n",
    "blank_lines": b"\n\n",
    "empty_choices_event": EMPTY,
    "empty_object_event": b"event: ping\ndata: {}\n\n",
}


@pytest.mark.parametrize("ping", list(PINGS))
def test_keepalive_pings_after_the_first_token_hit_the_idle_timeout(ping: str) -> None:
    with RawServer(pinging(PINGS[ping])) as server:
        t0 = time.monotonic()
        c = ask(server.url, config(attempts=1, idle=0.5, first_token=5))
        elapsed = time.monotonic() - t0
    assert (c.status, c.error_kind, c.error) == ("error", "timeout", "idle timeout: no data for 0.5 s"), c
    assert 0.45 <= elapsed < 4, elapsed


@pytest.mark.parametrize("ping", ["comment", "empty_choices_event"])
def test_keepalive_pings_before_the_first_token_hit_the_first_token_timeout(ping: str) -> None:
    with RawServer(pinging(PINGS[ping], first=None)) as server:
        t0 = time.monotonic()
        c = ask(server.url, config(attempts=1, idle=0.3, first_token=1.0))
        elapsed = time.monotonic() - t0
    assert (c.status, c.error_kind) == ("error", "timeout") and (c.error or "").startswith("first_token timeout"), c
    assert 0.95 <= elapsed < 4, elapsed


# =================================================================================================
# The same faults through `shardeval run`: one record per pair, of the right kind, exit 3 (finished with errors)
# =================================================================================================

E2E: dict[str, tuple[Reply, bool, str, dict]] = {
    "invalid_utf8_stream_chunk": (sse(delta("par"), FF_CONTENT, DONE), True, "protocol", {}),
    "invalid_utf8_body": (whole(response(200, FF_BODY)), False, "protocol", {}),
    "invalid_utf8_error_event": (sse(b'data: {"error":{"message":"engine \xff died","code":500}}\n\n'), True, "server_error", {}),
    "invalid_utf8_500_body": (whole(response(500, b'{"error":{"message":"\xff"}}')), True, "server_error", {}),
    "no_choice_stream": (sse(EMPTY, EMPTY, DONE), True, "protocol", {}),
    "bare_done": (sse(DONE), True, "protocol", {}),
    "role_delta_then_done": (sse(ROLE, DONE), True, "protocol", {}),
    "pings_forever_after_first_token": (pinging(PINGS["comment"]), True, "timeout", {}),
    "endless_stream": (endless_stream, True, "too_large", {"max_response_bytes": 1048576}),
}


@pytest.mark.parametrize("case", list(E2E))
def test_shardeval_run_records_every_pair_with_the_right_kind(tmp_path: Path, case: str) -> None:
    """Before the fix: invalid UTF-8 killed the request tasks (nothing written, 'missing 6', the
    manifest `complete`, exit 0); an empty stream was an `ok` record scored 0; pings and endless
    streams never ended."""
    reply, stream, kind, service = E2E[case]
    with RawServer(reply) as server:
        cfg = write_config(tmp_path, server.url, stream=stream, service=service, idle=0.5)
        result, wall = run_shard(cfg, tmp_path / "out")
    assert result.returncode == 3, result.stderr  # every pair ends in an error: finished, not complete (issue 24)
    assert "Traceback" not in result.stderr, result.stderr
    recs = records(tmp_path / "out")
    one_record_per_pair(recs, 3, 2)
    assert all(r["status"] == "error" and r["error_kind"] == kind and r["score"] is None for r in recs), recs
    assert "missing 0" in result.stderr
    m = manifest(tmp_path / "out")
    assert m["state"] == "finished_with_errors" and m["benchmarks"][0]["n_error"] == 6
    assert m["benchmarks"][0]["error_kinds"] == {kind: 6}
    assert wall < 60, wall


def test_the_shard_with_endless_streams_stays_small_in_memory(tmp_path: Path) -> None:
    """The issue's case: endless 64 KiB streams, 4 in flight. Peak RSS of the shard process stays
    far below what the streams sent (the shard's own peak, tests/peak_rss.py)."""
    with RawServer(endless_stream) as server:
        cfg = write_config(tmp_path, server.url, n=4, repeats=1, service={"max_response_bytes": 4194304})
        done = run_measured([sys.executable, "-m", "shardeval", "run", str(cfg), "--shard", "0/1", "-o", str(tmp_path / "out")], timeout=60)
        sent = server.sent
    print(f"4 endless streams, cap 4 MiB: the server sent {sent >> 20} MiB, shard peak RSS {done.peak_mib:.0f} MiB")
    assert done.returncode == 3, done.stderr  # every pair too_large: finished with errors
    recs = records(tmp_path / "out")
    assert len(recs) == 4 and all(r["error_kind"] == "too_large" for r in recs), recs
    assert done.peak_mib < 300, f"peak RSS {done.peak_mib:.0f} MiB"
    assert sent >= 4 * (4 << 20), sent


# =================================================================================================
# Any exception in a request task is an error record; missing pairs are never `complete`
# =================================================================================================

KEY_VAR = "SHARDEVAL_HOSTILE_KEY"
SECRET = "sk-hostile-0123456789abcdef0123456789abcdef"

FAULTY_PLUGIN = '''
import asyncio, os
from shardeval.benchmark import Benchmark, Problem, Score
from shardeval.hookspecs import hookimpl
from shardeval.run.solver import SimpleSolver


def broken(problem):
    """Which problems the fault strikes: FAULT names the fault, FAULT_EVERY how often (0: off)."""
    every = int(os.environ.get("FAULT_EVERY", "0"))
    return every and problem.idx % every == 0


class FaultySolver(SimpleSolver):
    async def solve(self, problem, seed):
        if broken(problem):
            fault = os.environ["FAULT"]
            if fault == "solver":
                raise RuntimeError("solver broke near " + os.environ.get("SHARDEVAL_HOSTILE_KEY", ""))
            if fault == "cancel":
                raise asyncio.CancelledError()
        attempt = await super().solve(problem, seed)
        if broken(problem) and os.environ["FAULT"] == "unencodable":
            attempt.request["handle"] = object()
        return attempt


class Fragile(Benchmark):
    name = "fragile"

    def __init__(self, params):
        self.n = int(params.get("n", 10))

    def size(self):
        return self.n

    def problem(self, idx):
        return Problem(idx=idx, id=f"f-{idx}", prompt=f"What is {idx} + 0?", reference=str(idx))

    def score(self, problem, response):
        if response.startswith("It is") and broken(problem) and os.environ["FAULT"] == "scorer":
            raise ZeroDivisionError("scorer divided by zero")
        return Score(score=float(response.strip().endswith(problem.reference)), extracted=response.strip()[-3:])


@hookimpl
def register_solvers(register):
    register("faulty", FaultySolver)


@hookimpl
def register_benchmarks(register):
    register("fragile", Fragile)
'''


def faulty_config(tmp: Path, url: str) -> Path:
    return api_eval_config(
        tmp / "faulty.yaml",
        url,
        bench="fragile",
        n=9,
        repeats=2,
        service={"api_key_env": KEY_VAR, "retries": {"attempts": 2, "backoff_base": 0.01, "backoff_max": 0.05}},
        benchmark={"solver": {"type": "faulty"}},
        output={"progress_interval_s": 5},
    )


def good_answers() -> Reply:
    async def reply(request: Request, writer: Any) -> None:
        prompt = json.loads(request.body)["messages"][-1]["content"]
        answer = prompt.split()[2]
        writer.write(stream_head() + delta(f"It is {answer}", "stop") + DONE)

    return reply


def faulty_env(tmp: Path, fault: str, every: int) -> dict[str, str]:
    (tmp / "faulty_plugin.py").write_text(FAULTY_PLUGIN)
    path = os.pathsep.join(filter(None, [str(tmp), os.environ.get("PYTHONPATH")]))  # the shardeval under test, not another
    return {"SHARDEVAL_PLUGINS": "faulty_plugin", "PYTHONPATH": path, "FAULT": fault, "FAULT_EVERY": str(every), KEY_VAR: SECRET}


@pytest.mark.parametrize(
    "fault,message",
    [
        ("solver", "RuntimeError: solver broke near ***"),
        ("scorer", "ZeroDivisionError: scorer divided by zero"),
        ("unencodable", "TypeError"),
    ],
    ids=["solver", "scorer", "unencodable"],
)
def test_an_exception_in_a_request_task_becomes_an_internal_error_record(tmp_path: Path, fault: str, message: str) -> None:
    """A solver, scorer or record that raises: that pair gets an `internal` error record (type and
    message, the key scrubbed) and the others go on; a rerun without the fault asks only those."""
    out = tmp_path / "out"
    with RawServer(good_answers()) as server:
        cfg = faulty_config(tmp_path, server.url)
        result, _ = run_shard(cfg, out, env=faulty_env(tmp_path, fault, 3))
        assert result.returncode == 3, result.stderr  # finished with 6 internal errors: not complete
        assert "Traceback" not in result.stderr and SECRET not in result.stderr, result.stderr
        recs = records(out, "fragile")
        one_record_per_pair(recs, 9, 2)
        internal = [r for r in recs if r["status"] == "error"]
        assert sorted((r["problem_idx"], r["repeat"]) for r in internal) == [(p, r) for p in (0, 3, 6) for r in range(2)]
        assert all(r["error_kind"] == "internal" and message in r["error"] and r["score"] is None for r in internal), internal
        assert all(r["status"] == "ok" and r["score"] == 1.0 for r in recs if r["problem_idx"] % 3), recs
        assert len(records(out, "fragile", "trajectories.jsonl")) == 18
        assert manifest(out)["state"] == "finished_with_errors" and manifest(out)["benchmarks"][0]["error_kinds"] == {"internal": 6}
        for path in out.rglob("*"):
            assert not path.is_file() or SECRET.encode() not in path.read_bytes(), path
        again, _ = run_shard(cfg, out, env=faulty_env(tmp_path, fault, 0))
    assert again.returncode == 0, again.stderr
    recs = records(out, "fragile")
    assert len(recs) == 18 + 6 and all(r["status"] == "ok" for r in recs[18:])


def test_pairs_still_missing_after_the_run_fail_the_shard(tmp_path: Path) -> None:
    """A request task that dies without a record (here a solver raising CancelledError, which is
    not an error to catch): the manifest is `failed`, the reason says how many pairs are missing
    and that a rerun asks them, exit 1. Before: `complete`, exit 0, and the pairs silently gone."""
    out = tmp_path / "out"
    with RawServer(good_answers()) as server:
        cfg = faulty_config(tmp_path, server.url)
        result, _ = run_shard(cfg, out, env=faulty_env(tmp_path, "cancel", 4))
        assert result.returncode == 1, result.stderr
        m = manifest(out)
        assert m["state"] == "failed", m
        assert "6 of 18 pair(s)" in m["reason"] and "rerun" in m["reason"], m["reason"]
        errors = [line for line in result.stderr.splitlines() if "failed" in line]
        assert len(errors) == 1 and "6 of 18 pair(s)" in errors[0] and "Traceback" not in result.stderr, result.stderr
        assert len(records(out, "fragile")) == 12
        again, _ = run_shard(cfg, out, env=faulty_env(tmp_path, "cancel", 0))
    assert again.returncode == 0, again.stderr
    assert manifest(out)["state"] == "complete" and len(records(out, "fragile")) == 18


# =================================================================================================
# An endpoint unreachable from the start fails the shard fast
# =================================================================================================


@pytest.mark.parametrize("n,concurrency", [(200, 4), (3, 2), (40, 1)])
def test_an_endpoint_unreachable_from_the_start_fails_the_shard_fast(tmp_path: Path, n: int, concurrency: int) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    cfg = write_config(tmp_path, url, n=n, repeats=1, concurrency=concurrency)
    result, wall = run_shard(cfg, tmp_path / "out")
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if "unreachable" in line]
    assert len(lines) == 1 and "failed" in lines[0] and url in lines[0], result.stderr
    m = manifest(tmp_path / "out")
    assert m["state"] == "failed" and url in m["reason"], m
    recs = records(tmp_path / "out")
    assert 1 <= len(recs) <= min(n, 8 + 2 * concurrency) and all(r["error_kind"] == "connection" for r in recs), recs
    assert wall < 30, wall


def test_unreachable_after_zero_never_stops_early(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    cfg = write_config(tmp_path, url, n=12, repeats=1, service={"unreachable_after": 0})
    result, _ = run_shard(cfg, tmp_path / "out")
    assert result.returncode == 3, result.stderr  # every pair a connection error: finished with errors
    recs = records(tmp_path / "out")
    assert len(recs) == 12 and all(r["error_kind"] == "connection" for r in recs)
    assert manifest(tmp_path / "out")["state"] == "finished_with_errors"


def test_connection_errors_after_a_first_answer_are_only_records(tmp_path: Path) -> None:
    """Once the endpoint answered, a server that then goes away costs records, not the shard."""
    holder: dict[str, RawServer] = {}

    async def then_gone(request: Request, writer: Any) -> None:
        if request.n <= 2:
            writer.write(stream_head() + delta("It is 1", "stop") + DONE)
            if request.n == 2:
                holder["server"].close_listener()
        else:
            writer.transport.abort()

    with RawServer(then_gone) as server:
        holder["server"] = server
        cfg = write_config(tmp_path, server.url, n=20, repeats=1, concurrency=1)
        result, _ = run_shard(cfg, tmp_path / "out")
    assert result.returncode == 3, result.stderr  # records, not a failed shard: finished with 18 errors
    recs = records(tmp_path / "out")
    assert len(recs) == 20 and sum(r["status"] == "ok" for r in recs) == 2
    assert all(r["error_kind"] == "connection" for r in recs if r["status"] == "error")
    assert manifest(tmp_path / "out")["state"] == "finished_with_errors"


@pytest.mark.parametrize("key,value", [("max_response_bytes", 0), ("unreachable_after", -1)])
def test_bad_values_of_the_new_service_keys_are_one_line_errors(tmp_path: Path, key: str, value: int) -> None:
    cfg = write_config(tmp_path, "http://127.0.0.1:9/v1", service={key: value})
    result, _ = run_shard(cfg, tmp_path / "out")
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and key in lines[0] and f"got {value}" in lines[0], result.stderr
    assert not (tmp_path / "out").exists()
