"""The simulator as its users see it: the official OpenAI client, raw HTTP for faults, the CLI.

Every server is a real `shardeval sim` process on 127.0.0.1 (conftest.running_sim).
"""

from __future__ import annotations

import asyncio
import functools
import math
import os
import signal
import subprocess
import sys
import time
from typing import Any
from collections.abc import Iterator

import aiohttp
import msgspec
import openai
import pytest
from conftest import running_sim, shardeval_cmd

from shardeval.run.service import ServiceContext

TESTS = os.path.dirname(os.path.abspath(__file__))
FAST = ("--ttft-ms", "0", "--itl-ms", "0")
FAKE_ENV = {"SHARDEVAL_PLUGINS": "sim_fake_bench_plugin", "PYTHONPATH": TESTS}


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with running_sim(*FAST, "--seed", "5") as base:
        yield base


@functools.cache
def client(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base, api_key="unused", max_retries=0, timeout=20)


def ask(base: str, content: str, **kw: Any) -> Any:
    return client(base).chat.completions.create(model="sim", messages=[{"role": "user", "content": content}], **kw)


@pytest.fixture(scope="module")
def fake_env() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        for key, value in FAKE_ENV.items():
            mp.setenv(key, value)
        yield


# --- the OpenAI API surface -------------------------------------------------------------------


def test_models_and_health(url: str) -> None:
    models = client(url).models.list()
    assert [m.id for m in models.data] == ["sim"]

    async def health() -> int:
        async with aiohttp.ClientSession() as s, s.get(url.replace("/v1", "/health")) as r:
            return r.status

    assert asyncio.run(health()) == 200


def test_chat_streaming_with_usage(url: str) -> None:
    stream = ask(url, "What is one plus one?", stream=True, stream_options={"include_usage": True}, seed=1)
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    content = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(content) == 32  # one chunk per token (word)
    assert content[-1].choices[0].finish_reason == "stop"
    usage_chunk = chunks[-1]
    assert usage_chunk.choices == [] and usage_chunk.usage is not None
    assert usage_chunk.usage.completion_tokens == 32
    assert usage_chunk.usage.prompt_tokens == 5
    assert usage_chunk.usage.total_tokens == 37
    text = "".join(c.choices[0].delta.content for c in content)
    assert text.split()[-2] == "####" and text.split()[-1].isdigit()


def test_chat_streaming_without_usage_has_no_usage_chunk(url: str) -> None:
    chunks = list(ask(url, "hello", stream=True, seed=1))
    assert all(c.choices for c in chunks)
    assert all(c.usage is None for c in chunks)


def test_chat_non_streaming(url: str) -> None:
    done = ask(url, "What is one plus one?", seed=1)
    assert done.choices[0].finish_reason == "stop"
    assert done.choices[0].message.role == "assistant"
    assert done.usage.completion_tokens == 32 and done.usage.prompt_tokens == 5
    streamed = "".join(c.choices[0].delta.content or "" for c in ask(url, "What is one plus one?", stream=True, seed=1))
    assert done.choices[0].message.content == streamed


def test_completions_streaming_and_not(url: str) -> None:
    c = client(url)
    done = c.completions.create(model="sim", prompt="Two plus two is", seed=9)
    assert done.choices[0].finish_reason == "stop" and done.usage.prompt_tokens == 4
    chunks = list(c.completions.create(model="sim", prompt="Two plus two is", seed=9, stream=True, stream_options={"include_usage": True}))
    text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
    assert text == done.choices[0].text
    assert chunks[-1].usage.completion_tokens == 32
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == "stop"


def test_max_tokens_truncates_with_finish_reason_length(url: str) -> None:
    done = ask(url, "long question", max_tokens=5, seed=2)
    assert done.choices[0].finish_reason == "length"
    assert done.usage.completion_tokens == 5 and len(done.choices[0].message.content.split()) == 5
    chunks = list(ask(url, "long question", max_tokens=5, seed=2, stream=True, stream_options={"include_usage": True}))
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].usage.completion_tokens == 5
    newer = ask(url, "long question", max_completion_tokens=3, seed=2)
    assert newer.choices[0].finish_reason == "length" and newer.usage.completion_tokens == 3
    compl = client(url).completions.create(model="sim", prompt="x y", max_tokens=2)
    assert compl.choices[0].finish_reason == "length" and compl.usage.completion_tokens == 2


def test_unknown_model_is_404_like_vllm(url: str) -> None:
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client(url).chat.completions.create(model="gpt-nope", messages=[{"role": "user", "content": "hi"}])


def test_bad_request_is_400(url: str) -> None:
    with pytest.raises(openai.BadRequestError):
        client(url).chat.completions.create(model="sim", messages=[])


def test_deterministic_per_prompt_and_seed(url: str) -> None:
    first = ask(url, "Same question?", seed=42).choices[0].message.content
    assert ask(url, "Same question?", seed=42).choices[0].message.content == first
    others = {ask(url, "Same question?", seed=s).choices[0].message.content for s in range(43, 48)}
    assert others - {first}, "different seeds should give different replies"
    greedy = {ask(url, "Same question?", seed=s, temperature=0).choices[0].message.content for s in range(5)}
    assert len(greedy) == 1, "temperature 0 is greedy: the seed does not matter"
    with running_sim(*FAST, "--seed", "5") as again:  # a fresh process with the same --seed agrees
        assert ask(again, "Same question?", seed=42).choices[0].message.content == first


def test_timing_ttft_and_itl() -> None:
    async def measure(base: str) -> tuple[float, float]:
        body = {"model": "sim", "messages": [{"role": "user", "content": "t"}], "stream": True}
        async with aiohttp.ClientSession() as s:
            t0 = time.monotonic()
            first = None
            async with s.post(base + "/chat/completions", json=body) as r:
                async for line in r.content:
                    if first is None and b'"content":"' in line and b'"role"' not in line:
                        first = time.monotonic() - t0
            return first or 0.0, time.monotonic() - t0

    with running_sim("--ttft-ms", "200", "--itl-ms", "20", "--output-tokens", "11") as base:
        ttft, total = asyncio.run(measure(base))
    assert 0.18 <= ttft < 1.0
    assert total >= 0.2 + 10 * 0.02 - 0.02


def test_heavy_tailed_lengths_follow_pareto_and_are_capped() -> None:
    from shardeval_sim.answers import output_length, TAIL_CAP

    alpha, base, n = 1.2, 10, 20_000
    lengths = [output_length(f"problem {i}", base, alpha) for i in range(n)]
    assert lengths == [output_length(f"problem {i}", base, alpha) for i in range(n)]  # a pure function of the prompt
    assert min(lengths) == base and max(lengths) == TAIL_CAP * base  # never shorter than output_tokens; the cap bites
    median = sorted(lengths)[n // 2]
    assert abs(median - base * 2 ** (1 / alpha)) <= 1  # P(X > x) = x**-alpha: median 2**(1/alpha)
    for times in (4, 30):  # the tail: P(length >= times × base) = times**-alpha
        share, truth = sum(length >= times * base for length in lengths) / n, times**-alpha
        assert abs(share - truth) <= 4 * math.sqrt(truth * (1 - truth) / n), (times, share, truth)
    assert {output_length(f"problem {i}", base, None) for i in range(100)} == {base}  # unset: fixed, as before


def test_heavy_tailed_lengths_on_the_wire_are_the_same_for_every_model() -> None:
    from shardeval_sim.answers import output_length

    prompts = [f"Question {i}: how long is this answer?" for i in range(30)]
    tail = ("--output-tokens", "4", "--output-tokens-tail", "1.1")
    with running_sim(*FAST, *tail, "--seed", "1") as one, running_sim(*FAST, *tail, "--seed", "2", "--model", "other") as two:
        got = [ask(one, p, seed=3).usage.completion_tokens for p in prompts]
        other = [
            client(two).chat.completions.create(model="other", messages=[{"role": "user", "content": p}], seed=9).usage.completion_tokens
            for p in prompts
        ]
        streamed = [c for c in ask(one, prompts[0], seed=3, stream=True) if c.choices and c.choices[0].delta.content]
    truth = [output_length(p, 4, 1.1) for p in prompts]
    assert got == other == truth and len(set(truth)) > 5  # another seed, another model: the same lengths
    assert len(streamed) == truth[0]


def test_tail_counts_in_the_identity_only_when_set() -> None:
    from shardeval_sim.config import SimServiceConfig

    plain = SimServiceConfig(type="sim").identity()
    assert "output_tokens_tail" not in plain  # runs from before the knob keep their config hash
    assert SimServiceConfig(type="sim", output_tokens_tail=1.5).identity() == {**plain, "output_tokens_tail": 1.5}
    with pytest.raises(msgspec.ValidationError, match="output_tokens_tail"):
        msgspec.convert({"type": "sim", "output_tokens_tail": 0}, SimServiceConfig)


# --- answers: accuracy against a known truth --------------------------------------------------


def _fraction_correct(base: str, bench: Any, n: int, seed_base: int = 0) -> float:
    async def run() -> list[float]:
        sem = asyncio.Semaphore(32)
        oa = openai.AsyncOpenAI(base_url=base, api_key="unused", max_retries=0)

        async def one(i: int) -> float:
            problem = bench.problem(i)
            async with sem:
                done = await oa.chat.completions.create(
                    model="sim", messages=[{"role": "user", "content": problem.user_text()}], seed=seed_base + i
                )
            return bench.score(problem, done.choices[0].message.content).score

        try:
            return await asyncio.gather(*(one(i) for i in range(n)))
        finally:
            await oa.close()

    scores = asyncio.run(run())
    return sum(scores) / n


def _within_binomial(observed: float, p: float, n: int) -> bool:
    return abs(observed - p) <= 4 * math.sqrt(p * (1 - p) / n)


def test_accuracy_on_a_plugin_benchmark(fake_env: None) -> None:
    import sim_fake_bench_plugin

    bench = sim_fake_bench_plugin.FakeSums({"n": 300})
    with running_sim(*FAST, "--bench", "fake_sums", "--bench-param", "n=300", "--accuracy", "0.7") as base:
        observed = _fraction_correct(base, bench, 300)
    assert _within_binomial(observed, 0.7, 300), observed
    with running_sim(*FAST, "--bench", "fake_sums", "--accuracy", "1") as base:
        assert _fraction_correct(base, bench, 40) == 1.0
    with running_sim(*FAST, "--bench", "fake_sums", "--accuracy", "0") as base:
        assert _fraction_correct(base, bench, 40) == 0.0


def test_accuracy_on_builtin_arith() -> None:
    from shardeval import plugins

    if "arith" not in plugins.registry().entries["benchmarks"]:
        pytest.skip("the built-in arith benchmark is not registered")
    bench = plugins.registry().get("benchmarks", "arith", where="test").factory({"n": 300})
    with running_sim(*FAST, "--bench", "arith", "--accuracy", "0.7") as base:
        observed = _fraction_correct(base, bench, 300, seed_base=1000)
    assert _within_binomial(observed, 0.7, 300), observed


def test_repeats_of_one_problem_are_independent_draws(fake_env: None) -> None:
    import sim_fake_bench_plugin

    bench = sim_fake_bench_plugin.FakeSums({"n": 1})
    problem = bench.problem(0)
    with running_sim(*FAST, "--bench", "fake_sums", "--accuracy", "0.5") as base:
        scores = [bench.score(problem, ask(base, problem.user_text(), seed=s).choices[0].message.content).score for s in range(60)]
    assert 0 < sum(scores) < 60


# --- faults, observed on the wire -------------------------------------------------------------

CHAT = {"model": "sim", "messages": [{"role": "user", "content": "q"}]}
STREAM = {**CHAT, "stream": True}


async def _post(base: str, body: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    async with aiohttp.ClientSession() as s, s.post(base + "/chat/completions", json=body) as r:
        return r.status, dict(r.headers), await r.read()


def test_fault_429_with_and_without_retry_after() -> None:
    with running_sim(*FAST, "--fail-429", "1", "--retry-after", "3") as base:
        status, headers, body = asyncio.run(_post(base, STREAM))
        assert status == 429 and headers["Retry-After"] == "3"
        assert msgspec.json.decode(body)["error"]["code"] == 429
        with pytest.raises(openai.RateLimitError):
            client(base).chat.completions.create(**CHAT)
    with running_sim(*FAST, "--fail-429", "1", "--retry-after", "0") as base:
        status, headers, _ = asyncio.run(_post(base, CHAT))
        assert status == 429 and "Retry-After" not in headers


def test_fault_5xx_alternates_500_and_503() -> None:
    with running_sim(*FAST, "--fail-5xx", "1") as base:
        statuses = [asyncio.run(_post(base, STREAM))[0] for _ in range(4)]
    assert sorted(set(statuses)) == [500, 503]


def test_faults_are_drawn_per_attempt() -> None:
    async def many(base: str) -> list[int]:
        return [(await _post(base, CHAT))[0] for _ in range(40)]

    with running_sim(*FAST, "--fail-429", "0.5", "--seed", "3") as base:
        statuses = asyncio.run(many(base))
    assert set(statuses) == {200, 429}


def test_fault_reset_mid_stream_and_before_body() -> None:
    async def stream(base: str) -> tuple[list[bytes], BaseException | None]:
        seen: list[bytes] = []
        async with aiohttp.ClientSession() as s:
            try:
                async with s.post(base + "/chat/completions", json=STREAM) as r:
                    assert r.status == 200
                    async for line in r.content:
                        if line.startswith(b"data:"):
                            seen.append(line)
            except aiohttp.ClientError as exc:
                return seen, exc
        return seen, None

    with running_sim(*FAST, "--reset", "1") as base:
        seen, error = asyncio.run(stream(base))
        assert error is not None, "the stream should be cut"
        assert 0 < len(seen) < 10 and not any(b"[DONE]" in line for line in seen)
        with pytest.raises(aiohttp.ClientError):
            asyncio.run(_post(base, CHAT))


def test_fault_stall_goes_quiet_then_finishes() -> None:
    async def gaps(base: str) -> tuple[float, bool]:
        last, biggest, done = None, 0.0, False
        async with aiohttp.ClientSession() as s, s.post(base + "/chat/completions", json=STREAM) as r:
            async for line in r.content:
                now = time.monotonic()
                if line.startswith(b"data:"):
                    if last is not None:
                        biggest = max(biggest, now - last)
                    last = now
                    done = done or b"[DONE]" in line
        return biggest, done

    with running_sim(*FAST, "--stall", "1", "--stall-s", "0.8") as base:
        biggest, done = asyncio.run(gaps(base))
    assert biggest >= 0.7 and done


def test_fault_error_inside_200_stream() -> None:
    with running_sim(*FAST, "--error-200", "1") as base:
        status, _, body = asyncio.run(_post(base, STREAM))
        assert status == 200
        events = [e for e in body.split(b"\n\n") if e]
        last = msgspec.json.decode(events[-1][len(b"data: ") :])
        assert last["error"]["code"] == 500 and b"[DONE]" not in body
        status, _, body = asyncio.run(_post(base, CHAT))
        assert status == 200 and "error" in msgspec.json.decode(body)


# --- the command line -------------------------------------------------------------------------


def test_cli_rejects_rates_that_sum_past_one() -> None:
    result = shardeval_cmd("sim", "--port", "0", "--fail-429", "0.6", "--reset", "0.6", timeout=30)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "sum to 1.2" in result.stderr


def test_cli_unknown_bench_is_one_line() -> None:
    result = shardeval_cmd("sim", "--port", "0", "--bench", "no_such_bench", timeout=30)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "--bench" in result.stderr and "no_such_bench" in result.stderr


def test_cli_bad_bench_param() -> None:
    result = shardeval_cmd("sim", "--port", "0", "--bench-param", "novalue", timeout=30)
    assert result.returncode == 2 and "KEY=VALUE" in result.stderr


def test_cli_port_in_use_is_one_line() -> None:
    with running_sim(*FAST) as base:
        port = base.rsplit(":", 1)[1].split("/")[0]
        result = shardeval_cmd("sim", "--port", port, timeout=30)
    assert result.returncode == 2 and "Traceback" not in result.stderr and f"--port {port}" in result.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stops_cleanly_on_signal(sig: signal.Signals) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "shardeval", "sim", "--port", "0", *FAST],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert "listening on" in (proc.stdout.readline() if proc.stdout else "")
        proc.send_signal(sig)
        assert proc.wait(5) == 0
        assert "Traceback" not in (proc.stderr.read() if proc.stderr else "")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# --- the `sim` service ------------------------------------------------------------------------


def test_service_config_mirrors_cli_flags() -> None:
    from shardeval_sim.command import sim_command
    from shardeval_sim.config import SimServiceConfig
    from shardeval_sim.settings import BEHAVIOUR_KEYS

    flags = {opt for p in sim_command.params for opt in p.opts}
    for key in BEHAVIOUR_KEYS:
        assert "--" + key.replace("_", "-") in flags or key == "bench_params"
        assert key in SimServiceConfig.__struct_fields__
    with pytest.raises(msgspec.ValidationError, match="accuracyy"):
        msgspec.convert({"type": "sim", "accuracyy": 0.5}, SimServiceConfig)


def test_sim_service_starts_serves_and_stops(tmp_path: Any, fake_env: None) -> None:
    from shardeval import plugins
    from shardeval_sim.config import SimServiceConfig

    entry = plugins.registry().get("services", "sim", where="test")
    config = msgspec.convert(
        {"type": "sim", "bench": "fake_sums", "bench_params": {"n": 50}, "accuracy": 1.0, "ttft_ms": 0, "itl_ms": 0, "model": "m1"},
        entry.config,
    )
    assert isinstance(config, SimServiceConfig)
    ctx = ServiceContext(logs_dir=str(tmp_path / "logs"), shard_idx=0, total_shards=1)

    async def go() -> tuple[Any, str, int | None]:
        async with entry.factory("model", config, ctx) as endpoint:
            oa = openai.AsyncOpenAI(base_url=endpoint.base_url, api_key="unused", max_retries=0)
            done = await oa.chat.completions.create(
                model=endpoint.model, messages=[{"role": "user", "content": "Ana has 17 shells and finds 3 more. How many now?"}]
            )
            await oa.close()
            assert endpoint.process is not None and endpoint.process.returncode is None
            return endpoint, done.choices[0].message.content, None

    endpoint, text, _ = asyncio.run(go())
    assert endpoint.model == "m1" and endpoint.base_url.startswith("http://127.0.0.1:")
    assert text.endswith("#### 20")
    assert endpoint.process.returncode is not None  # stopped on exit
    log = (tmp_path / "logs" / "sim.log").read_text()
    assert "shardeval sim listening on" in log


def test_sim_service_fails_clearly_when_the_simulator_cannot_start(tmp_path: Any) -> None:
    from shardeval.errors import ShardError
    from shardeval_sim.config import SimServiceConfig
    from shardeval_sim.service import sim_service

    config = SimServiceConfig(type="sim", bench="no_such_bench")
    ctx = ServiceContext(logs_dir=str(tmp_path), shard_idx=0, total_shards=1)

    async def go() -> None:
        async with sim_service("model", config, ctx):
            pass

    with pytest.raises(ShardError, match="no_such_bench"):
        asyncio.run(go())
