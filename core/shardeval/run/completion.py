"""A request's outcome: what the client returns and solvers combine (no HTTP here, so a solver
module, which plugin registration imports, stays light: aiohttp loads with the client only)."""

from __future__ import annotations

from typing import Literal

import msgspec


class Completion(msgspec.Struct, kw_only=True):
    """The outcome of one request, retries included. Timings are of the final attempt."""

    status: Literal["ok", "error"]
    text: str = ""
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    ttft_s: float | None = None  # to the first generated token (content or reasoning); None unstreamed
    latency_s: float | None = None
    started_at: float = 0.0  # unix time of the first attempt
    attempts: int = 0
    error_kind: str | None = (
        None  # timeout | rate_limited | server_error | connection | protocol | client | too_large (checkpoint_gone: shardeval.run.unavailable)
    )
    error: str | None = None
    queued_s: float = 0.0  # waiting for a concurrency slot: client-side queueing, apart from the server
    # From a non-streamed completions response's `logprobs` (None when the server sent none); with
    # `echo: true` they cover the prompt's tokens, then any generated ones:
    prompt_logprobs: list[float | None] | None = None  # `token_logprobs`; the prompt's first is null (nothing precedes it)
    prompt_tokens_text: list[str] | None = None  # `tokens`, as text
    text_offsets: list[int] | None = None  # `text_offset`: where each token starts in `choices[0].text`
    # `top_logprobs`: per token, the most likely tokens and their logprobs (lm-eval's is_greedy)
    top_logprobs: list[dict[str, float] | None] | None = None
    cached: bool = False  # served from the response cache (shardeval.run.response_cache): no request was sent
    # A reasoning model's thinking as the server sent it in a field of its own (`reasoning` or
    # `reasoning_content`; None: it sent none, though the text may still hold inline tags), and how
    # many tokens it thought: from the usage's `completion_tokens_details.reasoning_tokens`
    # ("usage"), else counted by the stream, one token per chunk ("stream"); None: not known.
    # shardeval.benchmark.reasoning splits the reply; the record keeps both parts.
    reasoning: str | None = None
    reasoning_tokens: int | None = None
    reasoning_tokens_from: Literal["usage", "stream"] | None = None
