"""The HTTP client against real sockets on 127.0.0.1: small aiohttp servers that reproduce each
quirk of real OpenAI-compatible servers exactly, then the built-in simulator's fault injection."""

from __future__ import annotations

import asyncio
import email.utils
import random
import socket
import subprocess
import sys
import time
from contextlib import asynccontextmanager, contextmanager
from typing import Any
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import msgspec
import pytest
from aiohttp import web

from shardeval.run.client import RETRY_AFTER_CAP_FACTOR, Client, Completion, backoff_delay, parse_retry_after
from shardeval.config import Retries, ServiceConfig, Timeouts
from shardeval.errors import UsageError
from shardeval.run.service import Endpoint

from conftest import running_sim

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "seed": 1}


def run(coro: Awaitable[Any], timeout: float = 15.0) -> Any:
    """Each test is one bounded event loop."""

    async def bounded() -> Any:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


def config(
    *,
    attempts: int = 1,
    base: float = 0.01,
    maximum: float = 0.05,
    stream: bool = True,
    protocol: str = "chat_completions",
    **timeouts: Any,
) -> ServiceConfig:
    return ServiceConfig(
        type="api",
        protocol=protocol,  # type: ignore[arg-type]
        stream=stream,
        timeouts=Timeouts(**timeouts),
        retries=Retries(attempts=attempts, backoff_base=base, backoff_max=maximum),
    )


def chunk(content: str | None = None, finish: str | None = None, *, text: bool = False) -> bytes:
    choice: dict[str, Any] = {"index": 0, "finish_reason": finish, "logprobs": None}
    if text:
        choice["text"] = content or ""
    else:
        choice["delta"] = {"content": content} if content is not None else {"role": "assistant", "content": ""}
    obj = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [choice]}
    return b"data: " + msgspec.json.encode(obj) + b"\n\n"


USAGE = b'data: {"id":"c1","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}\n\n'
DONE = b"data: [DONE]\n\n"


async def sse(request: web.Request, *parts: bytes, gap: float = 0.0) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for part in parts:
        await resp.write(part)
        if gap:
            await asyncio.sleep(gap)
    await resp.write_eof()
    return resp


def ok_stream(words: tuple[str, ...] = ("Hello", " world", "!")) -> list[bytes]:
    return [chunk(None), *(chunk(w) for w in words[:-1]), chunk(words[-1], "stop"), USAGE, DONE]


@asynccontextmanager
async def serve(handler: Handler) -> AsyncIterator[str]:
    """A one-handler OpenAI-ish server on 127.0.0.1:<free port>; yields its /v1 base URL."""
    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    app.router.add_post("/v1/completions", handler)
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        await runner.cleanup()


def endpoint(url: str, protocol: str = "chat_completions", key_env: str | None = None) -> Endpoint:
    return Endpoint(base_url=url, model="m", protocol=protocol, api_key_env=key_env)  # type: ignore[arg-type]


async def ask(
    url: str, cfg: ServiceConfig, pool: int = 4, body: dict[str, Any] | None = None, protocol: str = "chat_completions"
) -> Completion:
    async with Client(endpoint(url, protocol), cfg, pool) as client:
        return await client.request(body or BODY)


async def one(handler: Handler, cfg: ServiceConfig, body: dict[str, Any] | None = None, protocol: str = "chat_completions") -> Completion:
    async with serve(handler) as url:
        return await ask(url, cfg, 4, body, protocol)


def counting(*handlers: Handler) -> tuple[Handler, list[float]]:
    """A handler that plays `handlers` in turn (the last one repeats); records arrival times."""
    calls: list[float] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        calls.append(time.monotonic())
        return await handlers[min(len(calls), len(handlers)) - 1](request)

    return handler, calls


async def good(request: web.Request) -> web.StreamResponse:
    return await sse(request, *ok_stream())


# --- streams and their quirks -----------------------------------------------------------------


def test_stream_ok_text_usage_timings() -> None:
    seen: dict[str, Any] = {}

    async def handler(request: web.Request) -> web.StreamResponse:
        seen.update(await request.json())
        return await sse(request, *ok_stream(), gap=0.01)

    before = time.time()
    c = run(one(handler, config()))
    assert c.status == "ok", c.error
    assert (c.text, c.finish_reason, c.prompt_tokens, c.completion_tokens, c.attempts) == ("Hello world!", "stop", 7, 3, 1)
    assert c.ttft_s is not None and c.latency_s is not None and 0 < c.ttft_s <= c.latency_s < 5
    assert before <= c.started_at <= time.time()
    assert seen["stream"] is True and seen["stream_options"] == {"include_usage": True} and seen["seed"] == 1


def test_stream_without_done_is_ok() -> None:
    """transformers serve: the stream just ends after the finish_reason chunk."""

    async def handler(request: web.Request) -> web.StreamResponse:
        return await sse(request, chunk("a"), chunk("b", "length"))

    c = run(one(handler, config()))
    assert (c.status, c.text, c.finish_reason, c.prompt_tokens) == ("ok", "ab", "length", None)


def test_ping_comments_crlf_and_split_utf8() -> None:
    """llama.cpp: `: ping` comments and no usage; chunks split inside CRLF and a multibyte char."""
    raw = b": ping\r\n\r\n" + chunk("caf\u00e9 \u2713").replace(b"\n", b"\r\n") + b": ping\r\n\r\n" + chunk("!", "stop") + DONE
    cut = raw.index("\u2713".encode()) + 1

    async def handler(request: web.Request) -> web.StreamResponse:
        return await sse(request, raw[:5], raw[5:cut], raw[cut : cut + 1], raw[cut + 1 :], gap=0.02)

    c = run(one(handler, config()))
    assert (c.status, c.text, c.completion_tokens) == ("ok", "caf\u00e9 \u2713!", None)


def test_completions_protocol_uses_text_field() -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        assert request.path == "/v1/completions"
        return await sse(request, chunk("4", text=True), chunk("2", "stop", text=True), USAGE, DONE)

    body = {"model": "m", "prompt": "6*7=", "seed": 3}
    c = run(one(handler, config(), body, protocol="completions"))
    assert (c.status, c.text, c.prompt_tokens) == ("ok", "42", 7)


def test_non_streaming_parses_json_body() -> None:
    seen: dict[str, Any] = {}

    async def handler(request: web.Request) -> web.StreamResponse:
        seen.update(await request.json())
        return web.json_response(
            {
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 1},
            }
        )

    c = run(one(handler, config(stream=False)))
    assert (c.status, c.text, c.finish_reason, c.prompt_tokens, c.completion_tokens, c.ttft_s) == ("ok", "done", "stop", 5, 1, None)
    assert "stream" not in seen and "stream_options" not in seen


def test_server_ignoring_stream_returns_json() -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return web.json_response({"choices": [{"index": 0, "text": "x", "finish_reason": "stop"}]})

    c = run(one(handler, config()))
    assert (c.status, c.text) == ("ok", "x")


# --- errors inside a 200 ----------------------------------------------------------------------


def test_error_event_in_200_is_retried_server_error() -> None:
    async def broken(request: web.Request) -> web.StreamResponse:
        return await sse(request, chunk("par"), b'data: {"error": {"message": "engine died", "code": 500}}\n\n')

    handler, calls = counting(broken, good)
    c = run(one(handler, config(attempts=3)))
    assert (c.status, c.text, c.attempts, len(calls)) == ("ok", "Hello world!", 2, 2)

    c = run(one(broken, config(attempts=2)))
    assert (c.status, c.error_kind, c.attempts) == ("error", "server_error", 2)
    assert "engine died" in (c.error or "")


def test_error_event_with_4xx_code_is_client_and_not_retried() -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return await sse(request, b'data: {"error": {"message": "prompt too long", "type": "BadRequestError", "code": 400}}\n\n')

    c = run(one(handler, config(attempts=4)))
    assert (c.status, c.error_kind, c.attempts) == ("error", "client", 1)
    assert "prompt too long" in (c.error or "")


def test_error_as_plain_string_event() -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return await sse(request, b'data: {"error": "CUDA out of memory"}\n\n')

    c = run(one(handler, config()))
    assert (c.error_kind, c.attempts) == ("server_error", 1)
    assert "CUDA out of memory" in (c.error or "")


def test_undecodable_chunk_is_protocol_error_and_retried() -> None:
    async def garbage(request: web.Request) -> web.StreamResponse:
        return await sse(request, chunk("a"), b"data: {not json\n\n")

    c = run(one(garbage, config()))
    assert (c.status, c.error_kind, c.attempts) == ("error", "protocol", 1)
    handler, calls = counting(garbage, good)
    c = run(one(handler, config(attempts=2)))
    assert (c.status, c.attempts) == ("ok", 2)


def test_html_instead_of_a_stream_is_protocol_error() -> None:
    async def proxy(request: web.Request) -> web.StreamResponse:
        return web.Response(text="<html>log in</html>", content_type="text/html")

    c = run(one(proxy, config()))
    assert (c.error_kind, c.error) == ("protocol", "expected an event stream, got text/html")


def test_bad_url_is_client_error_without_retry() -> None:
    for url in ("http://127.0.0.1:99999/v1", "ftp://127.0.0.1/v1"):
        c = run(ask(url, config(attempts=3), 1))
        assert (c.error_kind, c.attempts) == ("client", 1), c.error


# --- HTTP status codes and retry policy -------------------------------------------------------


def test_400_not_retried_with_server_message() -> None:
    async def bad(request: web.Request) -> web.StreamResponse:
        return web.json_response(
            {"object": "error", "message": "max_tokens must be at least 1, got -5." + " x" * 400, "code": 400}, status=400
        )

    handler, calls = counting(bad)
    c = run(one(handler, config(attempts=5)))
    assert (c.status, c.error_kind, c.attempts, len(calls)) == ("error", "client", 1, 1)
    assert c.error is not None and c.error.startswith("HTTP 400 Bad Request: max_tokens must be at least 1")
    assert len(c.error) <= 300


def test_404_and_401_not_retried() -> None:
    for status in (401, 404, 422):

        async def handler(request: web.Request, status: int = status) -> web.StreamResponse:
            return web.Response(status=status, text="nope")

        c = run(one(handler, config(attempts=3)))
        assert (c.error_kind, c.attempts) == ("client", 1)
        assert c.error == f"HTTP {status} {web.Response(status=status).reason}: nope"


@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_is_honoured(status: int) -> None:
    async def limited(request: web.Request) -> web.StreamResponse:
        return web.json_response({"error": {"message": "slow down"}}, status=status, headers={"Retry-After": "1"})

    handler, calls = counting(limited, good)
    start = time.monotonic()
    c = run(one(handler, config(attempts=3, base=0.01, maximum=1.0)))
    assert (c.status, c.attempts) == ("ok", 2)
    assert calls[1] - calls[0] >= 1.0
    assert time.monotonic() - start < 5


def test_retry_after_http_date_and_ms() -> None:
    now = 1_700_000_000.0
    assert parse_retry_after({"Retry-After": "3"}) == 3.0
    assert parse_retry_after({"Retry-After": " 2.5 "}) == 2.5
    assert parse_retry_after({"Retry-After": email.utils.formatdate(now + 7, usegmt=True)}, now=now) == pytest.approx(7.0)
    assert parse_retry_after({"Retry-After": email.utils.formatdate(now - 7, usegmt=True)}, now=now) == 0.0
    assert parse_retry_after({"retry-after-ms": "250", "Retry-After": "9"}) == 0.25
    assert parse_retry_after({"Retry-After": "soon"}) is None
    assert parse_retry_after({"Retry-After": "-4"}) == 0.0
    assert parse_retry_after({"Retry-After": "nan"}) is None
    assert parse_retry_after({}) is None


def test_backoff_is_full_jitter_with_capped_retry_after() -> None:
    rng = random.Random(0)
    for retry in range(8):
        ceiling = min(2.0, 0.1 * 2**retry)
        samples = [backoff_delay(retry, 0.1, 2.0, rng=rng) for _ in range(300)]
        assert all(0.0 <= s <= ceiling for s in samples)
        assert min(samples) < ceiling * 0.1 and max(samples) > ceiling * 0.9  # full, not equal, jitter
    assert backoff_delay(0, 0.1, 2.0, retry_after=1.5, rng=rng) >= 1.5
    assert backoff_delay(0, 0.1, 2.0, retry_after=3600, rng=rng) == RETRY_AFTER_CAP_FACTOR * 2.0
    assert backoff_delay(10_000, 0.1, 2.0, rng=rng) <= 2.0


def test_retries_exhausted_report_kind_and_attempts() -> None:
    cases = [
        (503, "server_error"),
        (500, "server_error"),
        (502, "server_error"),
        (429, "rate_limited"),
        (408, "timeout"),
    ]
    for status, kind in cases:

        async def handler(request: web.Request, status: int = status) -> web.StreamResponse:
            return web.Response(status=status, text="busy")

        counted, calls = counting(handler)
        c = run(one(counted, config(attempts=3)))
        assert (c.status, c.error_kind, c.attempts, len(calls)) == ("error", kind, 3, 3), status
        assert c.error is not None and c.error.startswith(f"HTTP {status}")
        assert c.latency_s is not None and c.text == ""


def closed_port() -> int:
    """A port nothing listens on (until someone starts a server on it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_connection_refused_is_connection_error() -> None:
    c = run(ask(f"http://127.0.0.1:{closed_port()}/v1", config(attempts=3), 2))
    assert (c.status, c.error_kind, c.attempts) == ("error", "connection", 3)


@contextmanager
def unresponsive_port() -> Iterator[int]:
    """A listener whose accept queue is full: the kernel drops further SYNs, so connect hangs."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(0)
    port = srv.getsockname()[1]
    held: list[socket.socket] = []
    try:
        for _ in range(8):
            probe = socket.socket()
            probe.settimeout(0.2)
            try:
                probe.connect(("127.0.0.1", port))
            except TimeoutError:
                probe.close()
                yield port
                return
            held.append(probe)
        pytest.skip("this kernel accepts every SYN; cannot make connect() hang on 127.0.0.1")
    finally:
        for s in held:
            s.close()
        srv.close()


def test_connect_timeout_is_connection_error() -> None:
    with unresponsive_port() as port:
        start = time.monotonic()
        c = run(ask(f"http://127.0.0.1:{port}/v1", config(attempts=2, connect=0.3), 2))
    assert (c.status, c.error_kind, c.attempts) == ("error", "connection", 2)
    assert "connect timeout" in (c.error or "")
    assert time.monotonic() - start < 3


async def sse_then_cut(request: web.Request, data: bytes) -> web.StreamResponse:
    """Stream `data`, then drop the connection (a reset, not a clean end)."""
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(data)
    await asyncio.sleep(0.05)
    assert request.transport is not None
    request.transport.abort()
    return resp


def test_cut_stream_is_retried_connection_error() -> None:
    async def cut(request: web.Request) -> web.StreamResponse:
        return await sse_then_cut(request, chunk("par"))

    c = run(one(cut, config()))
    assert (c.status, c.error_kind, c.attempts) == ("error", "connection", 1)
    handler, calls = counting(cut, good)
    c = run(one(handler, config(attempts=2)))
    assert (c.status, c.text, c.attempts) == ("ok", "Hello world!", 2)


def test_clean_end_before_finish_is_connection_error() -> None:
    async def short(request: web.Request) -> web.StreamResponse:
        return await sse(request, chunk("par"))

    c = run(one(short, config()))
    assert (c.error_kind, c.attempts) == ("connection", 1)
    assert "before a finish_reason" in (c.error or "")


def test_cut_after_finish_reason_keeps_the_answer() -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return await sse_then_cut(request, chunk("all") + chunk(" done", "stop"))

    c = run(one(handler, config()))
    assert (c.status, c.text, c.finish_reason) == ("ok", "all done", "stop")


# --- timeouts ---------------------------------------------------------------------------------


def test_idle_timeout_fires_on_a_stall() -> None:
    async def stall(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(chunk(None) + chunk("a"))
        await asyncio.sleep(30)
        return resp

    start = time.monotonic()
    c = run(one(stall, config(idle=0.5)))
    elapsed = time.monotonic() - start
    assert (c.status, c.error_kind, c.attempts) == ("error", "timeout", 1)
    assert c.error == "idle timeout: no data for 0.5 s"
    assert 0.45 <= elapsed < 3 and c.ttft_s is not None


def test_slow_but_steady_stream_survives_idle_timeout() -> None:
    """Chunks every 0.2 s for ~3 s with idle=1 s: the stream is long, never idle, and completes."""

    async def steady(request: web.Request) -> web.StreamResponse:
        return await sse(request, *ok_stream(tuple(f"w{i} " for i in range(15))), gap=0.2)

    start = time.monotonic()
    c = run(one(steady, config(idle=1.0, first_token=1.0)))
    assert c.status == "ok", c.error
    assert c.text.startswith("w0 w1 ") and c.latency_s is not None and c.latency_s >= 2.5
    assert time.monotonic() - start >= 2.5


def test_first_token_timeout_pings_do_not_count() -> None:
    async def prefill(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for _ in range(100):
            await resp.write(b": ping\n\n")
            await asyncio.sleep(0.1)
        return resp

    start = time.monotonic()
    c = run(one(prefill, config(first_token=0.6, idle=0.3)))
    assert (c.error_kind, c.attempts) == ("timeout", 1)
    assert c.error is not None and c.error.startswith("first_token timeout")
    assert 0.55 <= time.monotonic() - start < 3


def test_first_token_timeout_before_headers() -> None:
    async def silent(request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(30)
        raise AssertionError("unreachable")

    c = run(one(silent, config(attempts=2, first_token=0.3)))
    assert (c.error_kind, c.attempts) == ("timeout", 2)
    assert c.error is not None and c.error.startswith("first_token timeout")


def test_total_timeout() -> None:
    async def endless(request: web.Request) -> web.StreamResponse:
        return await sse(request, *(chunk("x") for _ in range(100)), gap=0.05)

    c = run(one(endless, config(total=0.5, idle=5)))
    assert (c.error_kind, c.error) == ("timeout", "total timeout: the request took longer than 0.5 s")


def test_stall_after_done_is_still_ok() -> None:
    """A server that sends [DONE] but keeps the body open: drained briefly, then the answer stands."""

    async def lingering(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b"".join(ok_stream()))
        await asyncio.sleep(30)
        return resp

    start = time.monotonic()
    c = run(one(lingering, config(idle=0.3)))
    assert (c.status, c.text, c.prompt_tokens) == ("ok", "Hello world!", 7)
    assert time.monotonic() - start < 3 and c.latency_s is not None and c.latency_s < 0.3


def test_non_streaming_first_token_timeout() -> None:
    async def slow(request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(30)
        raise AssertionError("unreachable")

    c = run(one(slow, config(stream=False, first_token=0.3)))
    assert c.error_kind == "timeout"


# --- concurrency slots and cancellation -------------------------------------------------------


def test_slot_released_during_backoff() -> None:
    """With one slot, a request sleeping out a Retry-After must not block another request."""
    hits: dict[str, int] = {}

    async def handler(request: web.Request) -> web.StreamResponse:
        who = (await request.json())["seed"]
        hits[who] = hits.get(who, 0) + 1
        if who == "a" and hits[who] == 1:
            return web.Response(status=429, headers={"Retry-After": "1"})
        return await sse(request, *ok_stream())

    async def go() -> tuple[Completion, Completion, float, float]:
        async with serve(handler) as url, Client(endpoint(url), config(attempts=3, maximum=1.0), 2) as client:
            slots = asyncio.Semaphore(1)
            t0 = time.monotonic()
            task_a = asyncio.ensure_future(client.request({**BODY, "seed": "a"}, slots))
            await asyncio.sleep(0.2)  # a has had its 429 and is sleeping
            b = await client.request({**BODY, "seed": "b"}, slots)
            t_b = time.monotonic() - t0
            a = await task_a
            return a, b, t_b, time.monotonic() - t0

    a, b, t_b, t_a = run(go())
    assert (a.status, a.attempts, b.status, b.attempts) == ("ok", 2, "ok", 1)
    assert t_b < 0.8 < 1.0 <= t_a
    assert b.queued_s < 0.5


def test_queued_s_measures_waiting_for_a_slot() -> None:
    async def go() -> list[Completion]:
        async def slow(request: web.Request) -> web.StreamResponse:
            return await sse(request, *ok_stream(), gap=0.1)

        async with serve(slow) as url, Client(endpoint(url), config(), 4) as client:
            slots = asyncio.Semaphore(1)
            return list(await asyncio.gather(*(client.request(BODY, slots) for _ in range(3))))

    results = run(go())
    queued = sorted(c.queued_s for c in results)
    assert all(c.status == "ok" for c in results)
    assert queued[0] < 0.1 and queued[1] >= 0.4 and queued[2] >= 0.8


def test_cancellation_propagates_and_releases_slot() -> None:
    async def stall(request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(30)
        raise AssertionError("unreachable")

    async def go() -> None:
        async with serve(stall) as url, Client(endpoint(url), config(attempts=3), 2) as client:
            slots = asyncio.Semaphore(1)
            task = asyncio.ensure_future(client.request(BODY, slots))
            await asyncio.sleep(0.2)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert not slots.locked()

    run(go())


def test_watchdog_timeout_does_not_leak_into_the_caller() -> None:
    """After a timeout the request task is not left half-cancelled: later awaits work normally."""

    async def silent(request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(30)
        raise AssertionError("unreachable")

    async def go() -> None:
        async with serve(silent) as url, Client(endpoint(url), config(first_token=0.2), 2) as client:
            c = await client.request(BODY)
            assert c.error_kind == "timeout"
            await asyncio.sleep(0.05)
            if sys.version_info >= (3, 11):
                task = asyncio.current_task()
                assert task is not None and task.cancelling() == 0

    run(go())


# --- the API key ------------------------------------------------------------------------------


def test_missing_key_variable_is_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SHARDEVAL_TEST_KEY", raising=False)
    with pytest.raises(UsageError) as info:
        Client(endpoint("http://127.0.0.1:1/v1", key_env="SHARDEVAL_TEST_KEY"), config(), 1)
    message = str(info.value)
    assert "SHARDEVAL_TEST_KEY" in message and "export" in message and "\n" not in message


def test_key_sent_as_bearer_and_never_echoed(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-test-0123456789abcdef"
    monkeypatch.setenv("SHARDEVAL_TEST_KEY", secret)
    seen: list[str] = []

    async def echo(request: web.Request) -> web.StreamResponse:
        seen.append(request.headers.get("Authorization", ""))
        return web.json_response({"error": {"message": f"invalid key {request.headers['Authorization']}"}}, status=401)

    async def go() -> tuple[Completion, str]:
        async with serve(echo) as url:
            client = Client(endpoint(url, key_env="SHARDEVAL_TEST_KEY"), config(attempts=2), 1)
            async with client:
                return await client.request(BODY), repr(client)

    c, text = run(go())
    assert seen == [f"Bearer {secret}"]
    assert (c.error_kind, c.attempts) == ("client", 1)
    assert secret not in (c.error or "") and "***" in (c.error or "") and secret not in text
    assert secret not in msgspec.json.encode(c).decode()


# --- the built-in simulator, over a real socket ----------------------------------------------


def sim_available() -> bool:
    try:
        result = subprocess.run([sys.executable, "-m", "shardeval", "sim", "--help"], capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return False
    return result.returncode == 0 and "--fail-429" in result.stdout


needs_sim = pytest.mark.skipif(not sim_available(), reason="`shardeval sim` with fault flags is not available yet")

SIM_FAST = ("--ttft-ms", "1", "--itl-ms", "0", "--output-tokens", "8", "--seed", "3")


async def sim_batch(url: str, cfg: ServiceConfig, n: int, protocol: str = "chat_completions") -> list[tuple[Completion, float]]:
    """n concurrent requests through 8 slots; each result with the unix time it came back."""
    ep = Endpoint(base_url=url, model="sim", protocol=protocol)  # type: ignore[arg-type]

    async def timed(client: Client, body: dict[str, Any], slots: asyncio.Semaphore) -> tuple[Completion, float]:
        c = await client.request(body, slots)
        return c, time.time()

    async with Client(ep, cfg, 8) as client:
        slots = asyncio.Semaphore(8)
        bodies = [
            {
                "model": "sim",
                "seed": i,
                "max_tokens": 8,
                **({"messages": [{"role": "user", "content": f"q{i}"}]} if protocol == "chat_completions" else {"prompt": f"q{i}"}),
            }
            for i in range(n)
        ]
        return list(await asyncio.gather(*(timed(client, b, slots) for b in bodies)))


@needs_sim
@pytest.mark.parametrize("protocol", ["chat_completions", "completions"])
def test_sim_clean(protocol: str) -> None:
    with running_sim(*SIM_FAST) as url:
        results = [c for c, _ in run(sim_batch(url, config(), 16, protocol))]
    assert all(c.status == "ok" and c.text and c.attempts == 1 for c in results), [c.error for c in results]
    assert all(c.completion_tokens == 8 and c.prompt_tokens and c.finish_reason for c in results)


SIM_FAULTS = [  # (fault flags with the rate left open, kind after the last attempt)
    pytest.param(("--fail-429", "{rate}", "--retry-after", "0.3"), "rate_limited", id="429"),
    pytest.param(("--fail-5xx", "{rate}"), "server_error", id="5xx"),
    pytest.param(("--reset", "{rate}"), "connection", id="reset"),
    pytest.param(("--stall", "{rate}", "--stall-s", "5"), "timeout", id="stall"),
    pytest.param(("--error-200", "{rate}"), "server_error", id="error-200"),
]


def with_rate(flags: tuple[str, ...], rate: float) -> tuple[str, ...]:
    return tuple(f.format(rate=rate) for f in flags)


@needs_sim
@pytest.mark.parametrize("flags, kind", SIM_FAULTS)
def test_sim_faults_recovered_by_retries(flags: tuple[str, ...], kind: str) -> None:
    """With retries every request ends ok; some needed more than one attempt.

    Rate 0.3 and 12 attempts: the chance that any of 24 requests fails every attempt is ~1e-5.
    """
    # backoff_max 0.1 keeps the Retry-After cap (4 * backoff_max) above the simulator's 0.3 s
    cfg = config(attempts=12, base=0.01, maximum=0.1, idle=0.3, first_token=2.0)
    with running_sim(*SIM_FAST, *with_rate(flags, 0.3)) as url:
        results = run(sim_batch(url, cfg, 24), timeout=30)
    assert all(c.status == "ok" for c, _ in results), [(c.error_kind, c.error) for c, _ in results if c.status != "ok"]
    assert any(c.attempts > 1 for c, _ in results)
    if kind == "rate_limited":  # every retry after a 429 waited out its Retry-After (0.3 s)
        for c, done in results:
            assert done - c.started_at >= 0.3 * (c.attempts - 1) - 0.01


@needs_sim
@pytest.mark.parametrize("flags, kind", SIM_FAULTS)
def test_sim_faults_without_retries_have_the_right_kind(flags: tuple[str, ...], kind: str) -> None:
    cfg = config(attempts=1, idle=0.3, first_token=2.0)
    with running_sim(*SIM_FAST, *with_rate(flags, 0.5)) as url:
        results = [c for c, _ in run(sim_batch(url, cfg, 24), timeout=30)]
    failed = [c for c in results if c.status == "error"]
    assert failed, "a 0.5 fault rate over 24 requests should fail some"
    assert all(c.attempts == 1 for c in results)
    assert {c.error_kind for c in failed} == {kind}, [(c.error_kind, c.error) for c in failed]


ALL_FAULTS = (
    "--fail-429",
    "0.1",
    "--retry-after",
    "0.1",
    "--fail-5xx",
    "0.1",
    "--reset",
    "0.1",
    "--stall",
    "0.1",
    "--stall-s",
    "5",
    "--error-200",
    "0.1",
)


@needs_sim
def test_sim_all_faults_non_streaming() -> None:
    """stream: false goes through the same attempt loop: same kinds without retries, all ok with."""
    with running_sim(*SIM_FAST, *ALL_FAULTS) as url:
        once = [c for c, _ in run(sim_batch(url, config(attempts=1, stream=False, first_token=0.5), 48), timeout=30)]
        retried = [c for c, _ in run(sim_batch(url, config(attempts=20, stream=False, first_token=0.5), 24), timeout=30)]
    kinds = {c.error_kind for c in once if c.status == "error"}
    assert kinds <= {"rate_limited", "server_error", "connection", "timeout"} and len(kinds) >= 3, kinds
    assert any(c.status == "ok" for c in once) and all(c.attempts == 1 for c in once)
    assert all(c.status == "ok" and c.ttft_s is None and c.text for c in retried), [c.error for c in retried if c.status != "ok"]
