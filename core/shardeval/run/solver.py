"""The solver API: how one problem becomes requests to a model; the `simple` and `loglikelihood` solvers.

A solver receives the problem and its seed and returns an `Attempt`: the final completion (with
its status and timings) plus the conversation it had, and any named scores only the solver can
know (log-probabilities). Scoring stays with the benchmark: the runner merges the solver's
`scores` into the benchmark's.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol
from collections.abc import Awaitable, Callable, Iterable, Sequence

import msgspec

from shardeval.benchmark import Problem, Score
from shardeval.benchmark.images import IMAGE_MARKER, STORE, ImageRef, ImageUnavailable, split_prompt
from shardeval.config import Generation, ServiceConfig, SolverConfig
from shardeval.numbers import finite_number
from shardeval.run.completion import Completion
from shardeval.run.service import Endpoint

if TYPE_CHECKING:
    from shardeval.run.adaptive import AdaptiveSlots

log = logging.getLogger("shardeval.run.solver")


@dataclass
class Attempt:
    completion: Any  # shardeval.run.client.Completion
    messages: list[dict[str, str]]
    request: dict[str, Any]
    scores: dict[str, float] = field(default_factory=dict)  # merged into the record's `scores`
    # The solver's own verdict, when another tool's scorers ran inside its runtime (an Inspect
    # task's, which may need its sandbox): the record takes it instead of the benchmark's `score`.
    score: Score | None = None


@dataclass(frozen=True)
class ServiceHandle:
    """A running service as a solver sees it: its endpoint, the shard's shared client, and the
    benchmark's concurrency slots (held only while a request is on the wire, not during backoff)."""

    endpoint: Endpoint
    client: Any  # shardeval.run.client.Client
    slots: asyncio.Semaphore | AdaptiveSlots | None = None
    served: Any = None  # shardeval.store.records.ServedModel: what the endpoint said it serves
    max_concurrent: int | None = None  # the benchmark's; for a solver that runs its own concurrency (PairsSolver)


Settle = Callable[[Problem, int, Attempt], Awaitable[None]]
SolvePairs = Callable[[list[tuple[Problem, int, int]], Settle], Awaitable[None]]


class Share(Protocol):
    """A shard's share of one benchmark as the runner hands it to a solver: the pairs not yet
    answered, and the two ways there are to answer them. The runner writes each record and keeps
    the shard's stop, resume and failure rules whichever way is taken."""

    async def ask_each(self, solve: Callable[[Problem, int], Awaitable[Attempt]]) -> None:
        """Ask every pending pair on its own through `solve(problem, seed)`, the runner keeping the
        benchmark's concurrency; a pair whose `solve` raises gets its own `internal` error record."""

    async def ask_all(self, solve_pairs: SolvePairs) -> None:
        """Hand every pending (problem, repeat, seed) to `solve_pairs` at once; it awaits
        `settle(problem, repeat, attempt)` as each pair ends (see PairsSolver)."""


class Solver:
    """How a problem becomes requests to a model. The runner calls one entry, `answer_share`; the
    default asks each pair on its own through `solve`, which is all most solvers write."""

    async def solve(self, problem: Problem, seed: int) -> Attempt:
        raise NotImplementedError(f"{type(self).__name__} does not say how to solve a problem")

    async def answer_share(self, share: Share) -> None:
        """Answer the shard's share of a benchmark: each pair on its own, through `solve`."""
        await share.ask_each(self.solve)


class PairsSolver(Solver):
    """A solver that runs a shard's whole share itself, with its own concurrency: another tool's
    runtime (Inspect's eval loop) that must see every sample at once. It is handed every pending
    (problem, repeat, seed) and calls `settle` once per pair as each ends, so each record is
    written the moment its answer exists (a SIGKILL loses only what was in flight). A pair it never
    settles gets an `internal` error record when it returns or raises (asked again on rerun); when
    the shard stops, its task is cancelled like any request in flight."""

    async def solve(self, problem: Problem, seed: int) -> Attempt:
        raise NotImplementedError(f"{type(self).__name__} answers a shard's pairs together, through solve_pairs")

    async def solve_pairs(self, pairs: list[tuple[Problem, int, int]], settle: Settle) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not say how to solve its pairs")

    async def answer_share(self, share: Share) -> None:
        """Answer the shard's share of a benchmark: every pair at once, through `solve_pairs`."""
        await share.ask_all(self.solve_pairs)


class _DuckSolver(Solver):
    """A solver written before `Solver` was a base class (an object with `solve`, and perhaps
    `solve_pairs`): answers its share as it did then. Deprecated: subclass Solver or PairsSolver."""

    def __init__(self, made: Any) -> None:
        self.made = made

    async def solve(self, problem: Problem, seed: int) -> Attempt:
        return await self.made.solve(problem, seed)

    async def answer_share(self, share: Share) -> None:
        solve_pairs = getattr(self.made, "solve_pairs", None)
        await (share.ask_all(solve_pairs) if solve_pairs is not None else share.ask_each(self.made.solve))


def as_solver(made: Any) -> Solver:
    """What a solver factory made, as a Solver: a third-party solver that does not derive from
    Solver keeps working for one release, with a DeprecationWarning."""
    if isinstance(made, Solver):
        return made
    warnings.warn(
        f"{type(made).__name__}: a solver should derive from shardeval.api.Solver (or PairsSolver, "
        "for one that runs a shard's whole share itself)",
        DeprecationWarning,
        stacklevel=2,
    )
    return _DuckSolver(made)


SolverFactory = Callable[[SolverConfig, ServiceHandle], Solver]


def generation_params(gen: Generation, service: ServiceConfig | None = None) -> dict[str, Any]:
    """The request fields a Generation section sets (unset ones are left to the server): its
    sampling keys, its `reasoning` (over the service's own, ServiceConfig.reasoning_for) as
    `service` asks for it (ServiceConfig.reasoning_request, checked at config load), then `extra`,
    which wins a clash."""
    params = {key: getattr(gen, key) for key in ("temperature", "top_p", "top_k", "max_tokens", "stop")}
    reasoning = service.reasoning_for(gen.reasoning) if service is not None else None
    thinking = service.reasoning_request(reasoning) if reasoning is not None and service is not None else {}
    extra = gen.extra
    kwargs = extra.get("chat_template_kwargs")
    if "chat_template_kwargs" in thinking and isinstance(kwargs, dict):  # both speak to the template: one dict, extra's keys win
        extra = {**extra, "chat_template_kwargs": {**thinking["chat_template_kwargs"], **kwargs}}
    return {**{k: v for k, v in params.items() if v is not None}, **thinking, **extra}


def conversation(config: SolverConfig, problem: Problem) -> list[dict[str, str]]:
    """The turns sent for `problem`: the optional system prompt, then the problem's own."""
    system = [{"role": "system", "content": config.system_prompt}] if config.system_prompt else []
    turns = problem.messages if problem.messages is not None else [{"role": "user", "content": problem.prompt or ""}]
    return [*system, *turns]


class SimpleSolver(Solver):
    """One request per (problem, repeat): optional system prompt, then the problem's turns.

    A problem that can only be answered by scoring (metadata `scoring: loglikelihood`, set by
    e.g. `mmlu` in loglikelihood mode and `perplexity`) goes to the `loglikelihood` solver, so
    such a benchmark works without `solver.type` in the config.
    """

    def __init__(self, config: SolverConfig, service: ServiceHandle) -> None:
        self.config = config
        self.service = service
        self.params = generation_params(config.generation, getattr(service.client, "config", None))
        self._scorer: LoglikelihoodSolver | None = None

    def payload(self, problem: Problem, seed: int) -> tuple[dict[str, Any], list[dict[str, str]]]:
        """The request body and the conversation as the trajectory keeps it (images as placeholders).
        Raises ImageUnavailable when an image cannot be read now."""
        endpoint = self.service.endpoint
        messages = conversation(self.config, problem)
        chat = endpoint.protocol == "chat_completions"
        turns: dict[str, Any]
        if problem.images:
            if not chat:  # refused at config load (shardeval.run.runner.check_images); never sent half an image
                raise ValueError(f"problem {problem.id} has images, which need protocol chat_completions")
            sent, messages = image_turns(messages, problem.images, getattr(self.service.client, "config", None))
            turns = {"messages": sent}
        else:
            turns = {"messages": messages} if chat else {"prompt": "\n\n".join(m["content"] for m in messages)}
        return {"model": endpoint.model, **turns, "seed": seed, **self.params}, messages  # the generation params win a clash

    async def solve(self, problem: Problem, seed: int) -> Attempt:
        if problem.metadata.get("scoring") == "loglikelihood":
            if self._scorer is None:
                self._scorer = LoglikelihoodSolver(self.config, self.service)
            return await self._scorer.solve(problem, seed)
        try:
            body, messages = self.payload(problem, seed)
        except ImageUnavailable as exc:  # infrastructure, not the model: an error of its own kind, asked again on rerun
            return Attempt(
                completion=Completion(status="error", error_kind="image", error=str(exc), started_at=time.time()),
                messages=conversation(self.config, problem),
                request={},
            )
        completion = await self.service.client.request(body, self.service.slots, cache_salt=image_salt(body, problem))
        turns = messages + [{"role": "assistant", "content": completion.text}]
        request = {k: v for k, v in body.items() if k not in ("messages", "prompt")}
        return Attempt(completion=completion, messages=turns, request=request)


def image_turns(messages: list[dict[str, str]], images: list[ImageRef], service: Any) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """The turns as sent, the last user turn's text split into text and image parts (`<image>`
    markers place them; none: images first), and the same turns as a trajectory keeps them, each
    image a placeholder naming its digest. An image is a file:// URL when the service reads files
    under `allowed_local_media_path` itself, else a base64 data URL from the shard's store."""
    last = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=None)
    if last is None:
        raise ValueError("the problem has images but no user turn to show them in")
    media_root = getattr(service, "allowed_local_media_path", None)
    content: list[dict[str, Any]] = []
    shown: list[str] = []
    for part in split_prompt(messages[last]["content"], len(images)):
        if isinstance(part, str):
            content.append({"type": "text", "text": part})
            shown.append(part)
        else:
            ref = images[part]
            url = STORE.file_url(ref, media_root) or STORE.data_url(ref)
            content.append({"type": "image_url", "image_url": {"url": url}})
            shown.append(ref.placeholder())
    sent: list[dict[str, Any]] = [*messages[:last], {**messages[last], "content": content}, *messages[last + 1 :]]
    # where the prompt had markers, each placeholder stands in its marker's place; without any, the
    # images came first and each placeholder gets its own line
    text = "".join(shown) if IMAGE_MARKER in messages[last]["content"] else "\n".join(shown)
    kept: list[dict[str, Any]] = [*messages[:last], {**messages[last], "content": text}, *messages[last + 1 :]]
    return sent, kept


def image_salt(body: dict[str, Any], problem: Problem) -> str | None:
    """What the response cache key adds for images the body names by path (file:// URLs): their
    digests, so a file replaced under the same name is never answered from the cache. Base64 data
    URLs are in the body already. Looks only at the parts image_turns made (no body re-encoded)."""
    if not problem.images:
        return None
    parts = (p for m in body.get("messages") or () if isinstance(m.get("content"), list) for p in m["content"])
    if not any(p.get("type") == "image_url" and p["image_url"]["url"].startswith("file://") for p in parts):
        return None
    return " ".join(ref.sha256 for ref in problem.images)


def default_labels(n: int) -> list[str]:
    """A, B, C, … for n choices (AA, AB, … past Z, which no benchmark needs but nothing breaks)."""
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    return [letters[i] if i < 26 else letters[i // 26 - 1] + letters[i % 26] for i in range(n)]


def split_trailing_space(context: str, continuation: str) -> tuple[str, str]:
    """Move the context's trailing whitespace onto the continuation (as lm-evaluation-harness does),
    so "Answer: " + "A" is scored as "Answer:" + " A": tokenizers put the space on the next word."""
    stripped = context.rstrip()
    return stripped, context[len(stripped) :] + continuation


def check_logprobs(logprobs: Sequence[Any], used: Iterable[int], tokens: Sequence[str] | None = None) -> None:
    """Raise ValueError naming the first of logprobs[i], i in `used`, that is not a finite number <= 0.

    A log-probability is at most 0; NaN, an infinity or a positive value is a server's bug that
    would otherwise be summed into a score (a positive one even above the truth)."""
    for i in used:
        v = logprobs[i]
        if not finite_number(v) or v > 0:
            name = f" ({tokens[i]!r})" if tokens is not None and i < len(tokens) else ""
            raise ValueError(f"the server sent logprob {v!r} for token {i}{name}; a log-probability is a finite number <= 0")


def span_logprobs(
    tokens: Sequence[str],
    logprobs: Sequence[float | None],
    offsets: Sequence[int],
    *,
    prompt_len: int,
    start: int,
    n_generated: int = 0,
    allow_empty: bool = False,
) -> tuple[list[str], list[float]]:
    """The tokens of prompt[start:] and their log-probabilities, from an echo response's logprobs.

    A token belongs to the span when its text offset is >= `start` (a token straddling the
    boundary belongs to the context). The last `n_generated` entries (tokens generated after the
    echoed prompt) are dropped. Offsets are first aligned so that the last prompt token ends at
    `prompt_len`: vLLM counts the text of a leading BOS token (e.g. "<s>"), which shifts every
    offset by its length. The prompt's first token has no logprob (nothing precedes it) and is
    never counted; any other null inside the span is an error, as is a span with no token (which
    would score 0, the highest possible log-probability) unless `allow_empty` (a one-token
    document: nothing to score). Raises ValueError saying which.
    """
    n = len(tokens) - n_generated
    if n <= 0 or len(logprobs) != len(tokens) or len(offsets) != len(tokens):
        raise ValueError(
            f"the logprobs hold {len(tokens)} token(s), {len(logprobs)} logprob(s) and {len(offsets)} offset(s) "
            f"for a prompt of {prompt_len} characters"
        )
    shift = offsets[n - 1] + len(tokens[n - 1]) - prompt_len
    if offsets[0] - shift > 0:  # the echoed tokens begin inside the prompt: some of it was never scored
        raise ValueError(
            f"the logprobs cover only the prompt's last {prompt_len - (offsets[0] - shift)} of {prompt_len} characters "
            f"({n} token(s)); the echo must hold every prompt token"
        )
    span = [i for i in range(n) if offsets[i] - shift >= start and (i or logprobs[0] is not None)]
    missing = next((i for i in span if logprobs[i] is None), None)
    if missing is not None:
        raise ValueError(f"the server sent no logprob for prompt token {missing} ({tokens[missing]!r})")
    check_logprobs(logprobs, span, tokens)
    if not span and not allow_empty:
        raise ValueError(
            f"no scored token starts at or after character {start} of the prompt (the tokenizer merged the continuation "
            "into the context, or the text to score is a single token with nothing before it)"
        )
    return [tokens[i] for i in span], [float(logprobs[i]) for i in span]  # type: ignore[arg-type]


def rolling_windows(text: str, max_chars: int | None, context_chars: int) -> list[tuple[int, int, int]]:
    """Split `text` into requests (context_start, start, end) of at most `max_chars` characters.

    text[start:end] is scored in each window and text[context_start:start] (at most
    `context_chars`, starting at a whitespace where possible) only conditions it. Pieces end where a
    whitespace run begins, so the next piece starts with the space its first token carries; a
    piece with no whitespace is cut hard. None: one window for the whole text.
    """
    length = len(text)
    if max_chars is None or length <= max_chars:
        return [(0, 0, length)]
    step = max_chars - context_chars
    if step <= 0 or context_chars < 0:
        raise ValueError(f"context_chars ({context_chars}) must be >= 0 and below max_chars_per_request ({max_chars})")
    windows = []
    s = 0
    while s < length:
        e = min(length, s + (step if s else max_chars))
        if e < length:
            e = next((i for i in range(e, s, -1) if text[i].isspace() and not text[i - 1].isspace()), e)
        cs = max(0, s - context_chars)  # the first window (s == 0) has no context
        windows.append((next((i for i in range(cs, s) if text[i].isspace()), cs), s, e))
        s = e
    return windows


class LoglikelihoodSolver(Solver):
    """Scores text by its log-probability under the model: `/v1/completions` with `echo: true,
    logprobs: 1, max_tokens: 0`, never streamed, whatever the service's protocol and stream setting.

    Multiple choice (problem.metadata["choices"]: continuation strings; "labels": what the reply
    says for each, default A, B, C, …): the context is the prompt (system prompt and turns joined
    by blank lines, as the simple solver's completions prompt); one request per choice with prompt =
    context + choice; a choice's log-likelihood is the sum of the logprobs of its tokens (those
    starting at or after the context's end, see `span_logprobs`). The reply is the label of the
    highest sum (the first on a tie), so the benchmark's own `score` applies; scores carry
    `logprob_<label>` for every choice and, when the problem has a reference label, `acc_norm`:
    whether the highest sum divided by the choice's length in characters is the reference
    (lm-evaluation-harness's acc_norm). The trajectory's request holds the per-choice numbers.

    Rolling (no "choices"): the last turn is the text to score, earlier turns (a system prompt)
    only condition it. Scores: `nll` (minus the summed logprobs) and `tokens` (how many were
    scored: every token but the very first, which has nothing before it, unless a context or the
    server's BOS precedes it); the reply is the per-token nll, as text. metadata
    "max_chars_per_request" splits long texts into windows (see `rolling_windows`; default
    "context_chars": a quarter of it) for servers whose context window is shorter than a document.

    A server that refuses `max_tokens: 0` (a 4xx naming max_tokens) is asked again with 1, and so
    is every later request of this solver; the generated token is dropped from the logprobs. A
    request's failure keeps the client's error kind; a response without usable logprobs is a
    `protocol` error.
    """

    def __init__(self, config: SolverConfig, service: ServiceHandle) -> None:
        self.config = config
        self.service = service
        self.extra = dict(config.generation.extra)
        self.max_tokens = 0

    def params(self, max_tokens: int) -> dict[str, Any]:
        """The request fields besides the prompt (as the trajectory records them)."""
        model = self.service.endpoint.model
        return {**self.extra, "model": model, "echo": True, "logprobs": 1, "max_tokens": max_tokens, "temperature": 0.0}

    async def solve(self, problem: Problem, seed: int) -> Attempt:
        if problem.metadata.get("choices") is not None:
            return await self._multiple_choice(problem)
        return await self._rolling(problem)

    async def _request(self, prompt: str) -> tuple[Any, int]:
        """(Completion, tokens generated after the prompt) for one echo request."""
        client, slots = self.service.client, self.service.slots
        max_tokens = self.max_tokens
        body = {**self.params(max_tokens), "prompt": prompt}
        c = await client.request(body, slots, stream=False, protocol="completions")
        if max_tokens == 0 and c.status == "error" and c.error_kind == "client" and "max_tokens" in (c.error or "").lower():
            if self.max_tokens == 0:
                log.info("the server refuses max_tokens 0 (%s); asking for 1 token and ignoring it from now on", c.error)
                self.max_tokens = 1
            max_tokens = 1
            retry = await client.request({**body, "max_tokens": 1}, slots, stream=False, protocol="completions")
            retry.attempts += c.attempts
            retry.queued_s += c.queued_s
            c = retry
        return c, max_tokens

    async def _score(self, prompt: str, start: int, allow_empty: bool = False) -> tuple[Any, list[float] | None]:
        """(Completion, logprobs of prompt[start:]'s tokens); an unreadable response is a protocol error."""
        c, n_generated = await self._request(prompt)
        if c.status != "ok":
            return c, None
        if c.prompt_logprobs is None or c.prompt_tokens_text is None or c.text_offsets is None:
            return _failed(
                c,
                "the response has no logprobs (tokens, token_logprobs, text_offset); the server must support "
                "`echo` with `logprobs` on /v1/completions, as vLLM does",
            ), None
        try:
            _, logprobs = span_logprobs(
                c.prompt_tokens_text,
                c.prompt_logprobs,
                c.text_offsets,
                prompt_len=len(prompt),
                start=start,
                n_generated=n_generated,
                allow_empty=allow_empty,
            )
        except ValueError as exc:
            return _failed(c, str(exc)), None
        return c, logprobs

    async def _score_all(self, pairs: list[tuple[str, str]], allow_empty: bool = False) -> tuple[list[Any], list[list[float]], int | None]:
        """Score every continuation after its context, all at once: their completions, their
        logprobs, and which failed first (None: none did)."""
        results = await asyncio.gather(*(self._score(ctx + cont, len(ctx), allow_empty) for ctx, cont in pairs))
        parts = [c for c, _ in results]
        return parts, [lps or [] for _, lps in results], next((i for i, c in enumerate(parts) if c.status != "ok"), None)

    async def _multiple_choice(self, problem: Problem) -> Attempt:
        md = problem.metadata
        choices = [str(c) for c in md["choices"]]
        labels = [str(x) for x in (md.get("labels") or default_labels(len(choices)))]
        if not choices or len(labels) != len(choices):
            raise ValueError(f"problem {problem.id}: {len(choices)} choices, {len(labels)} labels; give one label per choice")
        context = "\n\n".join(m["content"] for m in conversation(self.config, problem))
        pairs = [split_trailing_space(context, choice) for choice in choices]
        parts, spans, failed = await self._score_all(pairs)
        request = self.params(self.max_tokens)
        messages = [{"role": "user", "content": context}]
        if failed is not None:
            completion = combine_completions(parts, "", failure=(f"choice {labels[failed]}", parts[failed]))
            return Attempt(completion=completion, messages=messages, request=request)
        sums = [math.fsum(lps) for lps in spans]
        norms = [total / len(choice) if choice else total for total, choice in zip(sums, choices)]
        best = max(range(len(sums)), key=lambda i: (sums[i], -i))
        best_norm = max(range(len(norms)), key=lambda i: (norms[i], -i))
        scores = {f"logprob_{label}": total for label, total in zip(labels, sums)}
        if problem.reference is not None:
            scores["acc_norm"] = 1.0 if labels[best_norm] == problem.reference.strip() else 0.0
        request["loglikelihood"] = {
            "context_chars": len(pairs[0][0]),
            "choices": [
                {"label": label, "continuation": choice, "logprob": total, "tokens": len(lps), "logprob_per_char": norm}
                for label, choice, total, norm, lps in zip(labels, choices, sums, norms, spans)
            ],
            "chosen": labels[best],
            "chosen_norm": labels[best_norm],
        }
        completion = combine_completions(parts, labels[best])
        messages.append({"role": "assistant", "content": labels[best]})
        return Attempt(completion=completion, messages=messages, request=request, scores=scores)

    async def _rolling(self, problem: Problem) -> Attempt:
        turns = conversation(self.config, problem)
        text = turns[-1]["content"]
        prefix = "".join(m["content"] + "\n\n" for m in turns[:-1])
        md = problem.metadata
        max_chars = md.get("max_chars_per_request")
        context_chars = md.get("context_chars", max_chars // 4 if max_chars else 0)
        if not text:  # nothing to score, and servers refuse an empty prompt
            scores = {"nll": 0.0, "tokens": 0.0}
            return Attempt(completion=combine_completions([], ""), messages=turns, request=self.params(self.max_tokens), scores=scores)
        windows = rolling_windows(text, max_chars, context_chars)
        pairs = [split_trailing_space((prefix if cs == 0 else "") + text[cs:s], text[s:e]) for cs, s, e in windows]
        parts, spans, failed = await self._score_all(pairs, allow_empty=True)
        request = self.params(self.max_tokens)
        messages = [dict(m) for m in turns]
        if failed is not None:
            where = f"window {failed + 1} of {len(windows)}" if len(windows) > 1 else "the text"
            return Attempt(completion=combine_completions(parts, "", failure=(where, parts[failed])), messages=messages, request=request)
        logprobs = [lp for lps in spans for lp in lps]
        nll = -math.fsum(logprobs)
        n = len(logprobs)
        reply = repr(nll / n) if n else ""
        request["windows"] = [
            {"context_start": cs, "start": s, "end": e, "tokens": len(lps), "logprob": math.fsum(lps)}
            for (cs, s, e), lps in zip(windows, spans)
        ]
        scores = {"nll": nll, "tokens": float(n)}
        return Attempt(
            completion=combine_completions(parts, reply),
            messages=[*messages, {"role": "assistant", "content": reply}],
            request=request,
            scores=scores,
        )


def _failed(c: Any, message: str) -> Any:
    """The completion `c` turned into a `protocol` error (the server answered, but not usably)."""
    return msgspec.structs.replace(c, status="error", error_kind="protocol", error=message)


def combine_completions(parts: list[Any], text: str, failure: tuple[str, Any] | None = None) -> Any:
    """One Completion for several requests (none: an empty text, answered now): attempts and queueing
    summed, the span of their times, cached when every part came from the response cache; an error
    (the first failed request's kind, its message prefixed with which part) if any failed."""
    start = min((c.started_at for c in parts), default=time.time())
    end = max((c.started_at + (c.latency_s or 0.0) for c in parts), default=start)
    tokens = [c.prompt_tokens for c in parts]
    common: dict[str, Any] = {
        "started_at": start,
        "latency_s": end - start,
        "attempts": sum(c.attempts for c in parts),
        "queued_s": sum((c.queued_s for c in parts), 0.0),
        "prompt_tokens": sum(tokens) if tokens and all(t is not None for t in tokens) else None,
    }
    if failure is not None:
        where, c = failure
        return Completion(status="error", error_kind=c.error_kind, error=f"{where}: {c.error}", **common)
    return Completion(status="ok", text=text, completion_tokens=0, cached=bool(parts) and all(c.cached for c in parts), **common)
