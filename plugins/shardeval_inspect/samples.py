"""An Inspect sample, as it ended, becomes a shardeval answer: its completion, scores and transcript.

Kept as Inspect gave them: the answer is `output.completion` (the text content of the last
assistant message: Inspect's provider has already put a reasoning model's thinking, from the
server's reasoning field or inline `<think>` tags, into ContentReasoning), and that thinking is the
record's `reasoning`; each scorer's value is read by Inspect's own `value_to_float`
(`scores[scorer]`, or `scores[scorer/key]` for a scorer with several values; the first is the
headline), the usage is the sum over the sample's model calls (reasoning tokens included). A sample
that ended in an error, or ran out of a limit, is an error record of its own kind (`inspect`,
`limit`), never scored as wrong. The whole EvalSample rides in the trajectory's `request` under
`inspect.sample`, so the merge can write one Inspect log with every shard's samples.
"""

from __future__ import annotations

import json
import math
import re
from datetime import datetime
from typing import TYPE_CHECKING, Any
from collections.abc import Callable, Sequence

from shardeval.api.benchmark import Score
from shardeval.api.solver import Attempt, Completion

from shardeval_inspect.task import first_line

if TYPE_CHECKING:
    from inspect_ai.log import EvalSample
    from inspect_ai.model import ChatMessage, ModelOutput

ERROR_KIND, LIMIT_KIND = "inspect", "limit"
# A sample error that is the endpoint's failing (the openai client's exception, after Inspect's
# retries) keeps shardeval's kind for it, so an unreachable server stops the shard as it would a
# native benchmark's; any other error in the task's code or tools is kind `inspect`.
API_ERRORS = (
    ("APIConnectionError", "connection"),
    ("APITimeoutError", "timeout"),
    ("RateLimitError", "rate_limited"),
    ("InternalServerError", "server_error"),
    ("ServiceUnavailableError", "server_error"),
    ("BadRequestError", "client"),
    ("NotFoundError", "client"),
    ("AuthenticationError", "client"),
    ("PermissionDeniedError", "client"),
)
ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def attempt_of(sample: EvalSample, scrub: Callable[[str], str], epoch: int, tags: Sequence[str] = ()) -> Attempt:
    """The Attempt for one ended Inspect sample (an EvalSample) that answers the run's `epoch`
    (1-based): a resumed sample may have run as Inspect's epoch 1 for the run's epoch 3, and the
    saved sample says which epoch of the run it is. `tags`: the service's reasoning_tags."""
    completion = _completion(sample, scrub, tags)
    score = _score(sample) if completion.status == "ok" else None
    if completion.status == "ok" and score is None:
        completion = Completion(
            status="error",
            error_kind=ERROR_KIND,
            error="Inspect gave the sample no score",
            started_at=completion.started_at,
            latency_s=completion.latency_s,
            attempts=1,
        )
    saved = sample.model_dump(mode="json", exclude_none=True)
    saved["epoch"] = epoch
    request = {"inspect": {"sample_id": sample.id, "epoch": epoch, "sample": saved}}
    return Attempt(completion=completion, messages=transcript(sample.messages), request=request, score=score)


def _completion(sample: EvalSample, scrub: Callable[[str], str], tags: Sequence[str] = ()) -> Completion:
    started = _timestamp(getattr(sample, "started_at", None))
    latency = sample.total_time
    usage = list((sample.model_usage or {}).values())
    prompt = sum(u.input_tokens for u in usage) if usage else None
    generated = sum(u.output_tokens for u in usage) if usage else None
    common: dict[str, Any] = {
        "started_at": started,
        "latency_s": latency,
        "attempts": 1 + len(sample.error_retries or []),
        "prompt_tokens": prompt,
        "completion_tokens": generated,
    }
    thought = [n for u in usage if (n := getattr(u, "reasoning_tokens", None)) is not None]
    if thought:
        common.update(reasoning_tokens=sum(thought), reasoning_tokens_from="usage")
    if sample.error is not None:
        message = ADDRESS.sub("", first_line(sample.error.message))
        kind = next((k for name, k in API_ERRORS if name in message or name in (sample.error.traceback or "")), ERROR_KIND)
        return Completion(status="error", error_kind=kind, error=scrub(message), **common)
    if sample.limit is not None:
        what = f"{sample.limit.type} limit {sample.limit.limit:g} exceeded"
        return Completion(status="error", error_kind=LIMIT_KIND, error=f"Inspect stopped the sample: {what}", **common)
    output = sample.output
    reason = output.choices[0].stop_reason if output is not None and output.choices else None
    text = output.completion if output is not None else ""
    return Completion(status="ok", text=text, finish_reason=reason, reasoning=_reasoning(output, text, tags), **common)


def _reasoning(output: ModelOutput | None, text: str, tags: Sequence[str]) -> str | None:
    """The thinking of the sample's answer: its ContentReasoning blocks (a redacted one by its
    summary), joined. Inspect's split of the reply stands: when it found no thinking but the answer
    holds one of `tags` (a closing tag with no opening one, which Inspect's parser leaves in the
    text and its scorers score), the thinking is "" so that shardeval does not split that answer
    again, and the record's answer is what Inspect scored."""
    from inspect_ai.model import ContentReasoning

    message = output.choices[0].message if output is not None and output.choices else None
    content = message.content if message is not None else ""
    blocks = [c for c in content if isinstance(c, ContentReasoning)] if isinstance(content, list) else []
    if blocks:
        return "\n\n".join((b.summary or "") if b.redacted else b.reasoning for b in blocks)
    return "" if any(tag and tag in text for tag in tags) else None


def _score(sample: EvalSample) -> Score | None:
    """Every scorer's value as a float; the first scorer's is the headline."""
    from inspect_ai.scorer import value_to_float

    to_float = value_to_float()
    scores: dict[str, float] = {}
    given = sample.scores or {}
    for name, s in given.items():
        if isinstance(s.value, dict):
            scores.update({f"{name}/{key}": to_float(v) for key, v in s.value.items()})
        elif isinstance(s.value, list):
            scores.update({f"{name}/{i}": to_float(v) for i, v in enumerate(s.value)})
        else:
            scores[name] = to_float(s.value)
    if not scores:
        return None
    first = next(iter(given.values()))
    headline = next(iter(scores.values()))
    if math.isnan(headline):
        return None
    return Score(score=headline, extracted=first.answer, scores=scores)


def transcript(messages: list[ChatMessage]) -> list[dict[str, str]]:
    """The conversation as role/content turns; a tool call is written into its assistant turn."""
    turns = []
    for m in messages or []:
        text = m.text
        calls = getattr(m, "tool_calls", None) or []
        lines = [f"[tool call {c.id}] {c.function}({json.dumps(c.arguments, ensure_ascii=False)})" for c in calls]
        if (error := getattr(m, "error", None)) is not None:  # a tool message's
            lines.append(f"[tool error] {error.type}: {error.message}")
        turns.append({"role": m.role, "content": "\n".join(x for x in (text, *lines) if x)})
    return turns


def _timestamp(value: object) -> float:
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, str):
        return datetime.fromisoformat(value).timestamp()
    return 0.0
