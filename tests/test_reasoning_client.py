"""A reasoning model's reply through the client and into a record, against small servers on
127.0.0.1 that send the thinking each way real servers do: vLLM's `reasoning` field (>= 0.10),
the older `reasoning_content`, inline `<think>` tags (no reasoning parser), streamed and not, with
and without `completion_tokens_details.reasoning_tokens` in the usage."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest
from aiohttp import web

from shardeval.benchmark import Benchmark, Problem, Score
from shardeval.run.client import COMPACT_PIECES
from shardeval.run.runner import BenchmarkPlan, make_record, saved_completion
from shardeval.config import BenchmarkConfig

from test_client import DONE, config, one, run, sse

THOUGHTS = ["Let me", " add: 2+2", " is 4, or 5?"]
ANSWERS = ["The answer", " is 4."]


def delta_chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    obj = {"id": "c1", "object": "chat.completion.chunk", "model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + msgspec.json.encode(obj) + b"\n\n"


def usage_chunk(completion: int, reasoning: int | None) -> bytes:
    usage: dict[str, Any] = {"prompt_tokens": 5, "completion_tokens": completion}
    if reasoning is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return b"data: " + msgspec.json.encode({"id": "c1", "choices": [], "usage": usage}) + b"\n\n"


def field_stream(
    field: str, thoughts: list[str], answers: list[str], finish: str = "stop", reasoning_tokens: int | None = None
) -> list[bytes]:
    parts = [delta_chunk({"role": "assistant", "content": ""})]
    parts += [delta_chunk({field: t, "content": None}) for t in thoughts]
    parts += [delta_chunk({"content": a}) for a in answers]
    parts += [delta_chunk({}, finish), usage_chunk(len(thoughts) + len(answers), reasoning_tokens), DONE]
    return parts


def inline_stream(pieces: list[str], finish: str = "stop") -> list[bytes]:
    return [*(delta_chunk({"content": p}) for p in pieces), delta_chunk({}, finish), usage_chunk(len(pieces), None), DONE]


def serving(parts: list[bytes]):
    async def handler(request: web.Request) -> web.StreamResponse:
        return await sse(request, *parts)

    return handler


@pytest.mark.parametrize("field", ["reasoning", "reasoning_content"])
def test_streamed_reasoning_field_is_kept_apart_and_counted_by_the_stream(field: str) -> None:
    c = run(one(serving(field_stream(field, THOUGHTS, ANSWERS)), config()))
    assert c.status == "ok", c.error
    assert (c.text, c.reasoning) == ("The answer is 4.", "".join(THOUGHTS))
    assert (c.reasoning_tokens, c.reasoning_tokens_from) == (3, "stream")
    assert c.ttft_s is not None  # the first thought is the first token


def test_usage_reasoning_tokens_win_over_the_stream_count() -> None:
    c = run(one(serving(field_stream("reasoning", THOUGHTS, ANSWERS, reasoning_tokens=41)), config()))
    assert (c.reasoning_tokens, c.reasoning_tokens_from) == (41, "usage")


@pytest.mark.parametrize("field", ["reasoning", "reasoning_content"])
def test_unstreamed_reasoning_field(field: str) -> None:
    async def handler(request: web.Request) -> web.Response:
        body = {
            "id": "c1",
            "object": "chat.completion",
            "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "B", field: "hmm, A? no, B"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 9, "completion_tokens_details": {"reasoning_tokens": 8}},
        }
        return web.json_response(body)

    c = run(one(handler, config(stream=False)))
    assert (c.text, c.reasoning, c.reasoning_tokens, c.reasoning_tokens_from) == ("B", "hmm, A? no, B", 8, "usage")


def test_unstreamed_without_usage_details_does_not_guess() -> None:
    async def handler(request: web.Request) -> web.Response:
        body = {
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "B", "reasoning": "x y z"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 4},
        }
        return web.json_response(body)

    c = run(one(handler, config(stream=False)))
    assert (c.reasoning, c.reasoning_tokens, c.reasoning_tokens_from) == ("x y z", None, None)


def test_inline_thinking_is_counted_up_to_the_closing_tag() -> None:
    pieces = ["<think>", "a", "b", "c", "</think>", "\n\n", "42"]
    c = run(one(serving(inline_stream(pieces)), config()))
    assert c.reasoning is None  # the server sent no field: the content is split later, by the one rule
    assert c.text == "".join(pieces)
    assert (c.reasoning_tokens, c.reasoning_tokens_from) == (4, "stream")


def test_inline_thinking_never_closed_counts_every_chunk() -> None:
    pieces = ["<think>", "a", "b", "c"]
    c = run(one(serving(inline_stream(pieces, finish="length")), config()))
    assert (c.reasoning_tokens, c.reasoning_tokens_from, c.finish_reason) == (4, "stream", "length")


def test_no_reasoning_no_count() -> None:
    c = run(one(serving(inline_stream(["just", " an answer"])), config()))
    assert (c.reasoning, c.reasoning_tokens, c.reasoning_tokens_from) == (None, None, None)


def test_long_replies_are_joined_into_blocks_whole() -> None:
    """Many more chunks than COMPACT_PIECES: the text is whole and in order, thinking and answer."""
    n = 3 * COMPACT_PIECES + 17
    thoughts = [f"t{i} " for i in range(n)]
    answers = [f"a{i} " for i in range(n + 5)]
    c = run(one(serving(field_stream("reasoning", thoughts, answers)), config()))
    assert c.reasoning == "".join(thoughts) and c.text == "".join(answers)
    assert c.reasoning_tokens == n


# --- into a record: the answer scored, the thinking kept -----------------------------------------


class LastWord(Benchmark):
    """Scores 1 when the reply's last word is the reference: a scorer that would happily read a
    number out of the thinking, to show it never sees it."""

    name = "lastword"

    def size(self) -> int:
        return 1

    def problem(self, idx: int) -> Problem:
        return Problem(idx=idx, id=str(idx), prompt="2+2?", reference="4")

    def score(self, problem: Problem, response: str) -> Score:
        words = response.replace(".", " ").split()
        said = words[-1] if words else None
        return Score(score=float(said == problem.reference), extracted=said, scores={"said_anything": float(bool(words))})


def record_of(text: str, finish: str = "stop", reasoning: str | None = None, tags: tuple[str, str] | None = ("<think>", "</think>")):
    from shardeval.run.completion import Completion

    bench = LastWord()
    plan = BenchmarkPlan(BenchmarkConfig(name="lastword"), bench, 1, range(1), "sha256:x", reasoning_tags=tags)
    c = Completion(
        status="ok",
        text=text,
        finish_reason=finish,
        reasoning=reasoning,
        reasoning_tokens=7 if reasoning or "<think>" in text else None,
        reasoning_tokens_from="stream" if reasoning or "<think>" in text else None,
    )
    return make_record(plan, bench.problem(0), 0, 1, c, 0)


def test_inline_reply_scores_only_the_answer_and_keeps_both() -> None:
    r = record_of("<think>so it is 4</think>\n\nIt is 5.")
    assert (r.score, r.extracted) == (0.0, "5")
    assert r.response == "<think>so it is 4</think>\n\nIt is 5."  # the raw reply is kept
    assert (r.reasoning, r.answer, r.reasoning_tokens, r.reasoning_tokens_from) == ("so it is 4", "\n\nIt is 5.", 7, "stream")
    assert r.scored_text() == "\n\nIt is 5." and r.outcome is msgspec.UNSET


def test_cut_off_while_thinking_scores_zero_even_with_the_reference_in_the_thinking() -> None:
    for r in (
        record_of("<think>the answer is 4", finish="length"),
        record_of("", finish="length", reasoning="the answer is 4"),
        record_of("</think>", finish="length", reasoning=None),
    ):
        assert r.status == "ok" and r.outcome == "truncated_reasoning", r
        assert r.score == 0.0 and r.extracted is None
        assert r.scores == {"said_anything": 0.0}  # the named scores of no answer


def test_cut_off_after_the_answer_began_keeps_todays_rule() -> None:
    r = record_of("<think>hmm</think>It is 4", finish="length")
    assert (r.outcome, r.score) == ("truncated", 1.0)
    plain = record_of("It is 4", finish="length", tags=None)
    assert (plain.outcome, plain.score) == ("truncated", 1.0)


def test_a_reply_without_thinking_is_the_record_it_always_was() -> None:
    r = record_of("It is 4.")
    line = msgspec.json.encode(r)
    for key in (b'"reasoning', b'"answer"', b'"outcome"'):
        assert key not in line
    assert r.score == 1.0


def test_no_tags_configured_means_no_inline_split() -> None:
    r = record_of("<think>4</think> 5", tags=None)
    assert r.reasoning is msgspec.UNSET and r.extracted == "5"


def test_a_saved_record_gives_back_the_split_it_had() -> None:
    for r in (record_of("<think>so it is 4</think>\n\nIt is 5."), record_of("It is 4.", reasoning="let me see, 5")):
        again = saved_completion(r)
        from shardeval.run.runner import split_of

        split = split_of(again, ("<think>", "</think>"))
        assert (split.answer, split.reasoning) == (r.scored_text(), r.reasoning)
        assert again.reasoning_tokens == r.reasoning_tokens


# --- identity and the quick flags, through the real CLI ----------------------------------------


def test_a_resume_with_other_reasoning_settings_is_refused_naming_the_key(sim: str, tmp_path) -> None:
    from conftest import api_eval_config, shardeval_cmd

    cfg = api_eval_config(tmp_path / "eval.json", sim, n=4)
    out = str(tmp_path / "out")
    first = shardeval_cmd("run", str(cfg), "-o", out, "--reasoning-effort", "low")
    assert first.returncode == 0, first.stderr
    for flags, key in (
        (["--reasoning-effort", "high"], "reasoning.effort"),
        (["--no-thinking", "--reasoning-effort", "low"], "reasoning.enable"),
        ([], "reasoning"),
        (["-O", "services.model.reasoning_tags=[<r>, </r>]", "--reasoning-effort", "low"], "reasoning_tags"),
    ):
        again = shardeval_cmd("run", str(cfg), "-o", out, *flags)
        assert again.returncode == 2, (flags, again.stderr)
        assert key in again.stderr and "Traceback" not in again.stderr, again.stderr
    same = shardeval_cmd("run", str(cfg), "-o", out, "--reasoning-effort", "low")
    assert same.returncode == 0, same.stderr


def test_the_reasoning_settings_reach_the_server_as_vllm_names_them(tmp_path) -> None:
    """What a request carries for `reasoning:` (docs/reasoning.md), seen by the server itself."""
    import asyncio
    import threading

    from conftest import api_eval_config, shardeval_cmd

    bodies: list[dict[str, Any]] = []

    async def handler(request: web.Request) -> web.Response:
        bodies.append(await request.json())
        return web.json_response(
            {
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "#### 1"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1},
            }
        )

    loop = asyncio.new_event_loop()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = runner.addresses[0][1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        cfg = api_eval_config(
            tmp_path / "eval.json",
            f"http://127.0.0.1:{port}/v1",
            n=2,
            service={"stream": False},
            benchmark={
                "solver": {
                    "generation": {
                        "reasoning": {"enable": True, "effort": "medium", "budget_tokens": 512},
                        "extra": {"chat_template_kwargs": {"custom": 1}},
                    }
                }
            },
        )
        done = shardeval_cmd("run", str(cfg), "-o", str(tmp_path / "out"))
        assert done.returncode == 0, done.stderr
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
    assert len(bodies) == 2
    for body in bodies:
        assert body["chat_template_kwargs"] == {"enable_thinking": True, "custom": 1}
        assert (body["reasoning_effort"], body["thinking_token_budget"]) == ("medium", 512)
    dry = shardeval_cmd("run", str(cfg), "--dry-run")
    assert '"reasoning_effort":"medium"' in dry.stderr + dry.stdout, dry.stderr


def test_a_setting_the_protocol_cannot_carry_is_one_line_before_anything_starts(tmp_path) -> None:
    from conftest import api_eval_config, shardeval_cmd

    cfg = api_eval_config(
        tmp_path / "eval.json",
        "http://127.0.0.1:9/v1",
        service={"protocol": "completions"},
        benchmark={"solver": {"generation": {"reasoning": {"effort": "high"}}}},
    )
    done = shardeval_cmd("run", str(cfg), "-o", str(tmp_path / "out"))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert "benchmarks[0].solver.generation" in line and "reasoning.effort" in line and "protocol" in line, line
    assert not (tmp_path / "out").exists()


# --- a reasoning judge: its verdict read from its answer, never from its thinking -----------------


@pytest.mark.parametrize("form", ["inline", "field", "cut"])
def test_a_reasoning_judge_is_read_from_its_answer(form: str) -> None:
    """FastChat's first-rating rule would take [[2]] from the thinking; the verdict is the answer's."""
    from shardeval.benchmark.rubric import Rubric
    from shardeval.run.judging import Judge
    from shardeval.run.solver import ServiceHandle
    from shardeval.run.client import Client
    from test_client import endpoint, serve

    thinking = "Is it [[2]]? No, the answer is right."
    if form == "inline":
        message = {"role": "assistant", "content": f"<think>{thinking}</think>\nRating: [[9]]"}
    elif form == "field":
        message = {"role": "assistant", "content": "Rating: [[9]]", "reasoning": thinking}
    else:
        message = {"role": "assistant", "content": f"<think>{thinking}"}
    finish = "length" if form == "cut" else "stop"

    async def handler(request: web.Request) -> web.Response:
        return web.json_response(
            {"choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}
        )

    async def grade():
        async with serve(handler) as url:
            async with Client(endpoint(url), config(stream=False), 2) as client:
                judge = Judge("judge", Rubric(mode="single"), ServiceHandle(endpoint(url), client), {})
                return await judge.grade(Problem(idx=0, id="0", prompt="2+2?", reference="4"), "4", 1)

    verdict = run(grade())
    if form == "cut":
        assert verdict.error is not None and "cut off while it thought" in verdict.error
        assert verdict.record.verdict is None
    else:
        assert verdict.error is None and verdict.record.verdict == "9", verdict
        assert verdict.record.reasoning == thinking


# --- long replies: the timeouts are idle-based while thinking flows --------------------------------


def test_a_long_thinking_stream_outlives_the_idle_timeout_and_a_stall_inside_it_does_not() -> None:
    """Thinking chunks every 0.05 s for ~1.5 s under a 0.4 s idle timeout: one answer. The same
    stream stalling 1 s in the middle of its thinking: an idle timeout, not an answer."""
    thoughts = [f"step {i}. " for i in range(30)]
    parts = field_stream("reasoning", thoughts, ["42"])

    async def steady(request: web.Request) -> web.StreamResponse:
        return await sse(request, *parts, gap=0.05)

    c = run(one(steady, config(idle=0.4, first_token=5.0)))
    assert c.status == "ok", c.error
    assert c.latency_s is not None and c.latency_s > 1.0 and c.reasoning == "".join(thoughts)

    async def stalls(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i, part in enumerate(parts):
            await resp.write(part)
            await asyncio.sleep(1.0 if i == 10 else 0.01)
        await resp.write_eof()
        return resp

    c = run(one(stalls, config(idle=0.4, first_token=5.0)))
    assert (c.status, c.error_kind) == ("error", "timeout") and "idle" in (c.error or ""), c
