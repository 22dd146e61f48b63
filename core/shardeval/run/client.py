"""The HTTP client: one OpenAI-compatible request in, one `Completion` record out.

One request path serves both protocols (chat and completions): they differ only in where a
choice keeps its text (`delta.content` / `message.content` versus `text`), which the chunk Struct
below reads uniformly. A caller may pick the protocol and streaming per request (the
log-likelihood solver asks `/v1/completions`, unstreamed, whatever the service's own protocol).

Log-probabilities: a non-streamed completions response's `choices[0].logprobs` lands in the
Completion's `prompt_tokens_text`, `prompt_logprobs` and `text_offsets` (see there). Only whole
bodies are decoded with the logprobs Struct; the streaming hot path never looks at logprobs.

Reasoning models (docs/reasoning.md): the thinking a server sends in a field of its own
(`reasoning`, vLLM >= 0.10; `reasoning_content`, older vLLM and others), streamed or in the
message, lands in the Completion's `reasoning`, apart from the answer's text; a reply's content
is kept as sent (inline `<think>` tags included) and split later, once, by
shardeval.benchmark.reasoning. Its thinking tokens come from the usage's
`completion_tokens_details.reasoning_tokens`, else from the stream (one per chunk). A reply is
kept as blocks of joined pieces (COMPACT_PIECES), so a 32k-token reply holds about its text's
size; thinking chunks count as content for the idle timeout, so a long think never times out
while tokens flow.

Failures are data, not exceptions: after the last attempt the Completion says `status="error"`
with a typed `error_kind`, so the runner can record it and the merge can count it apart from
wrong answers. Only `asyncio.CancelledError` propagates.

Timeouts (all from `ServiceConfig.timeouts`, seconds)
    connect      TCP connect (aiohttp `sock_connect`); expiry is a `connection` error, since the
                 server is unreachable rather than slow.
    first_token  from sending the request until the first SSE event that carries content (a
                 choice, usage or [DONE]) of a streamed response, or the first body byte of a
                 non-streamed one.
    idle         longest gap after that between SSE events that carry content (a non-streamed
                 body: between any bytes). Keep-alives do not count: `: ping` comments, blank
                 lines, events with no choice (`{"choices": []}`, `{}`). So a stream that keeps
                 producing runs for as long as it needs, and one that only pings times out.
    total        optional cap on one attempt (None: no cap).
    One lazy watchdog timer per attempt enforces them (`_Watchdog`), never a task per chunk (as
    asyncio.wait_for would create on Python < 3.12).

Size (`ServiceConfig.max_response_bytes`)
    The body bytes one attempt may receive (SSE framing included). Past it the attempt ends as
    `too_large`, not retried: a server that streams without end would do it again. The stream is
    cut there, so what an attempt holds is bounded by it.

What a server sends is never trusted to decode
    Undecodable bytes in a chunk or a body (invalid UTF-8, JSON nested too deep to decode, the
    wrong shape) are a `protocol` error. Text that is only shown (an error body, an error event)
    is decoded with replacement characters instead, so the server's message and kind survive. A
    stream whose events carry no choice at all (only `{"choices": []}`, only usage, a bare
    [DONE]) is a `protocol` error, not an empty answer.

Secrets (shardeval.redact)
    The API key, should a server echo it, is replaced by `***` in everything a Completion carries
    (answer text, finish reason, tokens, error messages) and in what `get_json` returns, so no
    server text with the key in it reaches a record, a trajectory, a manifest or a log; an answer
    so changed is logged (once). Only a key of MIN_SECRET_CHARS or more is a secret: a shorter one
    (`4`, `EMPTY`) is sent but replaced nowhere, since replacing it would rewrite answers. Error
    texts never hold a URL's credentials.

Cache (`use_cache`, shardeval.run.response_cache; opt-in)
    Before anything is sent, a request's key (the service's declared identity, the protocol and
    the body as it would be sent) is looked up; a hit returns the stored answer as a Completion
    with `cached=True`, `attempts=0`, no ttft and the lookup's time as latency, taking no slot.
    After the last attempt, an `ok` Completion (a whole answer, key scrubbed) is stored.

Retries (`ServiceConfig.retries`: attempts including the first)
    Retried: 408, 429, 5xx, connection errors and resets, streams cut before a finish_reason or
    [DONE], timeouts, undecodable chunks, error events in a 200 stream unless 4xx-like. Not
    retried: other 4xx (`client`), `too_large`. The sleep before retry n (0-based) is full jitter,
    uniform(0, min(backoff_max, backoff_base * 2**n)); a Retry-After (or retry-after-ms) header
    is a lower bound on it, capped at RETRY_AFTER_CAP_FACTOR * backoff_max so a server cannot park
    a shard for hours. The caller's concurrency slot is released during the sleep. Slots that
    have a `feedback(started, rate_limited)` method (`shardeval.run.adaptive.AdaptiveSlots`, chosen by
    the service's `adaptive: true`) hear the outcome of every attempt.
"""

from __future__ import annotations

import asyncio
import datetime
import email.utils
import itertools
import logging
import math
import os
import random
import sys
import time
from contextlib import suppress
from typing import Any, Literal
from collections.abc import Awaitable, Callable, Mapping

import aiohttp
import msgspec

from shardeval.run.adaptive import AdaptiveSlots
from shardeval.run.response_cache import ClientCache
from shardeval.run.completion import Completion
from shardeval.config import Protocol, ServiceConfig, Timeouts
from shardeval.errors import UsageError
from shardeval.redact import MIN_SECRET_CHARS, is_secret, redact_urls
from shardeval.run.service import Endpoint
from shardeval.run.sse import SSEParser

__all__ = ["Client", "Completion", "ErrorKind", "backoff_delay", "parse_retry_after"]

log = logging.getLogger("shardeval.run.client")

ErrorKind = Literal["timeout", "rate_limited", "server_error", "connection", "protocol", "client", "too_large"]

RETRY_AFTER_CAP_FACTOR = 4.0  # a Retry-After above 4 * backoff_max is trimmed to that
DRAIN_S = 1.0  # after [DONE], how long to wait for the end of the body before closing the socket
KEEPALIVE_S = 4.0  # below uvicorn's 5 s keep-alive, so a pooled socket is never reused as it closes
MAX_ERROR_CHARS = 300  # a server's error message is cut to this in Completion.error
_ERROR_BODY_BYTES = 65536
# What decoding a server's bytes may raise besides msgspec's own errors: UnicodeDecodeError (invalid
# UTF-8 inside a string) and other ValueErrors (msgspec's errors are ValueErrors too), and
# RecursionError (JSON nested deeper than the decoder's stack).
_UNDECODABLE: tuple[type[Exception], ...] = (msgspec.DecodeError, ValueError, RecursionError)
# aiohttp >= 3.10 says "not http(s)" with its own class; older versions raise InvalidURL for it too
_BAD_URL: tuple[type[Exception], ...] = (aiohttp.InvalidURL,) + (
    (aiohttp.NonHttpUrlClientError,) if hasattr(aiohttp, "NonHttpUrlClientError") else ()
)


# --- wire shapes: only the fields we read. Measured: decoding into these Structs beats
# msgspec.json.decode to dicts (~570 vs ~750 ns per vLLM chunk) since unknown fields are skipped
# without building objects; gc=False because they hold no cycles.


class _Delta(msgspec.Struct, gc=False):
    content: str | None = None
    reasoning_content: str | None = None  # vLLM reasoning parsers (older name)
    reasoning: str | None = None  # vLLM reasoning parsers (newer name)
    tool_calls: list[msgspec.Raw] | None = None  # only whether the field came (an answer may be a tool call): never decoded


class _Choice(msgspec.Struct, gc=False):
    delta: _Delta | None = None  # chat, streamed
    message: _Delta | None = None  # chat, not streamed
    text: str | None = None  # completions
    finish_reason: str | None = None


class _UsageDetails(msgspec.Struct, gc=False):
    reasoning_tokens: int | None = None  # vLLM and OpenAI: how many of completion_tokens were thinking


class _Usage(msgspec.Struct, gc=False):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    completion_tokens_details: _UsageDetails | None = None


class _ErrorBody(msgspec.Struct, gc=False):
    message: str | None = None
    code: int | str | None = None
    type: str | None = None


class _Chunk(msgspec.Struct, gc=False):
    """A stream chunk, a whole response body, or an error object: one shape decodes them all."""

    choices: list[_Choice] | None = None
    usage: _Usage | None = None
    error: _ErrorBody | str | None = None  # {"error": {...}} (vLLM, OpenAI) or {"error": "..."}
    object: str | None = None  # "error" in vLLM's bare ErrorResponse
    message: str | None = None
    code: int | str | None = None


_decode_chunk = msgspec.json.Decoder(_Chunk).decode


class _Logprobs(msgspec.Struct, gc=False):
    """A completions choice's `logprobs` (a chat one, `{"content": [...]}`, decodes to all None)."""

    tokens: list[str] | None = None
    token_logprobs: list[float | None] | None = None
    text_offset: list[int] | None = None
    top_logprobs: list[dict[str, float] | None] | None = None


class _BodyChoice(_Choice, gc=False):
    logprobs: _Logprobs | None = None


class _Body(_Chunk, gc=False):
    """A whole non-streamed response: a chunk whose choice may also carry logprobs."""

    choices: list[_BodyChoice] | None = None  # type: ignore[assignment]


_decode_body = msgspec.json.Decoder(_Body).decode


def _decode(decode: Any, data: bytes, what: str) -> Any:
    """Decode a chunk or a body with `decode`; raise the _Failure of an error object, or a
    `protocol` one saying why it does not decode.

    Invalid UTF-8 spoils an answer, but not an error object: its text is only shown, so it is
    decoded again with replacement characters, and when it is one its kind stands.
    """
    try:
        msg = decode(data)
    except _UNDECODABLE as exc:
        if not _invalid_utf8(exc):
            detail = "nested too deep" if isinstance(exc, RecursionError) else str(exc)
            label = "undecodable stream chunk" if what == "stream chunk" else "response body is not a completion"
            raise _Failure("protocol", f"{label} ({detail}): {_snippet(data)}") from None
        msg = _decode_replacing(decode, data)
        if msg is None or (msg.error is None and msg.object != "error"):
            raise _Failure("protocol", f"invalid UTF-8 in the {what}: {_snippet(data)}") from None
    if msg.error is not None or msg.object == "error":
        raise _error_event(msg)
    return msg


def _invalid_utf8(exc: BaseException) -> bool:
    """Whether a decode failed on invalid UTF-8: a UnicodeDecodeError (older msgspec), or msgspec's
    own DecodeError saying so (0.23 here: the `stream_chunk_content` case of test_hostile_server
    failed on a fresh install until this)."""
    return isinstance(exc, UnicodeDecodeError) or (isinstance(exc, msgspec.DecodeError) and "Invalid UTF-8" in str(exc))


def _decode_replacing(decode: Any, data: bytes) -> Any:
    """`data` decoded with invalid UTF-8 as replacement characters (for text that is only shown), or None."""
    try:
        return decode(data.decode("utf-8", "replace").encode())
    except _UNDECODABLE:
        return None


class _Failure(Exception):
    """An attempt that produced no usable answer; `retryable` decides whether another follows."""

    def __init__(self, kind: ErrorKind, message: str, *, retryable: bool = True, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.retryable = retryable
        self.retry_after = retry_after
        self.ttft_s: float | None = None
        self.latency_s: float | None = None


def parse_retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds to wait from `retry-after-ms`, or `Retry-After` as seconds or an HTTP-date; else None."""
    ms = _finite(headers.get("retry-after-ms"))
    raw = (headers.get("Retry-After") or "").strip()
    seconds = ms / 1000.0 if ms is not None else _finite(raw)
    if seconds is not None:
        return max(0.0, seconds)
    try:  # an HTTP-date (GMT when it names no zone); "nan", "soon" and the like raise here
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _finite(text: str | None) -> float | None:
    try:
        value = float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def backoff_delay(retry: int, base: float, maximum: float, retry_after: float | None = None, rng: random.Random | None = None) -> float:
    """Full-jitter sleep before retry `retry` (0-based), with Retry-After as a capped lower bound."""
    ceiling = min(maximum, base * 2.0 ** min(retry, 60))
    delay = (rng or random).uniform(0.0, max(0.0, ceiling))
    if retry_after is not None:
        delay = max(delay, min(retry_after, RETRY_AFTER_CAP_FACTOR * maximum))
    return delay


def _status_failure(status: int | None, text: str, retry_after: float | None = None, other: ErrorKind = "server_error") -> _Failure:
    """408 and 429 are retried as `timeout` and `rate_limited`; another 4xx is `client`, not
    retried; anything else is retried as `other`."""
    if status is not None and 400 <= status < 500 and status not in (408, 429):
        return _Failure("client", text, retryable=False)
    return _Failure({429: "rate_limited", 408: "timeout"}.get(status, other), text, retry_after=retry_after)  # type: ignore[arg-type]


def _error_event(msg: _Chunk) -> _Failure:
    """An error delivered inside a 200 response: server_error (retried) unless its code is 4xx."""
    err = msg.error
    if isinstance(err, str):
        message, code = err, None
    elif err is not None:
        message, code = err.message or err.type or "error", err.code
    else:
        message, code = msg.message or "error", msg.code
    # only 408, 429 and the other 4xx decide the kind: a 3-digit string counts as its number
    status = int(code) if isinstance(code, str) and code.isdigit() and len(code) == 3 else code if isinstance(code, int) else None
    return _status_failure(status, "error event in response" + (f" (code {code})" if code is not None else "") + f": {message}")


def _detail(body: bytes) -> str:
    """The human part of an error body: error.message, message, detail, or the raw text."""
    try:
        obj = msgspec.json.decode(body)
    except _UNDECODABLE:  # only shown: invalid UTF-8 becomes replacement characters, the message stays
        obj = _decode_replacing(msgspec.json.decode, body)
    obj = obj if isinstance(obj, dict) else {}
    err = obj.get("error")
    text = str(err.get("message") or err if isinstance(err, dict) else err or obj.get("message") or obj.get("detail") or "")
    return " ".join((text or body.decode("utf-8", "replace")).split())


def _own_cancel(task: asyncio.Task[object] | None) -> bool:
    """After our watchdog cancelled `task`: True unless someone else asked for a cancel too (3.11+)."""
    if task is not None and sys.version_info >= (3, 11):
        return task.uncancel() == 0
    return True  # Python 3.10 cannot tell; a simultaneous outside cancel reads as our timeout


_FIRST, _IDLE, _DRAIN = 0, 1, 2  # the watchdog's phases


class _Watchdog:
    """Enforces first_token/idle/total for one attempt with a single self-re-arming timer.

    The read loop stores `last` (loop time of the latest chunk); nothing else happens per chunk.
    When the timer fires it recomputes the deadline from `last`; if it has not passed, it re-arms
    at it (so a steady stream costs one wake-up per idle period). When it has, it records which
    timeout expired and cancels the attempt's task, which the attempt turns into a `timeout`.
    While waiting for the first token the timer never sleeps longer than `idle`, so the switch to
    the idle phase needs no re-arming: the pending check is already due no later than its deadline.
    """

    __slots__ = ("_loop", "_task", "start", "last", "phase", "expired", "_handle", "_when", "_first", "_idle", "_total")

    def __init__(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[object] | None, timeouts: Timeouts, start: float) -> None:
        self._loop = loop
        self._task = task
        self._first = timeouts.first_token
        self._idle = timeouts.idle
        self._total = timeouts.total
        self.start = self.last = start
        self.phase = _FIRST
        self.expired: str | None = None
        self._when = min(self._deadline()[0], start + self._idle)
        self._handle: asyncio.TimerHandle | None = loop.call_at(self._when, self._check)

    def _deadline(self) -> tuple[float, str]:
        if self.phase == _FIRST:
            when, what = self.start + self._first, f"first_token timeout: no token within {self._first} s of sending the request"
        elif self.phase == _IDLE:
            when, what = self.last + self._idle, f"idle timeout: no data for {self._idle} s"
        else:
            when, what = self.last + min(self._idle, DRAIN_S), "drain"
        if self._total is not None and self.start + self._total < when:
            when, what = self.start + self._total, f"total timeout: the request took longer than {self._total} s"
        return when, what

    def _check(self) -> None:
        when, what = self._deadline()
        now = self._loop.time()
        if now + 0.001 >= when:
            self._handle = None
            self.expired = what
            if self._task is not None:
                self._task.cancel()
            return
        if self.phase == _FIRST:
            when = min(when, now + self._idle)
        self._when = when
        self._handle = self._loop.call_at(when, self._check)

    def drain(self) -> None:
        """[DONE] arrived: allow the body only a short while to end."""
        self.phase = _DRAIN
        if self._handle is not None and (when := self._deadline()[0]) < self._when:
            self._handle.cancel()
            self._when = when
            self._handle = self._loop.call_at(when, self._check)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


COMPACT_PIECES = 1024  # a reply's pieces are joined into one block every this many: ~60 bytes a token become ~4


def _text(blocks: list[str], pieces: list[str]) -> str:
    return "".join(blocks) + "".join(pieces) if blocks else "".join(pieces)


class _Reading:
    """What an attempt has received so far; survives a late failure so a complete answer is kept.

    The answer's and the thinking's text are kept as pieces joined into blocks every
    COMPACT_PIECES chunks, so a 32k-token reply holds about its text's size, not a Python string
    object per token. The stream's own count of thinking tokens (one per chunk, as vLLM sends
    them) is kept for servers whose usage does not say: chunks of the reasoning field, or, for
    thinking inline between `tags`, the content chunks before the one with the last closing tag.
    """

    __slots__ = (
        "start",
        "pieces",
        "blocks",
        "thoughts",
        "thought_blocks",
        "finish_reason",
        "usage",
        "ttft",
        "end",
        "done",
        "events",
        "choices",
        "answered",
        "progress",
        "logprobs",
        "tags",
        "content_chunks",
        "thought_chunks",
        "closed_after",
    )

    def __init__(self, start: float, tags: tuple[str, str] | None = None) -> None:
        self.start = start
        self.pieces: list[str] = []
        self.blocks: list[str] = []
        self.thoughts: list[str] | None = None  # None: the server sent no reasoning field
        self.thought_blocks: list[str] = []
        self.finish_reason: str | None = None
        self.usage: _Usage | None = None
        self.ttft: float | None = None
        self.end: float | None = None
        self.done = False  # [DONE] seen, or a whole JSON body parsed
        self.events = 0
        self.choices = 0  # events that carried a choice (a body that decoded counts as one)
        # events whose choice carried an answer field (content or text, even "", reasoning, tool calls)
        # or a finish_reason: a choice with only a role (or nothing) says nothing was generated
        self.answered = 0
        self.progress = 0  # events that carried content (a choice, usage, [DONE]): what idle watches
        self.logprobs: _Logprobs | None = None
        self.tags = tags  # (opening, closing) of inline thinking; None: not looked for
        self.content_chunks = 0
        self.thought_chunks = 0
        self.closed_after = 0  # content chunks up to the last one holding the closing tag (0: none did)

    @property
    def complete(self) -> bool:
        """The answer is whole: later transport trouble (a cut, a stall) does not spoil it.
        A [DONE] after events that never carried an answer field ends nothing: there was no answer."""
        return self.finish_reason is not None or (self.done and self.answered > 0)

    def no_choice(self) -> _Failure:
        """A stream whose events never carried a choice, or whose choices never carried an answer
        field (only a role delta, only usage): a broken server or proxy, not an empty answer. An
        empty answer the model gave still comes as `content: ""` or with a finish_reason."""
        what = "[DONE]" if self.done else "the end of the stream"
        if self.choices:
            return _Failure(
                "protocol",
                f"the stream carried no answer ({self.events} events up to {what}, {self.choices} with a "
                "choice, none with content, reasoning, tool calls or a finish_reason)",
            )
        return _Failure("protocol", f"the stream carried no choice ({self.events} events up to {what}, none with a choice)")

    def event(self, data: bytes, now: float) -> None:
        """Apply one SSE data payload."""
        self.events += 1
        if self.done or not data:
            return
        if data == b"[DONE]":
            self.done = True
            self.end = now
            self.progress += 1
            return
        msg = _decode(_decode_chunk, data, "stream chunk")
        choices = msg.choices
        if choices:
            self.choices += 1
            self.progress += 1
            choice = choices[0]
            delta = choice.delta
            if delta is not None:
                piece = delta.content
                thought = delta.reasoning if delta.reasoning is not None else delta.reasoning_content
            else:
                piece, thought = choice.text, None
            if piece:
                pieces = self.pieces
                pieces.append(piece)
                if len(pieces) >= COMPACT_PIECES:
                    self.blocks.append("".join(pieces))
                    pieces.clear()
                self.content_chunks += 1
                if self.tags is not None and self.tags[1] in piece:
                    self.closed_after = self.content_chunks
                if self.ttft is None:
                    self.ttft = now - self.start
            if thought:
                self._think(thought, now)
            if choice.finish_reason is not None:
                self.finish_reason = choice.finish_reason
                self.answered += 1
            elif piece is not None or thought is not None or (delta is not None and delta.tool_calls is not None):
                self.answered += 1
        if msg.usage is not None:
            self.usage = msg.usage
            self.progress += 1

    def stream_ended(self, ctype: str, now: float) -> None:
        """The body ended: an incomplete answer raises why (not a stream at all, no answer in it,
        or cut before its end); a complete one ends now unless [DONE] said when."""
        if not self.complete:
            if not self.events and ctype != "text/event-stream":  # e.g. a proxy's HTML page
                raise _Failure("protocol", f"expected an event stream, got {ctype or 'no content type'}")
            if self.events and not self.answered and (self.done or not self.choices):
                raise self.no_choice()
            what = "no data" if not self.events else f"{self.events} events"
            raise _Failure("connection", f"stream ended before a finish_reason or [DONE] ({what})")
        if self.end is None:
            self.end = now

    def outcome(self, failure: _Failure | None, now: float) -> Completion | _Failure:
        """What the attempt gets: the answer when nothing failed, or when it was complete before a
        timeout, a cut or the size limit; else the failure, with the timings so far."""
        if failure is None or (self.complete and failure.kind in ("timeout", "connection", "too_large")):
            return self.completion(now)
        if self.done and not self.answered and failure.kind in ("timeout", "connection"):
            failure = self.no_choice()  # [DONE] came: what went wrong after it is beside the point
        failure.ttft_s = self.ttft
        failure.latency_s = now - self.start
        return failure

    def _think(self, thought: str, now: float) -> None:
        """Keep a chunk of the reasoning field (event's, apart: a stream without thinking never
        comes here)."""
        thoughts = self.thoughts
        if thoughts is None:
            thoughts = self.thoughts = []
        thoughts.append(thought)
        if len(thoughts) >= COMPACT_PIECES:
            self.thought_blocks.append("".join(thoughts))
            thoughts.clear()
        self.thought_chunks += 1
        if self.ttft is None:
            self.ttft = now - self.start

    def body(self, data: bytes, now: float) -> None:
        """Apply a whole (non-streamed) JSON response body."""
        msg = _decode(_decode_body, data, "response body")
        if not msg.choices:
            raise _Failure("protocol", f"response has no choices: {_snippet(data)}")
        self.choices += 1
        self.answered += 1
        choice = msg.choices[0]
        message = choice.message
        text = message.content if message is not None else choice.text
        if text:
            self.pieces.append(text)
        if message is not None:
            thought = message.reasoning if message.reasoning is not None else message.reasoning_content
            if thought:
                self.thoughts = [thought]
        lp = choice.logprobs
        if lp is not None and lp.tokens is not None:
            if len({len(x) for x in (lp.tokens, lp.token_logprobs, lp.text_offset, lp.top_logprobs) if x is not None}) > 1:
                raise _Failure(
                    "protocol", f"logprobs lists of different lengths (tokens, token_logprobs, text_offset, top_logprobs): {_snippet(data)}"
                )
            self.logprobs = lp
        self.finish_reason = choice.finish_reason
        self.usage = msg.usage
        self.done = True
        self.end = now

    def reasoning_tokens(self, text: str) -> tuple[int | None, Literal["usage", "stream"] | None]:
        """How many tokens the reply thought, and who says so: the server's usage, else the stream
        (chunks of the reasoning field; for inline thinking, the content chunks before the one
        that closed it, or all of them when it never closed); (None, None) when neither can tell."""
        usage = self.usage
        details = usage.completion_tokens_details if usage is not None else None
        if details is not None and details.reasoning_tokens is not None:
            return details.reasoning_tokens, "usage"
        if self.thought_chunks:
            return self.thought_chunks, "stream"
        if self.tags is not None and self.content_chunks:
            if self.closed_after:
                return self.closed_after - 1, "stream"
            if self.tags[0] in text:
                return self.content_chunks, "stream"
        return None, None

    def completion(self, now: float) -> Completion:
        usage = self.usage
        lp = self.logprobs
        text = _text(self.blocks, self.pieces)
        n_thought, counted_by = self.reasoning_tokens(text)
        return Completion(
            status="ok",
            text=text,
            finish_reason=self.finish_reason,
            prompt_tokens=usage.prompt_tokens if usage is not None else None,
            completion_tokens=usage.completion_tokens if usage is not None else None,
            ttft_s=self.ttft,
            latency_s=(self.end if self.end is not None else now) - self.start,
            prompt_logprobs=lp.token_logprobs if lp is not None else None,
            prompt_tokens_text=lp.tokens if lp is not None else None,
            text_offsets=lp.text_offset if lp is not None else None,
            top_logprobs=lp.top_logprobs if lp is not None else None,
            reasoning=None if self.thoughts is None else _text(self.thought_blocks, self.thoughts),
            reasoning_tokens=n_thought,
            reasoning_tokens_from=counted_by,
        )


def _with_stream_fields(body: dict[str, Any], streamed: bool) -> dict[str, Any]:
    """The body as sent: streamed, it asks for the usage in the last chunk (on top of any
    stream_options it had); not streamed, any `stream` fields it had are gone."""
    if streamed:
        options = body.get("stream_options")
        return {**body, "stream": True, "stream_options": {**(options if isinstance(options, dict) else {}), "include_usage": True}}
    if "stream" in body or "stream_options" in body:
        return {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
    return body


def _cache_hit(cache: Any, key: str) -> Completion | None:
    """The answer stored under `key` as a Completion (no attempt, nothing on the wire), or None."""
    looked_up = time.perf_counter()
    entry = cache.lookup(key)
    if entry is None:
        return None
    return Completion(
        status="ok",
        text=entry.text,
        finish_reason=entry.finish_reason,
        prompt_tokens=entry.prompt_tokens,
        completion_tokens=entry.completion_tokens,
        prompt_logprobs=entry.prompt_logprobs,
        prompt_tokens_text=entry.prompt_tokens_text,
        text_offsets=entry.text_offsets,
        top_logprobs=entry.top_logprobs,
        started_at=time.time(),
        latency_s=time.perf_counter() - looked_up,
        attempts=0,
        cached=True,
        reasoning=entry.reasoning,
        reasoning_tokens=entry.reasoning_tokens,
        reasoning_tokens_from=entry.reasoning_tokens_from,
    )


def _too_large(limit: int, received: int) -> _Failure:
    return _Failure(
        "too_large",
        f"the response passed max_response_bytes ({limit} bytes) after {received} bytes and was cut there: a server "
        "streaming without end, or an answer longer than expected (then raise the service's max_response_bytes)",
        retryable=False,
    )


def _snippet(data: bytes | bytearray, limit: int = 200) -> str:
    text = bytes(data[:limit]).decode("utf-8", "replace")
    return repr(text) + ("…" if len(data) > limit else "")


class Client:
    """One per shard: a pooled aiohttp session plus the retry and timeout policy of a service."""

    def __init__(self, endpoint: Endpoint, config: ServiceConfig, pool_size: int) -> None:
        self.endpoint = endpoint
        self.config = config
        self.pool_size = max(1, int(pool_size))
        self._url = endpoint.url()
        self._urls = {p: Endpoint(endpoint.base_url, endpoint.model, p).url() for p in ("chat_completions", "completions")}
        self._headers = {"Content-Type": "application/json"}
        self._secret: str | None = None
        if endpoint.api_key_env:
            key = os.environ.get(endpoint.api_key_env, "")
            if not key.strip():
                state = "is empty" if endpoint.api_key_env in os.environ else "is not set"
                raise UsageError(
                    f"environment variable {endpoint.api_key_env} (api_key_env of the service) {state}; "
                    f"export {endpoint.api_key_env}=<your API key>, or remove api_key_env if the server needs no key"
                )
            self._headers["Authorization"] = f"Bearer {key.strip()}"
            if is_secret(key):
                self._secret = key.strip()
            else:
                log.info(
                    "%s holds a key of %d character(s), under the %d of a secret: it is sent, but not looked for "
                    "in what the server returns (replacing it there would rewrite answers)",
                    endpoint.api_key_env,
                    len(key.strip()),
                    MIN_SECRET_CHARS,
                )
        tags = config.reasoning_tags
        self._tags: tuple[str, str] | None = (tags[0], tags[1]) if tags else None  # inline thinking, for the stream's count
        self._echoed = False  # whether an answer held the key (logged once)
        self._session: aiohttp.ClientSession | None = None
        self.cache: Any = None  # shardeval.run.response_cache.ClientCache, set by `use_cache`

    def use_cache(self, store: Any, served: Any = None) -> None:
        """Answer from and into the response cache `store` (a shardeval.run.response_cache.ResponseCache; None:
        no cache); `served` is what the endpoint said it serves (a hit stored for another is refused)."""
        self.cache = None if store is None else ClientCache(store, self.config, served)

    def __repr__(self) -> str:  # never shows the headers: they hold the key
        return f"Client({self._url!r}, protocol={self.endpoint.protocol!r}, pool_size={self.pool_size})"

    async def __aenter__(self) -> Client:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=self.pool_size, keepalive_timeout=KEEPALIVE_S),
            headers=self._headers,
            timeout=aiohttp.ClientTimeout(total=None, connect=None, sock_connect=self.config.timeouts.connect, sock_read=None),
            cookie_jar=aiohttp.DummyCookieJar(),
        )
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def get_json(self, url: str, timeout_s: float = 10.0) -> Any:
        """GET `url` with the service's headers (its key included) and decode the JSON body.

        For the endpoint's metadata (/v1/models, /version), never for answers: one attempt, no
        retries. Raises ValueError with a scrubbed one-line reason on any failure.
        """
        assert self._session is not None, "use `async with Client(...)`"
        try:
            async with self._session.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
                body = await resp.read()
                if resp.status != 200:
                    raise ValueError(self.scrub(f"HTTP {resp.status} {_snippet(body, 120)}"))
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise ValueError(self.scrub(f"{type(exc).__name__}: {exc}")) from None
        try:
            return self._hide_in(msgspec.json.decode(body))
        except _UNDECODABLE:
            raise ValueError(self.scrub(f"not JSON: {_snippet(body, 120)}")) from None

    def scrub(self, text: str) -> str:
        """Trim a message to one short line and make sure the API key can never be part of it."""
        text = redact_urls(self._hide(" ".join(text.split())) or "")
        return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"

    def _hide(self, text: str | None) -> str | None:
        """The server's text with the API key replaced by `***`, otherwise untouched."""
        secret = self._secret
        return text.replace(secret, "***") if secret and text and secret in text else text

    def _hide_in(self, value: Any) -> Any:
        """`_hide` applied to every string of decoded JSON (keys included)."""
        if not self._secret:
            return value
        if isinstance(value, str):
            return self._hide(value)
        if isinstance(value, list):
            return [self._hide_in(v) for v in value]
        if isinstance(value, dict):
            return {self._hide(k): self._hide_in(v) for k, v in value.items()}
        return value

    def _hide_in_answer(self, c: Completion) -> Completion:
        """The key out of every text a server put into an answer (a server that echoes it); the
        first answer so changed is logged, so a changed answer is never silent."""
        if not self._echoed and (self._secret in (c.text or "") or self._secret in (c.reasoning or "")):  # type: ignore[operator]
            self._echoed = True
            log.warning(
                "the server at %s echoed the API key inside an answer: replaced by *** there and in any later "
                "answer (the record holds the answer so changed)",
                self._url,
            )
        c.text = self._hide(c.text) or ""
        c.reasoning = self._hide(c.reasoning)
        c.finish_reason = self._hide(c.finish_reason)
        if c.prompt_tokens_text is not None and any(self._secret in t for t in c.prompt_tokens_text if t):  # type: ignore[operator]
            c.prompt_tokens_text = [self._hide(t) or "" for t in c.prompt_tokens_text]
        return c

    async def request(
        self,
        body: dict[str, Any],
        slots: asyncio.Semaphore | AdaptiveSlots | None = None,
        *,
        stream: bool | None = None,
        protocol: Protocol | None = None,
        cache_if: Callable[[Completion], bool] | None = None,
        cache_salt: str | None = None,
    ) -> Completion:
        """Send one request with retries; return its Completion. Raises only CancelledError.

        `slots`, when given, is held only while an HTTP attempt is in flight, never during backoff.
        `stream` and `protocol` override the service's for this request (None: the service's);
        retries, timeouts and error kinds are the same either way. `cache_if`, when given, says
        whether an ok answer may be stored in the response cache (a judge's reply without a
        verdict is not, so a rerun asks the judge again instead of reading it back).
        """
        if self._session is None:
            raise RuntimeError("Client.request() called outside `async with Client(...)`")
        streamed = self.config.stream if stream is None else stream
        url = self._url if protocol is None else self._urls[protocol]
        cache = self.cache
        payload, key = self._encode(_with_stream_fields(body, streamed), cache, protocol, cache_salt)
        if key is not None:  # a hit is no request: no slot, no attempt, nothing on the wire
            hit = _cache_hit(cache, key)
            if hit is not None:
                return hit
        # the attempts, until one answers or no retry is left; the last failure becomes an error Completion
        retries = self.config.retries
        attempts = max(1, retries.attempts)
        loop = asyncio.get_running_loop()
        started_at = queued = 0.0
        for attempt in itertools.count(1):
            if slots is not None:
                waited_from = loop.time()
                await slots.acquire()
                queued += loop.time() - waited_from
            if attempt == 1:
                started_at = time.time()  # after any queueing: when the first attempt really starts
            attempt_start = loop.time()
            try:
                outcome = await self._attempt(payload, loop, url, streamed)
            finally:
                if slots is not None:
                    slots.release()
            feedback = getattr(slots, "feedback", None)  # adaptive concurrency (shardeval.run.adaptive)
            if feedback is not None:
                feedback(attempt_start, isinstance(outcome, _Failure) and outcome.kind == "rate_limited")
            if isinstance(outcome, _Failure):
                message = self.scrub(outcome.message)
                if outcome.retryable and attempt < attempts:
                    delay = backoff_delay(attempt - 1, retries.backoff_base, retries.backoff_max, outcome.retry_after)
                    log.debug("attempt %d/%d failed (%s: %s); retrying in %.2f s", attempt, attempts, outcome.kind, message, delay)
                    await asyncio.sleep(delay)
                    continue
                outcome = Completion(
                    status="error", error_kind=outcome.kind, error=message, ttft_s=outcome.ttft_s, latency_s=outcome.latency_s
                )
            else:
                self._keep_answer(outcome, cache, key, cache_if)
            outcome.started_at, outcome.attempts, outcome.queued_s = started_at, attempt, queued
            return outcome
        raise AssertionError("unreachable: itertools.count() never ends")  # for the type checker

    def _encode(self, body: dict[str, Any], cache: Any, protocol: Protocol | None, cache_salt: str | None) -> tuple[bytes, str | None]:
        """The bytes to send and, with a cache, the key they are stored under (else None). With a
        cache the body is encoded keys sorted, so the key hashes the bytes that are sent;
        `cache_salt` is what the body names but does not hold (the digests of images sent as
        file:// URLs)."""
        if cache is None:
            return msgspec.json.encode(body), None
        payload = msgspec.json.encode(body, order="sorted")
        return payload, cache.key(
            protocol or self.endpoint.protocol, payload if cache_salt is None else payload + b"\n" + cache_salt.encode()
        )

    def _keep_answer(self, outcome: Completion, cache: Any, key: str | None, cache_if: Callable[[Completion], bool] | None) -> None:
        """An ok answer, final and whole: the key out of its text, then into the response cache
        (errors and cut streams never go there)."""
        if self._secret:
            self._hide_in_answer(outcome)
        if key is not None and (cache_if is None or cache_if(outcome)):
            cache.store_answer(key, outcome)

    async def _attempt(self, payload: bytes, loop: asyncio.AbstractEventLoop, url: str, streamed: bool) -> Completion | _Failure:
        """One HTTP exchange under the watchdog. Returns the answer or the reason there is none."""
        assert self._session is not None
        task = asyncio.current_task()
        start = loop.time()
        watchdog = _Watchdog(loop, task, self.config.timeouts, start)
        reading = _Reading(start, self._tags)
        failure: _Failure | None = None
        try:
            async with self._session.post(url, data=payload) as resp:
                await self._reader(resp, watchdog, reading, streamed)
        except asyncio.CancelledError:
            if watchdog.expired is None or not _own_cancel(task):
                raise
            failure = _Failure("timeout", watchdog.expired)
        except _Failure as exc:
            failure = exc
        except _BAD_URL as exc:  # a config mistake: retrying cannot help
            failure = _Failure("client", f"invalid URL: {exc}", retryable=False)
        except aiohttp.ServerTimeoutError:
            failure = _Failure("connection", f"connect timeout: no connection to {url} within {self.config.timeouts.connect} s")
        except aiohttp.ClientPayloadError as exc:
            failure = _Failure("connection", f"stream cut by the server: {exc}")
        except (aiohttp.ClientError, OSError) as exc:
            failure = _Failure("connection", f"{type(exc).__name__}: {exc}")
        finally:
            watchdog.cancel()
        return reading.outcome(failure, loop.time())

    def _reader(self, resp: aiohttp.ClientResponse, watchdog: _Watchdog, reading: _Reading, streamed: bool) -> Awaitable[None]:
        """What reads the response into `reading`: an event stream or a JSON body, whichever came,
        or, for a status other than 2xx, its failure. A plain function handing back the reading
        coroutine, so the hot path's await chain is no deeper than before."""
        if not 200 <= resp.status < 300:
            return self._raise_status(resp, watchdog)
        ctype = resp.content_type
        if ctype == "text/event-stream" or (streamed and ctype != "application/json"):
            return self._read_stream(resp, watchdog, reading, ctype)
        return self._read_body(resp, watchdog, reading)  # asked not to stream, or a server that ignored `stream: true`

    async def _raise_status(self, resp: aiohttp.ClientResponse, watchdog: _Watchdog) -> None:
        """A status other than 2xx: raise its failure, with the server's message."""
        detail = await self._error_detail(resp, watchdog)
        text = f"HTTP {resp.status}" + (f" {resp.reason}" if resp.reason else "") + (f": {detail}" if detail else "")
        other: ErrorKind = "server_error" if resp.status >= 500 else "protocol"  # 1xx/3xx: not an answer
        raise _status_failure(resp.status, text, parse_retry_after(resp.headers), other)

    async def _read_stream(self, resp: aiohttp.ClientResponse, watchdog: _Watchdog, reading: _Reading, ctype: str) -> None:
        """The SSE hot path: per chunk, one timestamp and one parser call."""
        parser = SSEParser()
        feed = parser.feed
        readany = resp.content.readany
        at_eof = resp.content.at_eof
        clock = watchdog._loop.time
        handle = reading.event
        waiting_first = True
        limit = self.config.max_response_bytes
        received = 0
        while True:
            chunk = await readany()
            if not chunk:
                break
            received += len(chunk)
            if received > limit:
                raise _too_large(limit, received)
            now = clock()
            progress = reading.progress
            for data in feed(chunk):
                handle(data, now)
            if reading.progress != progress:  # content, not a keep-alive: the idle clock restarts
                watchdog.last = now
                if waiting_first:  # the first token: from now on only gaps count (the pending check is early enough)
                    waiting_first = False
                    watchdog.phase = _IDLE
            if reading.done:
                if at_eof():  # the usual case: [DONE] and the end of the body came together
                    break
                if watchdog.phase != _DRAIN:
                    watchdog.drain()
        now = clock()
        for data in parser.finish():
            handle(data, now)
        reading.stream_ended(ctype, now)

    async def _read_body(self, resp: aiohttp.ClientResponse, watchdog: _Watchdog, reading: _Reading) -> None:
        """A non-streamed JSON body, read chunk by chunk so first_token and idle still apply."""
        buf = bytearray()
        readany = resp.content.readany
        clock = watchdog._loop.time
        limit = self.config.max_response_bytes
        while True:
            chunk = await readany()
            if not chunk:
                break
            if len(buf) + len(chunk) > limit:
                raise _too_large(limit, len(buf) + len(chunk))
            watchdog.last = clock()
            if not buf:
                watchdog.phase = _IDLE
            buf += chunk
        reading.body(bytes(buf), clock())

    async def _error_detail(self, resp: aiohttp.ClientResponse, watchdog: _Watchdog) -> str:
        """The server's error message from a non-2xx response (first 64 KiB), for Completion.error."""
        buf = bytearray()
        clock = watchdog._loop.time
        with suppress(aiohttp.ClientError, OSError):  # the status alone is enough to classify it
            while len(buf) < _ERROR_BODY_BYTES:
                chunk = await resp.content.read(_ERROR_BODY_BYTES - len(buf))
                if not chunk:
                    break
                watchdog.last = clock()
                buf += chunk
        return _detail(bytes(buf))
