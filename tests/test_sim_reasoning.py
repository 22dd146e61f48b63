"""The simulator as a reasoning model served by vLLM (`--reasoning-form`, shardeval_sim.reasoning):
each form streamed and not, the same answer in every form, what a request asks honoured as vLLM
honours it, usage, the planted answer, and `--log-requests`. Every server is a real `shardeval sim`
process on 127.0.0.1; replies are read as raw HTTP, and through shardeval's own client."""

from __future__ import annotations

import asyncio
import json
import re
import time
import urllib.error
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import Any
from collections.abc import Callable, Iterator

import msgspec
import pytest
from conftest import running_sim, shardeval_cmd

from shardeval.api.benchmark import split_reply
from shardeval.benchmark.reasoning import reply_outcome

FAST = ("--ttft-ms", "0", "--itl-ms", "0")
THINK = 40  # --reasoning-tokens of the module's servers
WORDS = 32  # the default --output-tokens: the answer's length
FORMS = ("field", "reasoning_content", "inline")
FIELD_KEY = {"field": "reasoning", "reasoning_content": "reasoning_content"}
QUESTION = "Tom has 12 apples and buys 30 more. How many apples does Tom have now?"


@pytest.fixture(scope="module")
def sim() -> Iterator[Callable[..., str]]:
    """sim(*flags): the base URL of an arith-aware simulator with those flags, started once per module."""
    started: dict[tuple[str, ...], str] = {}
    with ExitStack() as stack:

        def get(*flags: str) -> str:
            if flags not in started:
                started[flags] = stack.enter_context(
                    running_sim("--bench", "arith", "--seed", "7", "--reasoning-tokens", str(THINK), *FAST, *flags)
                )
            return started[flags]

        yield get


def form(name: str, *more: str) -> tuple[str, ...]:
    return ("--reasoning-form", name, *more) if name != "none" else more


class Got(msgspec.Struct):
    """One reply as it came: the content (None: none sent), the thinking and the field it came in."""

    content: str | None
    thinking: str | None
    key: str | None  # "reasoning" or "reasoning_content": where the thinking was
    finish: str
    usage: dict[str, Any]
    content_chunks: list[str] = []
    thinking_chunks: list[str] = []
    raw: bytes = b""


def post(base: str, body: dict[str, Any], path: str = "/chat/completions") -> tuple[int, bytes]:
    request = urllib.request.Request(base + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def chat(base: str, content: str = QUESTION, *, stream: bool = False, seed: int = 1, **fields: Any) -> Got:
    body = {"model": "sim", "messages": [{"role": "user", "content": content}], "seed": seed, **fields}
    if stream:
        body.update(stream=True, stream_options={"include_usage": True})
    status, raw = post(base, body)
    assert status == 200, raw
    if not stream:
        data = json.loads(raw)
        message, choice = data["choices"][0]["message"], data["choices"][0]
        keys = [k for k in ("reasoning", "reasoning_content") if k in message]
        assert len(keys) <= 1, message  # one field per form, so a client's fallback is tested too
        key = keys[0] if keys else None
        return Got(message["content"], message.get(key) if key else None, key, choice["finish_reason"], data["usage"], raw=raw)
    events = [json.loads(line[6:]) for line in raw.decode().split("\n\n") if line.startswith("data: {")]
    assert raw.endswith(b"data: [DONE]\n\n")
    deltas = [(e["choices"][0]["delta"], e["choices"][0]["finish_reason"]) for e in events if e["choices"]]
    assert deltas[0][0] == {"role": "assistant", "content": ""}  # vLLM's role event first
    content = [d["content"] for d, _ in deltas[1:] if "content" in d]
    keys = {k for d, _ in deltas for k in ("reasoning", "reasoning_content") if k in d}
    assert len(keys) <= 1 and all(len(d) == 1 for d, _ in deltas[1:]), deltas  # one token, in one field, per event
    key = next(iter(keys), None)
    thinking = [d[key] for d, _ in deltas if key in d] if key else []
    return Got(
        "".join(content) if content else None,
        "".join(thinking) if key else None,
        key,
        deltas[-1][1],
        events[-1]["usage"],
        content,
        thinking,
        raw,
    )


def tokens(text: str) -> list[str]:
    """The simulator's tokens: words with the whitespace before them."""
    return re.findall(r"\s*\S+", text)


# --- each form ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_each_form_thinks_then_gives_the_answer_of_a_model_that_does_not(sim: Callable[..., str], stream: bool) -> None:
    plain = chat(sim(), stream=stream)
    assert plain.key is None and "completion_tokens_details" not in plain.usage  # no reasoning form: the replies of before
    assert plain.usage["completion_tokens"] == WORDS and plain.content is not None
    field = chat(sim(*form("field")), stream=stream)
    assert field.thinking is not None and len(tokens(field.thinking)) == THINK
    for name in FORMS:
        got = chat(sim(*form(name)), stream=stream)
        assert got.finish == "stop"
        assert got.usage["completion_tokens"] == THINK + WORDS and got.usage["completion_tokens_details"] == {"reasoning_tokens": THINK}
        if name == "inline":  # no parser: the tags in the content, as vLLM without --reasoning-parser
            assert got.key is None and got.content == f"<think>{field.thinking}</think>\n\n{plain.content}"
            split = split_reply(got.content)
            assert (split.reasoning, split.answer, split.unfinished) == (field.thinking, field.content, False)
        else:  # the thinking in its field, the answer (after "\n\n", untrimmed as vLLM's parsers send it) as content
            assert got.key == FIELD_KEY[name]
            assert (got.thinking, got.content) == (field.thinking, "\n\n" + plain.content)
        if stream:  # one event per token, thinking as answer
            if name == "inline":
                closing = next(i for i, c in enumerate(got.content_chunks) if "</think>" in c)
                assert closing == THINK and len(got.content_chunks) == THINK + WORDS  # the client's count: chunks before the closing one
            else:
                assert (len(got.thinking_chunks), len(got.content_chunks)) == (THINK, WORDS)
    assert chat(sim(*form("field")), stream=not stream).content == field.content  # streamed or not, the same reply


def test_the_answer_is_the_same_in_every_form_right_or_wrong(sim: Callable[..., str]) -> None:
    from shardeval import plugins

    bench = plugins.registry().get("benchmarks", "arith", where="test").factory({"n": 30})
    scores: dict[str, list[float]] = {}
    for name in ("none", *FORMS):
        answers = []
        for i in range(30):
            problem = bench.problem(i)
            got = chat(sim(*form(name)), problem.user_text(), seed=100 + i)
            answer = split_reply(got.content or "", got.thinking).answer
            answers.append(answer.removeprefix("\n\n") if name != "none" else answer)
        scores[name] = [bench.score(bench.problem(i), a).score for i, a in enumerate(answers)]
        if name == "none":
            plain = answers
        else:
            assert answers == plain, name  # the thinking draws nothing the answer's draw uses
    assert 0 < sum(scores["none"]) < 30 and len(set(map(tuple, scores.values()))) == 1


def test_completions_requests_and_tool_calls_do_not_think(sim: Callable[..., str]) -> None:
    body = {"model": "sim", "prompt": QUESTION, "seed": 3}
    same = [re.sub(rb'"(id|created)":[^,]+,', b"", post(base, body, "/completions")[1]) for base in (sim(*form("field")), sim())]
    assert same[0] == same[1] and b"reasoning" not in same[0]
    tools = [
        {"type": "function", "function": {"name": "bash", "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}}
    ]
    status, raw = post(sim(*form("inline")), {"model": "sim", "messages": [{"role": "user", "content": "ls"}], "tools": tools})
    message = json.loads(raw)["choices"][0]["message"]
    assert status == 200 and message["content"] is None and message["tool_calls"][0]["function"]["name"] == "bash"


# --- what a request asks ----------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_max_tokens_counts_thinking_and_answer(sim: Callable[..., str], stream: bool) -> None:
    whole = chat(sim(*form("field")))
    answer = tokens(whole.content or "")
    for cut in (10, THINK):  # inside the thinking (at its very end the closing tag has not come yet)
        field = chat(sim(*form("field")), stream=stream, max_tokens=cut)
        assert (field.finish, field.content, field.thinking) == ("length", None, "".join(tokens(whole.thinking or "")[:cut]))
        assert field.usage["completion_tokens"] == cut and field.usage["completion_tokens_details"] == {"reasoning_tokens": cut}
        inline = chat(sim(*form("inline")), stream=stream, max_tokens=cut)
        assert inline.content == "<think>" + (field.thinking or "") and "</think>" not in inline.content
        split = split_reply(inline.content)
        assert split.unfinished and reply_outcome(split, inline.finish) == "truncated_reasoning"
        assert reply_outcome(split_reply(field.content or "", field.thinking), field.finish) == "truncated_reasoning"
    cut = THINK + 5  # inside the answer: the thinking whole, the answer begun
    field = chat(sim(*form("reasoning_content")), stream=stream, max_tokens=cut)
    assert (field.finish, field.thinking, field.content) == ("length", whole.thinking, "".join(answer[:5]))
    assert field.usage["completion_tokens"] == cut and field.usage["completion_tokens_details"] == {"reasoning_tokens": THINK}
    inline = chat(sim(*form("inline")), stream=stream, max_tokens=cut)
    split = split_reply(inline.content or "")
    assert (split.reasoning, split.answer) == (whole.thinking, field.content) and reply_outcome(split, inline.finish) == "truncated"


def test_enable_thinking_false_thinks_not_at_all(sim: Callable[..., str]) -> None:
    plain = chat(sim())
    off = {"chat_template_kwargs": {"enable_thinking": False}}
    for name in FORMS:
        for stream in (False, True):
            got = chat(sim(*form(name)), stream=stream, **off)
            assert (got.content, got.thinking, got.finish) == (plain.content, None, "stop"), name
            assert got.usage["completion_tokens"] == WORDS and got.usage["completion_tokens_details"] == {"reasoning_tokens": 0}
    assert (
        chat(sim(*form("field")), chat_template_kwargs={"enable_thinking": True}).usage["completion_tokens_details"]["reasoning_tokens"]
        == THINK
    )
    status, raw = post(sim(*form("field")), {"model": "sim", "messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": "no"})
    assert status == 400 and json.loads(raw)["error"]["param"] == "chat_template_kwargs"


def test_reasoning_effort_scales_the_thinking(sim: Callable[..., str]) -> None:
    for effort, n in (("low", THINK // 4), ("medium", THINK), ("high", 4 * THINK), (None, THINK)):
        for name in FORMS:
            got = chat(sim(*form(name)), stream=True, **({"reasoning_effort": effort} if effort else {}))
            assert got.usage["completion_tokens_details"] == {"reasoning_tokens": n} and got.usage["completion_tokens"] == n + WORDS
            assert len(got.thinking_chunks) == n if name != "inline" else "</think>" in got.content_chunks[n]
    status, raw = post(sim(*form("field")), {"model": "sim", "messages": [{"role": "user", "content": "x"}], "reasoning_effort": "max"})
    assert status == 400 and json.loads(raw)["error"]["param"] == "reasoning_effort"


def test_thinking_token_budget_closes_the_thinking_and_the_answer_follows(sim: Callable[..., str]) -> None:
    whole, plain = chat(sim(*form("field"))), chat(sim())
    for stream in (False, True):
        field = chat(sim(*form("field")), stream=stream, thinking_token_budget=7)
        assert (field.finish, field.thinking, field.content) == ("stop", "".join(tokens(whole.thinking or "")[:7]), whole.content)
        assert field.usage["completion_tokens_details"] == {"reasoning_tokens": 7} and field.usage["completion_tokens"] == 7 + WORDS
        inline = chat(sim(*form("inline")), stream=stream, thinking_token_budget=7)
        assert inline.content == f"<think>{field.thinking}</think>\n\n{plain.content}"
    assert chat(sim(*form("field")), thinking_token_budget=10 * THINK).thinking == whole.thinking  # a budget not reached changes nothing
    nothing = chat(sim(*form("inline")), thinking_token_budget=0)
    assert nothing.content == f"<think></think>\n\n{plain.content}" and nothing.usage["completion_tokens_details"] == {
        "reasoning_tokens": 0
    }
    both = chat(sim(*form("field")), thinking_token_budget=7, reasoning_effort="high", max_tokens=9)  # the budget, then max_tokens
    assert (both.thinking, both.content, both.finish) == (field.thinking, "".join(tokens(whole.content or "")[:2]), "length")
    for bad in (-1, "8", True):
        status, raw = post(
            sim(*form("field")), {"model": "sim", "messages": [{"role": "user", "content": "x"}], "thinking_token_budget": bad}
        )
        assert status == 400 and json.loads(raw)["error"]["param"] == "thinking_token_budget", bad


def test_thinking_is_timed_as_tokens_are() -> None:
    with running_sim(
        "--reasoning-form", "field", "--reasoning-tokens", "30", "--output-tokens", "10", "--ttft-ms", "100", "--itl-ms", "10"
    ) as base:
        t0 = time.monotonic()
        got = chat(base, stream=True)
        took = time.monotonic() - t0
    assert len(got.thinking_chunks) == 30 and took >= 0.1 + 39 * 0.01 - 0.02


def test_a_20k_token_thinking_streams_fast_at_itl_0() -> None:
    """20,000 thinking chunks (3.8 MB of SSE) at --itl-ms 0: about 25 ms wall and 20-30 ms of the
    simulator's CPU on the 2-core dev machine (events from cached byte templates, no per-chunk
    JSON encoding); the bound leaves room for a busy machine."""
    with running_sim("--reasoning-form", "field", "--reasoning-tokens", "20000", *FAST) as base:
        chat(base, seed=0)  # warm
        t0 = time.monotonic()
        got = chat(base, stream=True)
        took = time.monotonic() - t0
    assert len(got.thinking_chunks) == 20000 and got.usage["completion_tokens"] == 20000 + WORDS
    assert took < 2.0, took


# --- usage, and what shardeval's client makes of it ---------------------------------------------------


def test_usage_details_can_be_left_out_and_the_client_counts_the_same(sim: Callable[..., str]) -> None:
    from shardeval.config import ServiceConfig
    from shardeval.run.client import Client
    from shardeval.run.service import Endpoint

    async def ask(base: str, stream: bool) -> Any:
        config = ServiceConfig(type="api", stream=stream)
        async with Client(Endpoint(base_url=base, model="sim", protocol="chat_completions", api_key_env=None), config, 2) as client:
            return await client.request({"model": "sim", "messages": [{"role": "user", "content": QUESTION}], "seed": 1})

    for name in FORMS:
        quiet = sim(*form(name, "--no-usage-reasoning-tokens"))
        for stream in (False, True):
            assert "completion_tokens_details" not in chat(quiet, stream=stream).usage
        told, counted, unsaid = (
            asyncio.run(ask(base, stream)) for base, stream in ((sim(*form(name)), True), (quiet, True), (quiet, False))
        )
        assert (told.reasoning_tokens, told.reasoning_tokens_from) == (THINK, "usage")
        assert (counted.reasoning_tokens, counted.reasoning_tokens_from) == (THINK, "stream"), name  # the stream agrees with the usage
        assert (unsaid.reasoning_tokens, unsaid.reasoning_tokens_from) == (None, None)  # nothing to count: no guess
        assert told.completion_tokens == counted.completion_tokens == THINK + WORDS
        assert (told.text, told.reasoning) == (counted.text, counted.reasoning) == (unsaid.text, unsaid.reasoning)


def test_heavy_tailed_thinking_is_per_prompt_and_apart_from_the_answer(sim: Callable[..., str]) -> None:
    from shardeval_sim.answers import output_length

    prompts = [f"Question {i}: how long do you think?" for i in range(40)]
    tail = form("field", "--reasoning-tokens-tail", "1.1")
    with running_sim(*FAST, "--reasoning-tokens", "8", *tail, "--seed", "2") as other:
        seen = [chat(sim(*tail), p, seed=i).usage["completion_tokens_details"]["reasoning_tokens"] for i, p in enumerate(prompts)]
        again = [chat(other, p, seed=99).usage["completion_tokens_details"]["reasoning_tokens"] for p in prompts]
    truth = [output_length(p, THINK, 1.1, person=b"sim-think") for p in prompts]
    assert seen == truth and len(set(truth)) > 10 and max(truth) > 4 * THINK  # heavy-tailed, a pure function of the prompt
    assert again == [output_length(p, 8, 1.1, person=b"sim-think") for p in prompts]  # another seed: the same shape
    assert truth != [output_length(p, THINK, 1.1) for p in prompts]  # drawn apart from the answers' lengths


# --- the planted answer --------------------------------------------------------------------------


def test_the_thinking_plants_the_right_number_even_when_the_answer_is_wrong() -> None:
    from shardeval import plugins

    bench = plugins.registry().get("benchmarks", "arith", where="test").factory({"n": 20})
    with running_sim("--bench", "arith", "--accuracy", "0", "--reasoning-form", "field", *FAST) as base:
        for i in range(20):
            problem = bench.problem(i)
            got = chat(base, problem.user_text(), seed=i)
            assert bench.score(problem, got.content or "").score == 0  # every answer wrong ...
            assert re.findall(r"\d+", got.thinking or "")[-1] == problem.reference  # ... the thinking's last number right
            assert bench.score(problem, got.thinking or "").score == 1  # so a scorer reading it would be fooled
            cut = chat(base, problem.user_text(), seed=i, max_tokens=8)  # the plant comes early: a cut-off thinking holds it
            assert cut.content is None and bench.score(problem, cut.thinking or "").score == 1


def test_the_thinking_plants_a_letter_and_code_as_their_scorers_read_them() -> None:
    from shardeval import plugins

    registry = plugins.registry()
    quiz = str(Path(__file__).parent.parent / "examples" / "byo" / "quiz_mc.yaml")
    letters = registry.get("benchmarks", "custom", where="test").factory({"spec": quiz})
    with running_sim("--bench", "custom", "--bench-param", f"spec={quiz}", "--accuracy", "0", "--reasoning-form", "inline", *FAST) as base:
        for i in range(letters.size()):
            problem = letters.problem(i)
            split = split_reply(chat(base, problem.user_text(), seed=i).content or "")
            assert letters.score(problem, split.answer).score == 0 and letters.score(problem, split.reasoning or "").score == 1
            assert f"the answer is ({problem.reference})" in (split.reasoning or "")
    code = registry.get("benchmarks", "humaneval", where="test").factory({})
    with running_sim("--bench", "humaneval", "--accuracy", "0", "--reasoning-form", "field", *FAST) as base:
        for i in range(2):
            problem = code.problem(i)
            got = chat(base, problem.user_text(), seed=i)
            assert "```python" in (got.thinking or "") and code.score(problem, got.thinking or "").score == 1
            assert code.score(problem, got.content or "").score == 0


def test_a_judge_thinks_its_verdict_even_when_it_then_gives_none() -> None:
    prompt = "[Question]\nWhat is 2+2?\n\n[The Start of Assistant's Answer]\n4\n[The End of Assistant's Answer]\nRating: [[5]]"
    with running_sim("--reasoning-form", "field", "--judge-garbage", "1", *FAST) as base:
        got = chat(base, prompt)
    assert "[[" not in (got.content or "") and re.search(r"Rating: \[\[\d+\]\]", got.thinking or "")


# --- what a server was asked -----------------------------------------------------------------------


def test_log_requests_writes_each_body_as_it_arrives(tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    bodies = [
        {"model": "sim", "messages": [{"role": "user", "content": "one"}]},
        {"model": "nope", "messages": []},
        {"model": "sim", "prompt": "two", "max_tokens": 1},
    ]
    with running_sim("--log-requests", str(log), *FAST) as base:
        for body, path in zip(bodies, ("/chat/completions", "/chat/completions", "/completions")):
            post(base, body, path)
            assert [json.loads(line) for line in log.read_text().splitlines()][-1] == body  # on disk before the reply
    assert [json.loads(line) for line in log.read_text().splitlines()] == bodies  # refused ones too
    result = shardeval_cmd("sim", "--port", "0", "--log-requests", str(tmp_path / "no" / "such" / "dir"), timeout=30)
    assert result.returncode == 2 and "--log-requests" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_a_judge_is_never_asked_with_the_models_thinking(tmp_path: Path) -> None:
    """A reasoning model (inline, the hardest to split) judged by a reasoning judge that logs what it
    is asked: every judge request holds the model's answer and none of its thinking."""
    log = tmp_path / "judge.jsonl"
    with (
        running_sim("--bench", "arith", "--accuracy", "0.5", "--reasoning-form", "inline", *FAST) as model,
        running_sim(
            "--model", "judge", "--bench", "arith", "--judge-quality", "1", "--reasoning-form", "field", "--log-requests", str(log), *FAST
        ) as judge,
    ):
        config = {
            "services": {"model": {"type": "api", "url": model, "model": "sim"}, "judge": {"type": "api", "url": judge, "model": "judge"}},
            "benchmarks": [
                {
                    "name": "arith",
                    "params": {"n": 12},
                    "max_concurrent": 4,
                    "solver": {"service": "model", "generation": {"max_tokens": 512}},
                    "judge": {"service": "judge"},
                }
            ],
            "output": {"progress_interval_s": 0},
        }
        (tmp_path / "config.json").write_text(json.dumps(config))
        done = shardeval_cmd("run", str(tmp_path / "config.json"), "-o", str(tmp_path / "out"))
        assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in (tmp_path / "out" / "arith" / "results.jsonl").read_text().splitlines()]
    asked = [json.dumps(json.loads(line)) for line in log.read_text().splitlines()]
    assert len(records) == len(asked) == 12 and all(r["status"] == "ok" for r in records)
    for r in records:
        assert r["reasoning"] and r["reasoning_tokens"] == 64 and r["reasoning_tokens_from"] == "usage"
        thinking = json.dumps(r["reasoning"])[1:-1]
        assert not any(thinking in body or "<think>" in body or "so the answer is ####" in body for body in asked)
        assert sum(json.dumps(r["answer"].strip())[1:-1] in body for body in asked) >= 1  # the answer is what was judged
        assert (r["score"] >= 0.8) == (r["response"].rsplit("####", 1)[-1].strip() == r["reference"])


# --- the service --------------------------------------------------------------------------------------


def test_service_config_identity_and_command_line() -> None:
    from shardeval_sim.config import SimServiceConfig, sim_argv

    plain = SimServiceConfig(type="sim")
    assert not {"reasoning_form", "reasoning_tokens", "reasoning_tokens_tail", "usage_reasoning_tokens"} & set(plain.identity())
    assert not {"--reasoning-form", "--reasoning-tokens", "--no-usage-reasoning-tokens", "--log-requests"} & set(sim_argv(plain, ["x"]))
    # the knobs of a model that does not think change nothing, so they do not count
    assert SimServiceConfig(type="sim", reasoning_tokens=9, reasoning_tokens_tail=1.5).identity() == plain.identity()
    field = SimServiceConfig(type="sim", reasoning_form="field")
    assert field.identity() == {**plain.identity(), "reasoning_form": "field"}
    tuned = msgspec.convert(
        {
            "type": "sim",
            "reasoning_form": "inline",
            "reasoning_tokens": 9,
            "reasoning_tokens_tail": 1.5,
            "usage_reasoning_tokens": False,
            "log_requests": "/tmp/x.jsonl",
            "reasoning": {"effort": "low"},
        },
        SimServiceConfig,
    )
    assert tuned.identity() == {**plain.identity(), "reasoning_form": "inline", "reasoning_tokens": 9, "reasoning_tokens_tail": 1.5}
    assert tuned.reasoning is not None and tuned.reasoning.effort == "low"  # the service's ask of the model is another key
    argv = sim_argv(tuned, ["x"])
    for flag, value in (
        ("--reasoning-form", "inline"),
        ("--reasoning-tokens", "9"),
        ("--reasoning-tokens-tail", "1.5"),
        ("--log-requests", "/tmp/x.jsonl"),
    ):
        assert argv[argv.index(flag) + 1] == value
    assert "--no-usage-reasoning-tokens" in argv
    for bad in ({"reasoning_form": "tags"}, {"reasoning_tokens": 0}, {"reasoning_tokens_tail": 0}):
        with pytest.raises(msgspec.ValidationError, match=next(iter(bad))):
            msgspec.convert({"type": "sim", **bad}, SimServiceConfig)


def test_cli_refuses_an_unknown_form_in_one_line() -> None:
    result = shardeval_cmd("sim", "--port", "0", "--reasoning-form", "tags", timeout=30)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1 and "--reasoning-form" in result.stderr
