"""Log-probabilities end to end: the simulator's echo + logprobs responses, the client's parsing,
and the `loglikelihood` solver, over real sockets on 127.0.0.1.

The simulator's logprobs are a documented pure function of each token's text; this file computes
them itself (`logprob` below) rather than importing the simulator's, so a change on either side shows.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import re
from contextlib import asynccontextmanager
from typing import Any
from collections.abc import AsyncIterator, Iterator

import msgspec
import openai
import pytest
from aiohttp import web

from conftest import running_sim
from test_client import run, serve
from shardeval.benchmark import Benchmark, Problem, Score
from shardeval.run.client import Client, Completion
from shardeval.config import BenchmarkConfig, Generation, Retries, ServiceConfig, SolverConfig, Timeouts
from shardeval.run.service import Endpoint
from shardeval.run.solver import LoglikelihoodSolver, ServiceHandle, SimpleSolver, rolling_windows, span_logprobs

FAST = ("--ttft-ms", "0", "--itl-ms", "0")


def tokens(text: str) -> list[str]:
    """The simulator's documented tokenizer: words with their leading whitespace, trailing whitespace alone."""
    return re.findall(r"\s*\S+|\s+", text)


def logprob(token: str) -> float:
    """The simulator's documented logprob: -(1 + (blake2b-64(token) mod 1000) / 250)."""
    h = int.from_bytes(hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest(), "big")
    return -(1.0 + (h % 1000) / 250.0)


def service_config(*, attempts: int = 1, protocol: str = "chat_completions", stream: bool = True) -> ServiceConfig:
    return ServiceConfig(
        type="api",
        protocol=protocol,  # type: ignore[arg-type]
        stream=stream,
        timeouts=Timeouts(first_token=5.0, idle=5.0),
        retries=Retries(attempts=attempts, backoff_base=0.01, backoff_max=0.02),
    )


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with running_sim(*FAST) as base:
        yield base


# --- the simulator's responses ------------------------------------------------------------------

PROMPT = "The quick brown fox\njumps  over the lazy dog. \n"


def test_sim_echo_logprobs_shape_with_the_official_client(url: str) -> None:
    client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=20)
    resp = client.completions.create(model="sim", prompt=PROMPT, echo=True, logprobs=1, max_tokens=0)
    choice = resp.choices[0]
    assert choice.text == PROMPT and choice.finish_reason == "length"
    lp = choice.logprobs
    assert lp is not None
    want = tokens(PROMPT)
    assert lp.tokens == want and "".join(lp.tokens) == PROMPT
    assert lp.token_logprobs == [None] + [logprob(t) for t in want[1:]]
    assert lp.text_offset == [sum(map(len, want[:i])) for i in range(len(want))]
    assert all(PROMPT[o : o + len(t)] == t for t, o in zip(lp.tokens, lp.text_offset))
    assert lp.top_logprobs is not None and lp.top_logprobs[0] is None
    assert all(top == {t: v} for top, t, v in zip(lp.top_logprobs[1:], want[1:], lp.token_logprobs[1:]))
    assert resp.usage is not None and resp.usage.completion_tokens == 0
    # logprobs are a function of the token only: another seed, another prompt around it, same values
    other = client.completions.create(model="sim", prompt="fox jumps", echo=True, logprobs=1, max_tokens=0, seed=99)
    assert other.choices[0].logprobs.token_logprobs == [None, logprob(" jumps")]


def test_sim_echo_with_generated_tokens_and_without_echo(url: str) -> None:
    client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=20)
    both = client.completions.create(model="sim", prompt="Hello there", echo=True, logprobs=1, max_tokens=3, seed=1).choices[0]
    assert both.text.startswith("Hello there ") and len(both.logprobs.tokens) == 2 + 3
    assert both.logprobs.text_offset[2] == len("Hello there") and "".join(both.logprobs.tokens) == both.text
    assert both.logprobs.token_logprobs[2:] == [logprob(t) for t in both.logprobs.tokens[2:]]
    gen = client.completions.create(model="sim", prompt="Hello there", logprobs=1, max_tokens=3, seed=1).choices[0]
    assert len(gen.logprobs.tokens) == 3 and gen.logprobs.text_offset[0] == 0 and None not in gen.logprobs.token_logprobs
    plain = client.completions.create(model="sim", prompt="Hello there", max_tokens=3, seed=1).choices[0]
    assert plain.logprobs is None
    with pytest.raises(openai.BadRequestError, match="echo only with stream: false"):
        client.completions.create(model="sim", prompt="x", echo=True, logprobs=1, max_tokens=0, stream=True)


# --- the client ---------------------------------------------------------------------------------


def test_client_parses_logprobs_with_per_request_protocol_and_stream(url: str) -> None:
    """A chat, streaming service still sends this one request to /completions, unstreamed."""

    async def go() -> Completion:
        async with Client(Endpoint(url, "sim", "chat_completions"), service_config(), 2) as client:
            body = {"model": "sim", "prompt": PROMPT, "echo": True, "logprobs": 1, "max_tokens": 0}
            return await client.request(body, asyncio.Semaphore(1), stream=False, protocol="completions")

    c = run(go())
    want = tokens(PROMPT)
    assert c.status == "ok" and c.text == PROMPT and c.ttft_s is None and c.completion_tokens == 0
    assert c.prompt_tokens_text == want
    assert c.prompt_logprobs == [None] + [logprob(t) for t in want[1:]]
    assert c.text_offsets == [sum(map(len, want[:i])) for i in range(len(want))]


def test_client_without_logprobs_leaves_the_fields_empty(url: str) -> None:
    async def go() -> Completion:
        async with Client(Endpoint(url, "sim", "completions"), service_config(stream=False), 2) as client:
            return await client.request({"model": "sim", "prompt": "hi", "max_tokens": 2})

    c = run(go())
    assert c.status == "ok" and c.prompt_logprobs is None and c.prompt_tokens_text is None and c.text_offsets is None


# --- span selection (pure) ----------------------------------------------------------------------


def test_span_logprobs_offsets_bos_shift_generated_tokens_and_errors() -> None:
    toks, lps, offs = ["Q", ":", " A"], [None, -1.0, -2.0], [0, 1, 2]
    assert span_logprobs(toks, lps, offs, prompt_len=4, start=2) == ([" A"], [-2.0])
    # vLLM counts a BOS token's text ("<s>") in the offsets: aligned on the prompt's end
    assert span_logprobs(["<s>", *toks], [None, -0.5, -1.0, -2.0], [0, 3, 4, 5], prompt_len=4, start=2) == ([" A"], [-2.0])
    # with max_tokens 1 the generated token trails the prompt's; it is dropped
    assert span_logprobs([*toks, " B"], [*lps, -9.0], [*offs, 4], prompt_len=4, start=2, n_generated=1) == ([" A"], [-2.0])
    # an empty context: the first token has nothing before it and is not counted
    assert span_logprobs(toks, lps, offs, prompt_len=4, start=0) == ([":", " A"], [-1.0, -2.0])
    with pytest.raises(ValueError, match="no logprob for prompt token 2"):
        span_logprobs(toks, [None, -1.0, None], offs, prompt_len=4, start=2)
    with pytest.raises(ValueError, match="no scored token"):
        span_logprobs(["QA"], [None], [0], prompt_len=2, start=1)  # the tokenizer merged the continuation
    with pytest.raises(ValueError, match="token"):
        span_logprobs(toks, [None, -1.0], offs, prompt_len=4, start=2)


def test_rolling_windows_cover_the_text_once_at_whitespace() -> None:
    text = "alpha beta gamma delta epsilon zeta eta theta iota kappa"
    windows = rolling_windows(text, 20, 6)
    assert windows[0][:2] == (0, 0) and windows[-1][2] == len(text)
    assert all(a[2] == b[1] for a, b in zip(windows, windows[1:]))  # pieces tile the text
    for cs, s, e in windows:
        assert e - cs <= 20 and s - cs <= 6
        assert s == 0 or text[s].isspace()  # a piece begins with the space its first word carries
    assert rolling_windows("x" * 10, None, 0) == [(0, 0, 10)]
    assert rolling_windows("y" * 25, 10, 0) == [(0, 0, 10), (10, 10, 20), (20, 20, 25)]  # no whitespace: hard cuts
    with pytest.raises(ValueError):
        rolling_windows("z" * 30, 10, 10)


# --- the loglikelihood solver -------------------------------------------------------------------


@asynccontextmanager
async def solver_for(
    url: str, cfg: ServiceConfig | None = None, solver: type = LoglikelihoodSolver, model: str = "sim"
) -> AsyncIterator[Any]:
    async with Client(Endpoint(url, model, "chat_completions"), cfg or service_config(), 4) as client:
        handle = ServiceHandle(Endpoint(url, model, "chat_completions"), client, asyncio.Semaphore(4))
        yield solver(SolverConfig(generation=Generation(temperature=0.7, max_tokens=64)), handle)


def mc_problem(context: str, choices: list[str], reference: str | None = "A", **extra: Any) -> Problem:
    return Problem(idx=0, id="p0", prompt=context, reference=reference, metadata={"choices": choices, **extra})


def expected_sum(choice: str) -> float:
    """Σ logprob over the continuation's tokens: after "…:" every choice below is its own tokens."""
    return math.fsum(logprob(t) for t in tokens(choice))


CONTEXT = "Which fruit is yellow?\nAnswer:"
CHOICES = [" apple", " banana", " cherry pie", " kiwi"]


def test_solver_picks_the_highest_sum_and_reports_every_choice(url: str) -> None:
    async def go():
        async with solver_for(url) as solver:
            return await solver.solve(mc_problem(CONTEXT, CHOICES, reference="B"), seed=1)

    attempt = run(go())
    sums = [expected_sum(c) for c in CHOICES]
    best = max(range(4), key=lambda i: (sums[i], -i))
    norm = [s / len(c) for s, c in zip(sums, CHOICES)]
    best_norm = max(range(4), key=lambda i: (norm[i], -i))
    c = attempt.completion
    assert c.status == "ok" and c.text == "ABCD"[best] and c.attempts == 4
    assert attempt.scores == {**{f"logprob_{'ABCD'[i]}": sums[i] for i in range(4)}, "acc_norm": float("ABCD"[best_norm] == "B")}
    ll = attempt.request["loglikelihood"]
    assert [x["logprob"] for x in ll["choices"]] == sums and [x["tokens"] for x in ll["choices"]] == [1, 1, 2, 1]
    assert ll["chosen"] == "ABCD"[best] and ll["chosen_norm"] == "ABCD"[best_norm]
    assert attempt.request["echo"] is True and attempt.request["max_tokens"] == 0  # generation settings do not apply
    assert attempt.messages == [{"role": "user", "content": CONTEXT}, {"role": "assistant", "content": "ABCD"[best]}]


def test_solver_argmax_and_length_normalised_argmax_can_differ(url: str) -> None:
    """Choose choices (by the documented formula) whose raw and per-character winners differ."""
    words = [f" {w}" for w in "sun moon star comet planet nebula quasar pulsar galaxy meteor orbit".split()]
    pairs = [(a, b + c) for a in words for b in words for c in words if b != c]
    # raw sums prefer the short one (fewer tokens), per character the long one
    found = [(a, bc) for a, bc in pairs if expected_sum(bc) < expected_sum(a) and expected_sum(bc) / len(bc) > expected_sum(a) / len(a)]
    assert found
    short, long_ = found[0]

    async def go():
        async with solver_for(url) as solver:
            return await solver.solve(mc_problem("Pick:", [short, long_], reference="B"), seed=0)

    attempt = run(go())
    assert attempt.completion.text == "A"
    assert attempt.scores["acc_norm"] == 1.0 and attempt.request["loglikelihood"]["chosen_norm"] == "B"


def test_trailing_space_of_the_context_moves_to_the_continuation(url: str) -> None:
    """ "Answer: " + "A" is scored as "Answer:" + " A", as lm-evaluation-harness does."""

    async def go():
        async with solver_for(url) as solver:
            return await solver.solve(mc_problem("Answer: ", ["A", "B"], labels=["yes", "no"]), seed=0)

    attempt = run(go())
    sums = [logprob(" A"), logprob(" B")]
    assert attempt.scores["logprob_yes"] == sums[0] and attempt.scores["logprob_no"] == sums[1]
    assert attempt.completion.text == ("yes" if sums[0] >= sums[1] else "no")


def test_rolling_scores_every_token_but_the_first(url: str) -> None:
    doc = "one two  three\nfour five"

    async def go(problem: Problem):
        async with solver_for(url) as solver:
            return await solver.solve(problem, seed=0)

    whole = run(go(Problem(idx=0, id="d", prompt=doc)))
    want = [logprob(t) for t in tokens(doc)[1:]]
    assert whole.scores == {"nll": -math.fsum(want), "tokens": float(len(want))}
    assert float(whole.completion.text) == -math.fsum(want) / len(want)
    # windows with context: every token is still scored exactly once, with the same logprobs
    chunked = run(go(Problem(idx=0, id="d", prompt=doc, metadata={"max_chars_per_request": 12, "context_chars": 5})))
    assert len(chunked.request["windows"]) > 1 and chunked.scores == whole.scores
    empty = run(go(Problem(idx=0, id="d", prompt="")))
    assert empty.completion.status == "ok" and empty.scores == {"nll": 0.0, "tokens": 0.0}


def test_simple_solver_hands_scoring_problems_to_the_loglikelihood_solver(url: str) -> None:
    async def go():
        async with solver_for(url, solver=SimpleSolver) as solver:
            return await solver.solve(mc_problem(CONTEXT, CHOICES, scoring="loglikelihood"), seed=0)

    attempt = run(go())
    assert attempt.completion.text in "ABCD" and "logprob_A" in attempt.scores and attempt.request["echo"] is True


# --- servers that differ from the simulator -------------------------------------------------------


def vllm_like_body(prompt: str, n_generated: int) -> bytes:
    """A vLLM-shaped echo response: a BOS token "<s>" first (its text counted in the offsets)."""
    toks = ["<s>", *tokens(prompt), *[" gen"] * n_generated]
    offsets, pos = [], 0
    for t in toks:
        offsets.append(pos)
        pos += len(t)
    values = [None] + [logprob(t) for t in toks[1:]]
    choice = {
        "index": 0,
        "text": prompt + " gen" * n_generated,
        "finish_reason": "length",
        "logprobs": {"tokens": toks, "token_logprobs": values, "text_offset": offsets, "top_logprobs": None},
    }
    return msgspec.json.encode(
        {
            "id": "x",
            "object": "text_completion",
            "choices": [choice],
            "usage": {"prompt_tokens": len(toks) - n_generated, "completion_tokens": n_generated},
        }
    )


def test_server_refusing_max_tokens_0_gets_1_and_bos_offsets_are_aligned() -> None:
    seen: list[int] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        assert request.path == "/v1/completions" and body["echo"] is True and "stream" not in body
        seen.append(body["max_tokens"])
        if body["max_tokens"] == 0:
            err = {"object": "error", "message": "max_tokens must be at least 1, got 0.", "type": "BadRequestError", "code": 400}
            return web.json_response(err, status=400)
        return web.Response(body=vllm_like_body(body["prompt"], body["max_tokens"]), content_type="application/json")

    async def go():
        async with serve(handler) as base, solver_for(base, model="m") as solver:
            first = await solver.solve(mc_problem(CONTEXT, CHOICES), seed=0)
            second = await solver.solve(mc_problem(CONTEXT, CHOICES), seed=0)
            doc = await solver.solve(Problem(idx=1, id="d", prompt="one two three"), seed=0)
            return first, second, doc, solver.max_tokens

    first, second, doc, max_tokens = run(go())
    assert max_tokens == 1 and seen.count(0) >= 1 and seen[-4:] == [1, 1, 1, 1]
    assert first.completion.status == "ok" and first.completion.attempts >= 5  # the refused try counts
    assert second.completion.attempts == 4 and second.scores == first.scores
    assert second.scores["logprob_C"] == expected_sum(" cherry pie")
    # with BOS the document's first word is scored too; the generated token never is
    assert doc.scores == {"nll": -math.fsum(logprob(t) for t in tokens("one two three")), "tokens": 3.0}


def test_errors_keep_the_clients_kinds() -> None:
    def solve(url: str, attempts: int = 2, model: str = "sim", problem: Problem | None = None) -> Completion:
        async def go():
            async with solver_for(url, service_config(attempts=attempts), model=model) as solver:
                return await solver.solve(problem or mc_problem(CONTEXT, CHOICES), seed=0)

        return run(go()).completion

    with running_sim(*FAST, "--fail-5xx", "1") as url:
        c = solve(url)
        assert (c.status, c.error_kind, c.attempts) == ("error", "server_error", 8) and c.error.startswith("choice A: HTTP 50")
        c = solve(url, problem=Problem(idx=0, id="d", prompt="some text here"))
        assert (c.error_kind, c.attempts) == ("server_error", 2) and c.error.startswith("the text: ")
    with running_sim(*FAST, "--fail-429", "1", "--retry-after", "0") as url:
        assert solve(url).error_kind == "rate_limited"
    with running_sim(*FAST) as url:
        c = solve(url, model="other-model")
        assert (c.error_kind, c.attempts) == ("client", 4)  # 404, not retried: one attempt per choice

    async def no_logprobs(request: web.Request) -> web.StreamResponse:
        return web.json_response({"choices": [{"index": 0, "text": "x", "finish_reason": "length"}]})

    async def refused() -> Completion:
        async with serve(no_logprobs) as base, solver_for(base, model="m") as solver:
            return (await solver.solve(mc_problem(CONTEXT, CHOICES), seed=0)).completion

    c = run(refused())
    assert (c.status, c.error_kind) == ("error", "protocol") and "echo" in c.error

    async def closed_port() -> Completion:
        async with serve(no_logprobs) as base:
            pass  # the server is gone: connection refused
        async with solver_for(base, service_config(attempts=1), model="m") as solver:
            return (await solver.solve(mc_problem(CONTEXT, CHOICES), seed=0)).completion

    assert run(closed_port()).error_kind == "connection"


# --- the record ---------------------------------------------------------------------------------


def test_make_record_merges_the_solvers_scores() -> None:
    from shardeval.run.runner import BenchmarkPlan, make_record

    class Letters(Benchmark):
        name = "letters"

        def score(self, problem: Problem, response: str) -> Score:
            return Score(score=float(response == problem.reference), extracted=response, scores={"own": 1.0})

    plan = BenchmarkPlan(BenchmarkConfig(name="letters"), Letters(), 1, range(1), "sha256:x")
    problem = Problem(idx=0, id="p", prompt="q", reference="B", cluster="c1")
    ok = Completion(status="ok", text="B", attempts=4)
    record = make_record(plan, problem, 0, 7, ok, 0, {"logprob_A": -2.5, "acc_norm": 0.0})
    assert record.score == 1.0 and record.extracted == "B" and record.cluster == "c1"
    assert record.scores == {"own": 1.0, "logprob_A": -2.5, "acc_norm": 0.0}
    failed = make_record(plan, problem, 0, 7, Completion(status="error", error_kind="server_error"), 0, {"logprob_A": -1.0})
    assert failed.score is None and failed.scores == {}
    assert make_record(plan, problem, 0, 7, ok, 0).scores == {"own": 1.0}
